package crm

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/lead"
	"github.com/pin-platform/pin/ent/leadevent"
)

// StatusActive is the only lead status that accepts feed entries
// (CRM-1). The others are Expired and Archived.
const StatusActive = "Active"

// resolveActiveLead returns the one Active lead of the pair (executor agent,
// primary investor), unique by ux_leads_active_pair, or nil when there is
// none.
//
// In a batch, prepare has resolved and locked it already. On its own (the
// first message of a fetch, a batch's one-at-a-time replay, a re-run) the
// message reads the lead optimistically, as the spec says: appendEvent's
// update is conditioned on the row_version read. But the lead may be
// locked by another partition's batch that is about to bump that version:
// read as it was committed before, the message would lose to every such
// batch, and under load its three re-runs too. So the read waits for the
// lead's lock holders first — it takes the row lock inside a savepoint and
// rolls the savepoint back, which releases the lock at once — and returns
// the lead as they left it. A writer that comes after the read is a
// concurrent edit (CRM_CONCURRENT_UPDATE), as before.
func resolveActiveLead(ctx context.Context, tx *ent.Tx, agent, investor uuid.UUID) (*ent.Lead, error) {
	if l := preparedLead(ctx, agent, investor); l != nil {
		return l, nil
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT crm_resolve"); err != nil {
		return nil, fmt.Errorf("resolve the Active lead of agent %s and investor %s: %w", agent, investor, err)
	}
	l, err := tx.Lead.Query().
		Where(
			lead.ExecutorAgentUserID(agent),
			lead.PrimaryInvestorUserID(investor),
			lead.Status(StatusActive),
		).
		Modify(func(s *sql.Selector) { s.For(sql.LockNoKeyUpdate) }).
		Only(ctx)
	// Also restores the transaction after a failed read.
	if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT crm_resolve; RELEASE SAVEPOINT crm_resolve"); rerr != nil && err == nil {
		err = rerr
	}
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve the Active lead of agent %s and investor %s: %w", agent, investor, err)
	}
	return l, nil
}

// FeedEntry is a lead_events row to append.
type FeedEntry struct {
	Type            LeadEventType
	OccurredAt      time.Time
	SourceMessageID uuid.UUID // the MessageId of the event: the storage idempotency key
	Payload         any       // marshalled to the jsonb payload
}

// testHookBeforeWrite, set only by tests, runs in appendEvent between the
// read of the lead and the writes, to move the lead under the consumer's
// feet (leave Active, bump row_version).
var testHookBeforeWrite func(ctx context.Context, leadID uuid.UUID)

// inFeed returns the lead whose feed holds an entry of the message
// already (source_message_id, the storage idempotency layer), or uuid.Nil.
func inFeed(ctx context.Context, tx *ent.Tx, messageID uuid.UUID) (uuid.UUID, error) {
	ids, err := tx.LeadEvent.Query().Where(leadevent.SourceMessageID(messageID)).
		Select(leadevent.FieldLeadID).Strings(ctx)
	if err != nil {
		return uuid.Nil, fmt.Errorf("look for the feed entry of message %s: %w", messageID, err)
	}
	if len(ids) == 0 {
		return uuid.Nil, nil
	}
	return uuid.Parse(ids[0])
}

// newFeedRow is the lead_events row of entry e on lead l: the entry's tenant
// is the lead's.
func newFeedRow(tx *ent.Tx, l *ent.Lead, e FeedEntry, id uuid.UUID, payload []byte, now time.Time) *ent.LeadEventCreate {
	return tx.LeadEvent.Create().
		SetID(id).
		SetLeadID(l.ID).
		SetTenantID(l.TenantID).
		SetType(string(e.Type)).
		SetOccurredAt(e.OccurredAt).
		SetSourceMessageID(e.SourceMessageID).
		SetPayload(payload).
		SetCreatedAt(now)
}

