package crm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/lead"
	"github.com/pin-platform/pin/ent/leadevent"
)

// pair is a lead's resolution key: (executor agent, primary investor).
type pair struct{ agent, investor uuid.UUID }

type batchKey struct{}

// batch is a prepared batch: its leads, locked, and the writes its handlers
// queued for the end of the batch.
type batch struct {
	tx    *ent.Tx
	leads map[pair]*ent.Lead
	// inFeed maps the MessageIds of the batch that the feed has already
	// (source_message_id), and those queued since, to their lead.
	inFeed map[uuid.UUID]uuid.UUID
	rows   []*ent.LeadEventCreate
	bumps  map[uuid.UUID]*bump // by lead
	now    time.Time
}

// bump is what the batch does to one lead: n appends, the newest
// OccurredAt, on the row_version read.
type bump struct {
	version int64
	n       int64
	newest  time.Time
}

// prepare resolves the Active leads of every (agent, investor) pair of the
// batch with one statement and locks them FOR NO KEY UPDATE in id order.
//
// The events of one lead arrive on every partition (the key is the
// SelectionId), and each appends to the feed and bumps the lead's
// row_version. Without the up-front lock, the batches of two partitions
// lock the same leads in different orders as their handlers reach them,
// and PostgreSQL breaks the cycle after deadlock_timeout by rolling one
// batch back. Locked in one order, they wait for each other instead. NO
// KEY UPDATE is what the lead's own UPDATE takes; it does not block the
// feed inserts' foreign-key checks (KEY SHARE).
//
// A pair without an Active lead is left to its handler, which reads the
// table again and reports it; so is a message whose payload does not
// decode (prepare decodes the handler's type, which the handler then
// reuses: it reports the same error).
func prepare(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
	seen := make(map[pair]bool, len(msgs))
	var agents, investors []string
	msgIDs := make([]uuid.UUID, 0, len(msgs))
	for _, m := range msgs {
		msgIDs = append(msgIDs, m.MessageID)
		w, err := consumer.DecodePayload[wirePayload](m) // the handler's, decoded once
		if err != nil || w.AgentUserID == nil || w.InvestorUserID == nil {
			continue
		}
		a, err1 := uuid.Parse(*w.AgentUserID)
		i, err2 := uuid.Parse(*w.InvestorUserID)
		if err1 != nil || err2 != nil || seen[pair{a, i}] {
			continue
		}
		seen[pair{a, i}] = true
		agents, investors = append(agents, a.String()), append(investors, i.String())
	}
	if len(agents) == 0 {
		return ctx, nil
	}
	found, err := tx.Lead.Query().
		Where(lead.Status(StatusActive), func(s *sql.Selector) {
			s.Where(sql.P(func(b *sql.Builder) {
				b.WriteByte('(').Ident(s.C(lead.FieldExecutorAgentUserID)).Comma().Ident(s.C(lead.FieldPrimaryInvestorUserID)).
					WriteString(") IN (SELECT * FROM unnest(").Arg(pq.Array(agents)).WriteString("::uuid[], ").
					Arg(pq.Array(investors)).WriteString("::uuid[]))")
			}))
		}).
		Order(ent.Asc(lead.FieldID)).
		Modify(func(s *sql.Selector) { s.For(sql.LockNoKeyUpdate) }).
		All(ctx)
	if err != nil {
		return nil, err
	}
	b := &batch{tx: tx, leads: make(map[pair]*ent.Lead, len(found)), inFeed: map[uuid.UUID]uuid.UUID{}, bumps: map[uuid.UUID]*bump{}}
	for _, l := range found {
		b.leads[pair{l.ExecutorAgentUserID, l.PrimaryInvestorUserID}] = l
	}
	if len(found) == 0 {
		return ctx, nil
	}
	// The feed's second idempotency layer, for the whole batch at once.
	var have []struct {
		Source uuid.UUID `json:"source_message_id"`
		Lead   uuid.UUID `json:"lead_id"`
	}
	if err := tx.LeadEvent.Query().
		Where(leadevent.SourceMessageIDIn(msgIDs...)).
		Select(leadevent.FieldSourceMessageID, leadevent.FieldLeadID).
		Scan(ctx, &have); err != nil {
		return nil, err
	}
	for _, r := range have {
		b.inFeed[r.Source] = r.Lead
	}
	if !consumer.BeforeCommit(ctx, b.flush) {
		return ctx, nil // not a batch after all: the handlers write themselves
	}
	return context.WithValue(ctx, batchKey{}, b), nil
}

