package rewards

import (
	"context"
	"fmt"

	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/referralbondreplica"
)

// rows is what prepare loaded for a batch: the replica rows of every bond
// of the batch, locked FOR UPDATE in the batch's transaction, and the ids
// known to have no row. The handlers keep it in step with their writes, so
// a bond met twice in one batch sees the first event's effect.
type rows struct {
	tx     *ent.Tx
	byID   map[uuid.UUID]*ent.ReferralBondReplica
	absent map[uuid.UUID]bool
	// inserts and updates are the batch's writes, queued for flush: the
	// rows (byID's, in their final state) to insert and to update.
	inserts map[uuid.UUID]bool
	updates map[uuid.UUID]bool
}

type rowsKey struct{}

// prepare reads and locks, in id order and with one statement, the rows of
// every bond of the batch: one round trip instead of one per event, and
// the lock order makes batches that share a bond wait instead of
// deadlocking. Messages whose payload does not decode, or has no BondId,
// are left to their handlers (which dead-letter them; prepare decodes the
// handler's type, which the handler then reuses).
func prepare(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
	seen := make(map[uuid.UUID]bool, len(msgs))
	ids := make([]uuid.UUID, 0, len(msgs))
	users := make([]uuid.UUID, 0, len(msgs))
	for _, m := range msgs {
		w, err := bondOf(m)
		if err != nil || w.BondID == nil {
			continue
		}
		id, err := uuid.Parse(*w.BondID)
		if err != nil || seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
		if w.ReferredUserID != nil {
			if u, err := uuid.Parse(*w.ReferredUserID); err == nil {
				users = append(users, u)
			}
		}
	}
	if len(ids) == 0 {
		return ctx, nil
	}
	// The bonds of the batch, and the Active bonds of its referred users:
	// a bond-created checks the single-active rule (BND-3) against
	// them, as its INSERT would, before the INSERT runs at the end.
	found, err := tx.ReferralBondReplica.Query().
		Where(referralbondreplica.Or(
			referralbondreplica.IDIn(ids...),
			referralbondreplica.And(
				referralbondreplica.ReferredUserIDIn(users...),
				referralbondreplica.Status(string(StatusActive)),
			),
		)).
		Order(ent.Asc(referralbondreplica.FieldID)).
		ForUpdate().
		All(ctx)
	if err != nil {
		return nil, err
	}
	rs := &rows{tx: tx, byID: make(map[uuid.UUID]*ent.ReferralBondReplica, len(found)), absent: seen,
		inserts: map[uuid.UUID]bool{}, updates: map[uuid.UUID]bool{}}
	for _, r := range found {
		rs.byID[r.ID] = r
		delete(rs.absent, r.ID)
	}
	if !consumer.BeforeCommit(ctx, rs.flush) {
		return ctx, nil
	}
	return context.WithValue(ctx, rowsKey{}, rs), nil
}

// batchRows is the prepared batch of ctx, or nil.
func batchRows(ctx context.Context) *rows {
	rs, _ := ctx.Value(rowsKey{}).(*rows)
	return rs
}

// activeOf is the Active bond of the referred user in the batch's view
// (the table as locked, with the batch's writes), or nil.
func (rs *rows) activeOf(user uuid.UUID) *ent.ReferralBondReplica {
	for _, r := range rs.byID {
		if r.ReferredUserID == user && Status(r.Status).Active() {
			return r
		}
	}
	return nil
}

// queueInsert queues a new row; it is inserted by flush, as it is then.
func (rs *rows) queueInsert(r *ent.ReferralBondReplica) {
	delete(rs.absent, r.ID)
	rs.byID[r.ID] = r
	rs.inserts[r.ID] = true
}

// queueUpdate queues the write of a row the handler changed in place
// (status, replica_version, synced_at). A row queued for insert is
// inserted as it is by then.
func (rs *rows) queueUpdate(r *ent.ReferralBondReplica) {
	delete(rs.absent, r.ID)
	rs.byID[r.ID] = r
	if !rs.inserts[r.ID] {
		rs.updates[r.ID] = true
	}
}

// flush writes the batch's rows: first the updates, with one UPDATE (they
// close bonds or move the version of Active ones, so they can only make
// room under the single-active index), then the inserts with one INSERT.
// The inserts have no ON CONFLICT: a bond that exists after all, or a
// second Active bond of a referred user (BND-3), fails the statement
// and the batch, which the runtime then replays one message at a time —
// where the handler sees the conflict and reports it with its code.
func (rs *rows) flush(ctx context.Context) error {
	if len(rs.updates) > 0 {
		ids := consumer.SortedIDs(rs.updates)
		caseOf := func(cast string, v func(*ent.ReferralBondReplica) any) sql.Querier {
			return consumer.CaseOf(referralbondreplica.FieldID, ids, rs.byID, cast, v)
		}
		n, err := rs.tx.ReferralBondReplica.Update().
			Where(referralbondreplica.IDIn(ids...)).
			Modify(func(u *sql.UpdateBuilder) {
				u.Set(referralbondreplica.FieldStatus, caseOf("varchar", func(r *ent.ReferralBondReplica) any { return r.Status }))
				u.Set(referralbondreplica.FieldReplicaVersion, caseOf("bigint", func(r *ent.ReferralBondReplica) any { return r.ReplicaVersion }))
				u.Set(referralbondreplica.FieldSyncedAt, caseOf("timestamptz", func(r *ent.ReferralBondReplica) any { return r.SyncedAt }))
			}).
			Save(ctx)
		if err != nil {
			return fmt.Errorf("update the batch's %d bonds: %w", len(ids), err)
		}
		if n != len(ids) {
			return fmt.Errorf("update the batch's %d bonds: %d updated", len(ids), n)
		}
	}
	if len(rs.inserts) > 0 {
		ids := consumer.SortedIDs(rs.inserts)
		creates := make([]*ent.ReferralBondReplicaCreate, len(ids))
		for i, id := range ids {
			creates[i] = createRow(rs.tx, rs.byID[id])
		}
		for _, part := range consumer.Chunks(creates, 8) { // 8 columns a bond
			if err := rs.tx.ReferralBondReplica.CreateBulk(part...).Exec(ctx); err != nil {
				return fmt.Errorf("insert the batch's %d bonds: %w", len(ids), err)
			}
		}
	}
	return nil
}

// preparedRow returns the bond's row as prepare loaded it (nil: no row) and
// whether it did.
func preparedRow(ctx context.Context, id uuid.UUID) (*ent.ReferralBondReplica, bool) {
	rs, ok := ctx.Value(rowsKey{}).(*rows)
	if !ok {
		return nil, false
	}
	if r, ok := rs.byID[id]; ok {
		return r, true
	}
	return nil, rs.absent[id]
}

// bondRef is what prepare reads of a payload.
type bondRef struct{ BondID, ReferredUserID *string }

// bondOf reads the message's BondId and ReferredUserId by decoding its
// handler's payload type (kept with the message: the handler does not
// decode it again).
func bondOf(m *consumer.Message) (bondRef, error) {
	switch m.EventType {
	case EventTypeBondCreated:
		w, err := consumer.DecodePayload[createdWire](m)
		return bondRef{w.BondID, w.ReferredUserID}, err
	case EventTypeBondClosed:
		w, err := consumer.DecodePayload[closedWire](m)
		return bondRef{w.BondID, w.ReferredUserID}, err
	}
	return bondRef{}, fmt.Errorf("event type %q has no bond", m.EventType)
}
