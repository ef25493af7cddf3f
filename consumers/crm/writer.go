package crm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/lead"
)

// FeedEntry is a lead_events row to append.
type FeedEntry struct {
	Type            LeadEventType
	OccurredAt      time.Time
	SourceMessageID uuid.UUID // the MessageId of the event: the storage idempotency key
	Payload         any       // marshalled to the jsonb payload
}

// testHookBeforeWrite, set only by tests, runs in the writer before it
// updates a lead, to move the lead under the consumer's feet (leave
// Active, bump row_version).
var testHookBeforeWrite func(ctx context.Context, leadID uuid.UUID)

// writes are the appends a transaction's handlers queued on its view: the
// feed rows, and what they do to each lead.
type writes struct {
	rows  []queuedEntry
	bumps map[uuid.UUID]*bump // by lead
	now   time.Time
}

func newWrites() writes {
	return writes{bumps: map[uuid.UUID]*bump{}}
}

// bump is what the transaction does to one lead: n appends, the newest
// OccurredAt, on the row_version read.
type bump struct {
	version int64
	n       int64
	newest  time.Time
	// The first append's message: a lead that moved is its failure;
	// notFound counts and logs it as its handler does.
	first    *consumer.Message
	notFound func(error) error
}

// append queues entry e of message m on lead l, the lead as the view holds
// it (Active, locked since Read), and returns the new entry's id: the
// feed row, with the lead's tenant (CRM-4), and the lead's update are
// written by flush. The caller has made sure the feed holds no entry of
// the message (v.inFeed). notFound is the handler's report of a lead that
// is gone at write time.
func (v *view) append(l *ent.Lead, e FeedEntry, now time.Time, m *consumer.Message, notFound func(error) error) (uuid.UUID, error) {
	payload, err := json.Marshal(e.Payload)
	if err != nil {
		return uuid.Nil, fmt.Errorf("marshal the feed payload: %w", err)
	}
	id := uuid.New()
	v.rows = append(v.rows, queuedEntry{l, e, id, payload})
	v.inFeed[e.SourceMessageID] = l.ID
	bp := v.bumps[l.ID]
	if bp == nil {
		bp = &bump{version: l.RowVersion, first: m, notFound: notFound}
		v.bumps[l.ID] = bp
	}
	bp.n++
	if e.OccurredAt.After(bp.newest) {
		bp.newest = e.OccurredAt
	}
	v.now = now
	return id, nil
}

// queuedEntry is a queued lead_events row: entry e, with the marshalled
// payload, on lead l.
type queuedEntry struct {
	l       *ent.Lead
	e       FeedEntry
	id      uuid.UUID
	payload []byte
}

// create is the INSERT of the row: the entry's tenant is the lead's.
func (r queuedEntry) create(tx *ent.Tx, now time.Time) *ent.LeadEventCreate {
	return tx.LeadEvent.Create().
		SetID(r.id).
		SetLeadID(r.l.ID).
		SetTenantID(r.l.TenantID).
		SetType(string(r.e.Type)).
		SetOccurredAt(r.e.OccurredAt).
		SetSourceMessageID(r.e.SourceMessageID).
		SetPayload(r.payload).
		SetCreatedAt(now)
}

// write is the service's Write: it writes what the transaction queued (spec step 5): the leads first
// (claimLeads), then the feed rows with one INSERT. The INSERT has no ON
// CONFLICT: an entry of the same message that another processor wrote
// since Read looked is a unique violation, a lost race, and the runtime
// runs the transaction again, where Read finds the entry and the
// message is skipped as a duplicate.
func write(ctx context.Context, tx *ent.Tx, v *view) error {
	w := &v.writes
	if len(w.rows) == 0 {
		return nil
	}
	if err := w.claimLeads(ctx, tx); err != nil {
		return err
	}
	creates := make([]*ent.LeadEventCreate, len(w.rows))
	for i, r := range w.rows {
		creates[i] = r.create(tx, w.now)
	}
	for _, part := range consumer.Chunks(creates, 9) { // 9 columns a feed entry
		if err := tx.LeadEvent.CreateBulk(part...).Exec(ctx); err != nil {
			return fmt.Errorf("insert the transaction's %d feed entries: %w", len(w.rows), err)
		}
	}
	return nil
}