// batchOf is the prepared batch of ctx, or nil.
func batchOf(ctx context.Context) *batch {
	b, _ := ctx.Value(batchKey{}).(*batch)
	return b
}

// preparedLead is the pair's Active lead as prepare locked it, kept in step
// with the batch's appends, or nil.
func preparedLead(ctx context.Context, agent, investor uuid.UUID) *ent.Lead {
	if b := batchOf(ctx); b != nil {
		return b.leads[pair{agent, investor}]
	}
	return nil
}

// append is appendEvent for a lead that prepare locked: the same rules, but
// the feed row and the lead's update are queued for flush. The caller has
// made sure the feed holds no entry of the message (b.inFeed). The lead is
// locked by this transaction since prepare, so it cannot leave Active or
// change under the batch.
func (b *batch) append(l *ent.Lead, e FeedEntry, now time.Time) (uuid.UUID, error) {
	if l.Status != StatusActive {
		return uuid.Nil, CodeLeadNotActive.Errorf("lead %s is %s, not Active (CRM-1)", l.ID, l.Status)
	}
	payload, err := json.Marshal(e.Payload)
	if err != nil {
		return uuid.Nil, fmt.Errorf("marshal the feed payload: %w", err)
	}
	id := uuid.New()
	b.rows = append(b.rows, newFeedRow(b.tx, l, e, id, payload, now))
	b.inFeed[e.SourceMessageID] = l.ID
	bp := b.bumps[l.ID]
	if bp == nil {
		bp = &bump{version: l.RowVersion}
		b.bumps[l.ID] = bp
	}
	bp.n++
	if e.OccurredAt.After(bp.newest) {
		bp.newest = e.OccurredAt
	}
	b.now = now
	return id, nil
}

// flush writes what the batch queued: the feed rows with one INSERT, the
// leads with one UPDATE (row_version + the lead's appends, last_event_at =
// greatest(last_event_at, its newest OccurredAt), updated_at), conditioned
// per lead on the row_version read and on status Active. Any surprise — a
// feed row that exists after all, a lead that moved — fails the batch,
// which the runtime then replays one message at a time.
func (b *batch) flush(ctx context.Context) error {
	if len(b.rows) == 0 {
		return nil
	}
	tx := b.tx
	for _, part := range consumer.Chunks(b.rows, 9) { // 9 columns a feed entry
		if err := tx.LeadEvent.CreateBulk(part...).Exec(ctx); err != nil {
			return fmt.Errorf("insert the batch's %d feed entries: %w", len(b.rows), err)
		}
	}
	ids := consumer.SortedIDs(b.bumps)
	// CASE id WHEN … THEN … END: one value per lead, in one statement.
	byLead := func(cast string, v func(*bump) any) sql.Querier {
		return consumer.CaseOf(lead.FieldID, ids, b.bumps, cast, v)
	}
	n, err := tx.Lead.Update().
		Where(lead.IDIn(ids...), lead.Status(StatusActive), func(s *sql.Selector) {
			s.Where(sql.P(func(sb *sql.Builder) {
				sb.Ident(lead.FieldRowVersion).WriteString(" = ").Join(byLead("bigint", func(bp *bump) any { return bp.version }))
			}))
		}).
		SetUpdatedAt(b.now).
		Modify(func(u *sql.UpdateBuilder) {
			u.Set(lead.FieldRowVersion, sql.ExprFunc(func(sb *sql.Builder) {
				sb.Ident(lead.FieldRowVersion).WriteString(" + ").Join(byLead("bigint", func(bp *bump) any { return bp.n }))
			}))
			u.Set(lead.FieldLastEventAt, sql.ExprFunc(func(sb *sql.Builder) {
				// GREATEST ignores NULL: a first event sets it.
				sb.WriteString("GREATEST(").Ident(lead.FieldLastEventAt).Comma().
					Join(byLead("timestamptz", func(bp *bump) any { return bp.newest })).WriteByte(')')
			}))
		}).
		Save(ctx)
	if err != nil {
		return fmt.Errorf("update the batch's %d leads: %w", len(ids), err)
	}
	if n != len(ids) {
		return fmt.Errorf("update the batch's %d leads: %d updated (a lead moved under its lock?)", len(ids), n)
	}
	return nil
}
