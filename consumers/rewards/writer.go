package rewards

import (
	"context"
	"fmt"

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
	v.put(r)
	v.inserts[r.ID] = true
}

// queueUpdate queues the write of a row the handler changed in place
// (status, replica_version, synced_at). A row queued for insert is
// inserted as it is by then.
func (v *view) queueUpdate(r *ent.ReferralBondReplica) {
	v.put(r)
	if !v.inserts[r.ID] {
		v.updates[r.ID] = true
	}
}

// write is the service's Write: it writes the transaction's rows: first
// the updates, with one UPDATE (they close bonds or move the version of
// Active ones, so they can only make room under the single-active index),
// then the inserts with one INSERT, each of one text whatever the number of
// rows (consumer.InsertRows). The rows are locked since Read, so every
// update lands. The inserts have no ON CONFLICT: a bond, or an Active bond
// of a referred user (BND-3), that another processor wrote since its Read
// is a unique violation, a lost race, and the runtime runs the transaction
// again: Read then reads that row, and the handler decides on it
// (skipped-stale, REWARDS_BOND_REPLICA_ACTIVE_CONFLICT).
func write(ctx context.Context, tx *ent.Tx, v *view) error {
	if len(v.updates) > 0 {
		ids := consumer.SortedIDs(v.updates)
		var status, versions, synced consumer.Array
		for _, id := range ids {
			r := v.byID[id]
			status.Text(r.Status)
			versions.Int(r.ReplicaVersion)
			synced.Time(r.SyncedAt)
		}
		res, err := tx.ExecContext(ctx, updateSQL, consumer.UUIDArray(ids), &status, &versions, &synced)
		if err != nil {
			return fmt.Errorf("update the transaction's %d bonds: %w", len(ids), err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
			return fmt.Errorf("update the transaction's %d bonds: %d updated (%v)", len(ids), n, err)
		}
	}
	if len(v.inserts) > 0 {
		var ids, referred, referrer, company, status, bound, versions, synced consumer.Array
		for _, id := range consumer.SortedIDs(v.inserts) {
			r := v.byID[id]
			ids.UUID(r.ID)
			referred.UUID(r.ReferredUserID)
			referrer.UUID(r.ReferrerUserID)
			if r.ReferrerCompanyID != nil {
				company.UUID(*r.ReferrerCompanyID)
			} else {
				company.Null()
			}
			status.Text(r.Status)
			bound.Time(r.BoundAt)
			versions.Int(r.ReplicaVersion)
			synced.Time(r.SyncedAt)
		}
		q, args := consumer.InsertRows(referralbondreplica.Table, []consumer.Column{
			{Name: referralbondreplica.FieldID, Type: "uuid", Values: &ids},
			{Name: referralbondreplica.FieldReferredUserID, Type: "uuid", Values: &referred},
			{Name: referralbondreplica.FieldReferrerUserID, Type: "uuid", Values: &referrer},
			{Name: referralbondreplica.FieldReferrerCompanyID, Type: "uuid", Values: &company},
			{Name: referralbondreplica.FieldStatus, Type: "text", Values: &status},
			{Name: referralbondreplica.FieldBoundAt, Type: "timestamptz", Values: &bound},
			{Name: referralbondreplica.FieldReplicaVersion, Type: "bigint", Values: &versions},
			{Name: referralbondreplica.FieldSyncedAt, Type: "timestamptz", Values: &synced},
		}, "")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("insert the transaction's %d bonds: %w", len(v.inserts), err)
		}
	}
	return nil
}

// updateSQL writes the transaction's changed bonds: $1 their ids in id
// order, then, bond by bond, its status, replica_version and synced_at.
const updateSQL = `UPDATE referral_bond_replicas AS r
SET status = u.status, replica_version = u.replica_version, synced_at = u.synced_at
FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::timestamptz[]) AS u(bond_id, status, replica_version, synced_at)
WHERE r.bond_id = u.bond_id`
