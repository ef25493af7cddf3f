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
	"github.com/pin-platform/pin/ent/leadevent"
)

// FeedEntry is a lead_events row to append.
type FeedEntry struct {
	Type            LeadEventType
	OccurredAt      time.Time
	SourceMessageID uuid.UUID // the MessageId of the event: the storage idempotency key
	Payload         any       // marshalled to the jsonb payload
}

// testHookBeforeWriting, set only by tests, runs in the writer, lead by
// lead, before its statement (writeSQL), to move a lead under the
// consumer's feet (leave Active, bump row_version, change its tenant,
// delete it), at once or while the statement runs (an edit it commits
// once the statement's lock waits for it).
var testHookBeforeWriting func(ctx context.Context, leadID uuid.UUID)

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
	read   *ent.Lead // as Read read it
	n      int64
	newest time.Time
	// The first append's message: a lead that moved is its failure;
	// notFound counts and logs it as its handler does.
	first    *consumer.Message
	notFound func(error) error
}

// append queues entry e of message m on lead l, the lead as the view holds
// it (Active as Read read it; the writer locks it and checks it again),
// and returns the new entry's id: the feed row, with the lead's tenant
// (CRM-4), and the lead's update are written by write. The caller has
// made sure the feed holds no entry of the message (v.inFeed). notFound
// is the handler's report of a lead that is gone at write time.
func (v *view) append(l *ent.Lead, e FeedEntry, now time.Time, m *consumer.Message, notFound func(error) error) (uuid.UUID, error) {
	payload, err := json.Marshal(e.Payload)
	if err != nil {
		return uuid.Nil, fmt.Errorf("marshal the feed payload: %w", err)
	}
	id := consumer.NewRowID()
	v.rows = append(v.rows, queuedEntry{l, e, id, payload})
	v.inFeed[e.SourceMessageID] = l.ID
	bp := v.bumps[l.ID]
	if bp == nil {
		bp = &bump{read: l, first: m, notFound: notFound}
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

// write is the service's Write (spec step 5): one statement, writeSQL,
// inserts the marks it is given (consumer.Marks), appends the
// transaction's feed rows, an entry's tenant its lead's
// (CRM-4), then locks and updates their leads. The feed goes first, so
// that its waits (a second processor's entry in the unique index of
// source messages) come before any lead's lock, which the other lane's
// writer waits for. The feed's foreign-key checks (KEY SHARE, a lookup a
// row) run at the statement's end, on leads the statement holds FOR NO
// KEY UPDATE already: they never wait, and the lock is held for them, the
// update and the commit. What the lock finds (a lead no longer Active,
// another tenant) fails the transaction, the entries with it. One
// statement, not two, is one round trip less per transaction
// (bench/README.md, session 20).
//
// The INSERT has no ON CONFLICT: an entry of the same message written
// since Read looked, past its mark (a second processor of the message
// waits at the mark, inserted first), is a unique violation, a
// lost race, and the runtime runs the transaction again, where Read finds
// the entry and the message is skipped as a duplicate. A lead deleted since
// Read (only one without entries can be) fails the insert's foreign key,
// checked at the statement's end, which names no message: the messages
// run again alone, where Read no longer finds it
// (CRM_SELECTION_LEAD_NOT_FOUND).
func write(ctx context.Context, tx *ent.Tx, v *view, marks *consumer.Marks) error {
	w := &v.writes
	if len(w.rows) == 0 {
		return nil
	}
	ids := consumer.SortedIDs(w.bumps)
	if testHookBeforeWriting != nil {
		for _, id := range ids {
			testHookBeforeWriting(ctx, id)
		}
	}
	q, args := w.writeSQL(ids, marks)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("append the transaction's %d feed entries to its %d leads: %w", len(w.rows), len(ids), err)
	}
	defer rows.Close()
	type state struct {
		lead    *ent.Lead
		updated bool
	}
	now := make(map[uuid.UUID]state, len(ids))
	for rows.Next() {
		l := &ent.Lead{}
		var updated bool
		if err := rows.Scan(&l.ID, &l.Status, &l.RowVersion, &l.TenantID, &l.ExecutorAgentUserID, &l.PrimaryInvestorUserID, &updated); err != nil {
			return fmt.Errorf("append the transaction's %d feed entries to its %d leads: %w", len(w.rows), len(ids), err)
		}
		now[l.ID] = state{l, updated}
	}
	// The foreign-key checks run at the statement's end, after its rows:
	// their failure is the result's error.
	if err := rows.Err(); err != nil {
		return fmt.Errorf("append the transaction's %d feed entries to its %d leads: %w", len(w.rows), len(ids), err)
	}
	for _, id := range ids {
		if st := now[id]; !st.updated {
			return w.moved(id, st.lead)
		}
	}
	return nil
}

// writeSQL is write's statement: the marks (pin_marks, when given), the
// feed rows' INSERT (consumer.InsertRows' text, one whatever the number of
// rows) gated on them, then claimSQL on the leads, ids in id order, gated
// on the insert: the lock's scan starts once every row is in.
//
//   - inserted appends the rows.
//   - locked reads the leads FOR NO KEY UPDATE in id order, which waits
//     for the transactions holding them (the other lanes' writers, the
//     CRM's own edits) and reads each as they left it. Its one-time
//     filter on inserted's count runs the insert whole first; counted in
//     an InitPlan, locked runs whole before the UPDATE's scan (messenger's
//     claimSQL: as a join's inner side it may run again, locking anew).
//   - claimed updates each lead still Active, of the tenant and pair Read
//     resolved it with: row_version + its appends, last_event_at only
//     forward (CRM-3; GREATEST ignores NULL: a first event sets it),
//     updated_at; and returns the row_version it updated.
//   - The rows are the leads as read under the lock, and whether each was
//     updated on the row_version read there (CRM-6): write tells a lead
//     that moved apart (moved), and its failure rolls the transaction back.
//
// The update compares the row_version it found with the lock's after the
// fact, not in its WHERE: a lead another transaction updated while the
// lock waited is rechecked in its newest version (PostgreSQL's
// EvalPlanQual), where a condition on the locking item's rows never
// held (no lead updated).
//
// The status is an argument, not a literal: with the literal, a plan made
// while the table's statistics were stale (never analyzed, as after a
// fresh load) read every Active lead through the partial index of Active
// pairs and hashed them against the ids (1,000 leads for 2 ids: 0.48 ms a
// call); with the argument the planner cannot take that index, and looks
// each id up by the primary key (0.06 ms).
func (w *writes) writeSQL(ids []uuid.UUID, marks *consumer.Marks) (string, []any) {
	var eids, leads, tenants, types, occurred, sources, payloads, created consumer.Array
	for _, r := range w.rows {
		eids.UUID(r.id)
		leads.UUID(r.l.ID)
		tenants.UUID(r.l.TenantID)
		types.Text(string(r.e.Type))
		occurred.Time(r.e.OccurredAt)
		sources.UUID(r.e.SourceMessageID)
		payloads.Text(string(r.payload))
		created.Time(w.now)
	}
	var ns, newest, ltenants, agents, investors consumer.Array
	for _, id := range ids {
		bp := w.bumps[id]
		ns.Int(bp.n)
		newest.Time(bp.newest)
		ltenants.UUID(bp.read.TenantID)
		agents.UUID(bp.read.ExecutorAgentUserID)
		investors.UUID(bp.read.PrimaryInvestorUserID)
	}
	claimArgs := []any{consumer.UUIDArray(ids), w.now, &ns, &newest, &ltenants, &agents, &investors, StatusActive}
	var b sql.Builder
	b.SetDialect(dialect.Postgres)
	b.SetTotal(len(claimArgs)) // the insert's arguments follow the claim's
	b.WriteString("WITH ")
	tail := "RETURNING 1"
	if marks.Item(&b) { // the marks first, whole
		b.WriteString(", ")
		tail = "WHERE " + marks.Gate() + " RETURNING 1"
	}
	b.WriteString("inserted AS (")
	consumer.WriteInsertRows(&b, leadevent.Table, []consumer.Column{
		{Name: leadevent.FieldID, Type: "uuid", Values: &eids},
		{Name: leadevent.FieldLeadID, Type: "uuid", Values: &leads},
		{Name: leadevent.FieldTenantID, Type: "uuid", Values: &tenants},
		{Name: leadevent.FieldType, Type: "text", Values: &types},
		{Name: leadevent.FieldOccurredAt, Type: "timestamptz", Values: &occurred},
		{Name: leadevent.FieldSourceMessageID, Type: "uuid", Values: &sources},
		{Name: leadevent.FieldPayload, Type: "jsonb", Values: &payloads},
		{Name: leadevent.FieldCreatedAt, Type: "timestamptz", Values: &created},
	}, tail)
	b.WriteString("),\n" + claimSQL)
	q, insertArgs := b.Query()
	return q, append(claimArgs, insertArgs...)
}

// claimSQL is writeSQL's part after the insert (inserted), on arguments
// $1–$8: the leads' ids in id order, updated_at, then, lead by lead, its
// appends, its newest OccurredAt and the tenant, agent and investor Read
// resolved it with; the status, Active.
const claimSQL = `locked AS MATERIALIZED (
  SELECT id, status, row_version, tenant_id, executor_agent_user_id, primary_investor_user_id
  FROM leads WHERE id = ANY($1::uuid[]) AND (SELECT count(*) FROM inserted) >= 0 ORDER BY id FOR NO KEY UPDATE),
claimed AS (
  UPDATE leads AS l
  SET updated_at = $2, row_version = l.row_version + u.n, last_event_at = GREATEST(l.last_event_at, u.newest)
  FROM unnest($1::uuid[], $3::bigint[], $4::timestamptz[], $5::uuid[], $6::uuid[], $7::uuid[]) AS u(id, n, newest, tenant, agent, investor)
  WHERE (SELECT count(*) FROM locked) >= 0 AND l.id = u.id AND l.status = $8
    AND l.tenant_id = u.tenant AND l.executor_agent_user_id = u.agent AND l.primary_investor_user_id = u.investor
  RETURNING l.id, l.row_version - u.n AS was)
SELECT k.id, k.status, k.row_version, k.tenant_id, k.executor_agent_user_id, k.primary_investor_user_id,
  c.was IS NOT DISTINCT FROM k.row_version
FROM locked AS k LEFT JOIN claimed AS c ON c.id = k.id`

// sameLead reports whether cur is still the lead Read resolved for the
// appends: the same tenant (CRM-4) and pair.
func (bp *bump) sameLead(cur *ent.Lead) bool {
	return cur.TenantID == bp.read.TenantID && cur.ExecutorAgentUserID == bp.read.ExecutorAgentUserID &&
		cur.PrimaryInvestorUserID == bp.read.PrimaryInvestorUserID
}

// moved is the failure of the transaction's first append to lead id, which
// is no longer as Read read it: cur is the lead now, nil when it is gone.
// Gone → CRM_SELECTION_LEAD_NOT_FOUND (counted and logged as the handler
// does), no longer Active → CRM_LEAD_NOT_ACTIVE (CRM-1), else (another
// pair or tenant, or a row_version moved under the update) a race with an
// edit of the lead: CRM_CONCURRENT_UPDATE, re-run at once on a fresh read.
func (w *writes) moved(id uuid.UUID, cur *ent.Lead) error {
	bp := w.bumps[id]
	var err error
	switch {
	case cur == nil:
		err = bp.notFound(CodeLeadNotFound.Errorf("lead %s disappeared between its read and the write", id))
	case cur.Status != StatusActive:
		err = CodeLeadNotActive.Errorf("lead %s left Active (now %s) between its read and the write (CRM-1)", id, cur.Status)
	case !bp.sameLead(cur):
		err = CodeConcurrentUpdate.Errorf("lead %s changed its pair or tenant since it was read", id)
	default:
		err = CodeConcurrentUpdate.Errorf("lead %s changed concurrently (row_version %d under the lock, not updated)", id, cur.RowVersion)
	}
	return consumer.FailMessage(bp.first, err)
}
