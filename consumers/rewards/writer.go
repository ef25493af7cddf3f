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

// writes are the writes a transaction's handlers queued on its view: the
// rows (the view's, in their final state) to insert and to update.
type writes struct {
	inserts map[uuid.UUID]bool
	updates map[uuid.UUID]bool
}

func newWrites() writes {
	return writes{inserts: map[uuid.UUID]bool{}, updates: map[uuid.UUID]bool{}}
}

// queueInsert queues a new row; write inserts it as it is by then.
func (v *view) queueInsert(r *ent.ReferralBondReplica) {
	delete(v.absent, r.ID)
	v.byID[r.ID] = r
	v.inserts[r.ID] = true
}

// queueUpdate queues the write of a row the handler changed in place
// (status, replica_version, synced_at). A row queued for insert is
// inserted as it is by then.
func (v *view) queueUpdate(r *ent.ReferralBondReplica) {
	delete(v.absent, r.ID)
	v.byID[r.ID] = r
	if !v.inserts[r.ID] {
		v.updates[r.ID] = true
	}
}

// write is the service's Write: it writes the transaction's rows: first the updates, with one UPDATE
// (they close bonds or move the version of Active ones, so they can only
// make room under the single-active index), then the inserts with one
// INSERT. The rows are locked since Read, so every update lands. The
// inserts have no ON CONFLICT: a bond, or an Active bond of a referred
// user (BND-3), that another processor wrote since its Read is a
// unique violation, a lost race, and the runtime runs the transaction
// again: Read then reads that row, and the handler decides on it
// (skipped-stale, REWARDS_BOND_REPLICA_ACTIVE_CONFLICT).
func write(ctx context.Context, tx *ent.Tx, v *view) error {
	if len(v.updates) > 0 {
		ids := consumer.SortedIDs(v.updates)
		caseOf := func(cast string, value func(*ent.ReferralBondReplica) any) sql.Querier {
			return consumer.CaseOf(referralbondreplica.FieldID, ids, v.byID, cast, value)
		}
		n, err := tx.ReferralBondReplica.Update().
			Where(referralbondreplica.IDIn(ids...)).
			Modify(func(u *sql.UpdateBuilder) {
				u.Set(referralbondreplica.FieldStatus, caseOf("varchar", func(r *ent.ReferralBondReplica) any { return r.Status }))
				u.Set(referralbondreplica.FieldReplicaVersion, caseOf("bigint", func(r *ent.ReferralBondReplica) any { return r.ReplicaVersion }))
				u.Set(referralbondreplica.FieldSyncedAt, caseOf("timestamptz", func(r *ent.ReferralBondReplica) any { return r.SyncedAt }))
			}).
			Save(ctx)
		if err != nil {
			return fmt.Errorf("update the transaction's %d bonds: %w", len(ids), err)
		}
		if n != len(ids) {
			return fmt.Errorf("update the transaction's %d bonds: %d updated", len(ids), n)
		}
	}
	if len(v.inserts) > 0 {
		ids := consumer.SortedIDs(v.inserts)
		creates := make([]*ent.ReferralBondReplicaCreate, len(ids))
		for i, id := range ids {
			creates[i] = createRow(tx, v.byID[id])
		}
		for _, part := range consumer.Chunks(creates, 8) { // 8 columns a bond
			if err := tx.ReferralBondReplica.CreateBulk(part...).Exec(ctx); err != nil {
				return fmt.Errorf("insert the transaction's %d bonds: %w", len(ids), err)
			}
		}
	}
	return nil
}

// createRow is the INSERT of row r.
func createRow(tx *ent.Tx, r *ent.ReferralBondReplica) *ent.ReferralBondReplicaCreate {
	return tx.ReferralBondReplica.Create().
		SetID(r.ID).
		SetReferredUserID(r.ReferredUserID).
		SetReferrerUserID(r.ReferrerUserID).
		SetNillableReferrerCompanyID(r.ReferrerCompanyID).
		SetStatus(r.Status).
		SetBoundAt(r.BoundAt).
		SetReplicaVersion(r.ReplicaVersion).
		SetSyncedAt(r.SyncedAt)
}