// claimLeads updates the transaction's leads with one UPDATE — row_version
// + the lead's appends, last_event_at = greatest(last_event_at, its newest
// OccurredAt) so that it only moves forward (CRM-3), updated_at —
// conditioned per lead on the row_version read and on status Active
// (CRM-1, CRM-6). Read locked the leads, so the condition holds; a
// lead it misses is re-read, as the spec says: gone →
// CRM_SELECTION_LEAD_NOT_FOUND, no longer Active → CRM_LEAD_NOT_ACTIVE,
// else CRM_CONCURRENT_UPDATE, the failure of the transaction's first
// append to the lead.
func (w *writes) claimLeads(ctx context.Context, tx *ent.Tx) error {
	ids := consumer.SortedIDs(w.bumps)
	if testHookBeforeWrite != nil {
		for _, id := range ids {
			testHookBeforeWrite(ctx, id)
		}
	}
	in := make([]any, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	// CASE id WHEN … THEN … END: one value per lead, in one statement.
	byLead := func(cast string, v func(*bump) any) sql.Querier {
		return consumer.CaseOf(lead.FieldID, ids, w.bumps, cast, v)
	}
	query, args := sql.Dialect(dialect.Postgres).Update(lead.Table).
		Set(lead.FieldUpdatedAt, w.now).
		Set(lead.FieldRowVersion, sql.ExprFunc(func(sb *sql.Builder) {
			sb.Ident(lead.FieldRowVersion).WriteString(" + ").Join(byLead("bigint", func(bp *bump) any { return bp.n }))
		})).
		Set(lead.FieldLastEventAt, sql.ExprFunc(func(sb *sql.Builder) {
			// GREATEST ignores NULL: a first event sets it.
			sb.WriteString("GREATEST(").Ident(lead.FieldLastEventAt).Comma().
				Join(byLead("timestamptz", func(bp *bump) any { return bp.newest })).WriteByte(')')
		})).
		Where(sql.And(
			sql.In(lead.FieldID, in...),
			sql.EQ(lead.FieldStatus, StatusActive),
			sql.P(func(sb *sql.Builder) {
				sb.Ident(lead.FieldRowVersion).WriteString(" = ").Join(byLead("bigint", func(bp *bump) any { return bp.version }))
			}),
		)).
		Returning(lead.FieldID).
		Query()
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("update the transaction's %d leads: %w", len(ids), err)
	}
	defer rows.Close()
	updated := make(map[uuid.UUID]bool, len(ids))
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("update the transaction's %d leads: %w", len(ids), err)
		}
		updated[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("update the transaction's %d leads: %w", len(ids), err)
	}
	for _, id := range ids {
		if !updated[id] {
			return w.missed(ctx, tx, id)
		}
	}
	return nil
}

// missed is the failure of a lead the conditional update missed: re-read
// (read committed: this sees the change), it tells a lead that left Active
// or is gone from one that was only edited.
func (w *writes) missed(ctx context.Context, tx *ent.Tx, id uuid.UUID) error {
	bp := w.bumps[id]
	cur, err := tx.Lead.Query().Where(lead.ID(id)).Select(lead.FieldStatus, lead.FieldRowVersion).Only(ctx)
	switch {
	case ent.IsNotFound(err):
		err = bp.notFound(CodeLeadNotFound.Errorf("lead %s disappeared between its read and the write", id))
	case err != nil:
		return fmt.Errorf("re-read lead %s: %w", id, err)
	case cur.Status != StatusActive:
		err = CodeLeadNotActive.Errorf("lead %s left Active (now %s) between its read and the write (CRM-1)", id, cur.Status)
	default:
		err = CodeConcurrentUpdate.Errorf("lead %s changed concurrently (row_version %d read, %d now)", id, bp.version, cur.RowVersion)
	}
	return consumer.FailMessage(bp.first, err)
}