// appendEvent appends e to the feed of l, the lead as read in tx, for a
// message handled on its own (a batch queues its appends: batch.append).
// The caller has made sure the feed holds no entry of the message
// (inFeed). It returns the new entry's id. It is the lead aggregate's write
// path for feed entries:
//
//   - CRM-1: the lead must be Active, as read and still at write time
//     (the update is conditioned on it); otherwise CodeLeadNotActive and
//     nothing is appended;
//   - the lead's last_event_at = greatest(last_event_at, OccurredAt), so an
//     older event never moves it back; updated_at = now;
//   - row_version is bumped, conditioned on the version read (optimistic
//     lock): a lead changed since the read is CodeConcurrentUpdate (re-run
//     at once in a fresh transaction), one that left Active
//     CodeLeadNotActive, one that is gone CodeLeadNotFound;
//   - the entry's tenant is the lead's; it is inserted with ON CONFLICT
//     (source_message_id) DO NOTHING, and an entry of the same message
//     that appeared since inFeed looked is CodeConcurrentUpdate too (the
//     re-run finds it and skips the message as a duplicate).
//
// The lead is updated first, right after its read: the update takes the
// row's lock, and the shorter the time between the read and the lock, the
// rarer a lost race to another partition's batch.
//
// On an error the caller's transaction must be rolled back (the runtime
// does): nothing of the attempt is kept.
func appendEvent(ctx context.Context, tx *ent.Tx, l *ent.Lead, e FeedEntry, now time.Time) (uuid.UUID, error) {
	if l.Status != StatusActive {
		return uuid.Nil, CodeLeadNotActive.Errorf("lead %s is %s, not Active (CRM-1)", l.ID, l.Status)
	}
	payload, err := json.Marshal(e.Payload)
	if err != nil {
		return uuid.Nil, fmt.Errorf("marshal the feed payload: %w", err)
	}
	if testHookBeforeWrite != nil {
		testHookBeforeWrite(ctx, l.ID)
	}

	n, err := tx.Lead.Update().
		Where(
			lead.ID(l.ID),
			lead.RowVersion(l.RowVersion),
			lead.Status(StatusActive),
		).
		SetUpdatedAt(now).
		AddRowVersion(1).
		Modify(func(u *sql.UpdateBuilder) {
			u.Set(lead.FieldLastEventAt, sql.ExprFunc(func(b *sql.Builder) {
				// GREATEST ignores NULL: a first event sets it.
				b.WriteString("GREATEST(").Ident(lead.FieldLastEventAt).Comma().Arg(e.OccurredAt).WriteByte(')')
			}))
		}).
		Save(ctx)
	if err != nil {
		return uuid.Nil, fmt.Errorf("update lead %s: %w", l.ID, err)
	}
	if n != 1 {
		// The conditional update missed: tell a lead that left Active from
		// one that was only edited. Read committed: this sees the change.
		cur, err := tx.Lead.Query().Where(lead.ID(l.ID)).Select(lead.FieldStatus, lead.FieldRowVersion).Only(ctx)
		switch {
		case ent.IsNotFound(err):
			return uuid.Nil, CodeLeadNotFound.Errorf("lead %s disappeared between its read and the write", l.ID)
		case err != nil:
			return uuid.Nil, fmt.Errorf("re-read lead %s: %w", l.ID, err)
		case cur.Status != StatusActive:
			return uuid.Nil, CodeLeadNotActive.Errorf("lead %s left Active (now %s) between its read and the write (CRM-1)", l.ID, cur.Status)
		default:
			return uuid.Nil, CodeConcurrentUpdate.Errorf("lead %s changed concurrently (row_version %d read, %d now)", l.ID, l.RowVersion, cur.RowVersion)
		}
	}

	id := uuid.New()
	err = newFeedRow(tx, l, e, id, payload, now).
		OnConflict(
			sql.ConflictColumns(leadevent.FieldSourceMessageID),
			sql.ConflictWhere(sql.NotNull(leadevent.FieldSourceMessageID)),
		).
		DoNothing().
		Exec(ctx)
	if errors.Is(err, stdsql.ErrNoRows) { // ON CONFLICT DO NOTHING returned no row (ent#1821)
		return uuid.Nil, CodeConcurrentUpdate.Errorf("the feed entry of message %s appeared concurrently", e.SourceMessageID)
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("insert the feed entry of lead %s: %w", l.ID, err)
	}
	l.RowVersion++
	return id, nil
}
