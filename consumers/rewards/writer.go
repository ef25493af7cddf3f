package rewards

import (
	"context"
	"fmt"

	"entgo.io/ent/dialect"
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

// write is the service's Write: it writes the transaction's rows with one
// statement of one text whatever their number (a column's values an
// array, consumer.Unnest), the marks first when it is given them
// (consumer.Marks: their insert a WITH item that the first item waits
// for). The updates go first: they close bonds or move
// the version of Active ones, so they can only make room under the
// single-active index, which the inserts then take. With both, the
// updates are a WITH item that the insert counts in a one-time filter (an
// InitPlan), so the UPDATE runs whole before the first row is inserted,
// in one round trip instead of two (at 1 ms from PostgreSQL, a
// transaction's six round trips were its time). The rows are locked since
// Read, so every update lands. The inserts have no ON CONFLICT: a bond, or
// an Active bond of a referred user (BND-3), that another processor wrote
// since its Read is a unique violation, a lost race, and the runtime runs
// the transaction again: Read then reads that row, and the handler decides
// on it (skipped-stale, REWARDS_BOND_REPLICA_ACTIVE_CONFLICT).
func write(ctx context.Context, tx *ent.Tx, v *view, marks *consumer.Marks) error {
	q, args := writeSQL(v, marks)
	if q == "" {
		return nil
	}
	var updated, inserted int
	if err := scanOne(ctx, tx, q, args, &inserted, &updated); err != nil {
		return fmt.Errorf("write the transaction's bonds (%d updated, %d new): %w", len(v.updates), len(v.inserts), err)
	}
	if updated != len(v.updates) || inserted != len(v.inserts) {
		return fmt.Errorf("write the transaction's bonds: %d of %d updated, %d of %d inserted", updated, len(v.updates), inserted, len(v.inserts))
	}
	return nil
}

// writeSQL is write's statement, "" with nothing to write:
//
//	WITH pin_marks AS (INSERT INTO processed_messages … RETURNING 1),
//	     updated AS (UPDATE referral_bond_replicas … FROM unnest(…)
//	                 WHERE … AND (SELECT count(*) FROM pin_marks) >= 0 RETURNING 1),
//	     inserted AS (INSERT INTO referral_bond_replicas … SELECT … FROM unnest(…)
//	                  WHERE (SELECT count(*) FROM updated) >= 0 RETURNING 1)
//	SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM updated)
//
// either item left out when it has no rows (its count then 0), the marks
// when marks is nil; the first item there is waits for the one before.
func writeSQL(v *view, marks *consumer.Marks) (string, []any) {
	if len(v.updates)+len(v.inserts) == 0 {
		return "", nil
	}
	var b sql.Builder
	b.SetDialect(dialect.Postgres)
	b.WriteString("WITH ")
	if marks.Item(&b) {
		b.WriteString(", ")
	}
	counts := []string{"0", "0"}
	if len(v.updates) > 0 {
		var ids, status, versions, synced consumer.Array
		for _, id := range consumer.SortedIDs(v.updates) {
			r := v.byID[id]
			ids.UUID(id)
			status.Text(r.Status)
			versions.Int(r.ReplicaVersion)
			synced.Time(r.SyncedAt)
		}
		b.WriteString(`updated AS (UPDATE referral_bond_replicas AS r
SET status = u.status, replica_version = u.replica_version, synced_at = u.synced_at
FROM `)
		consumer.Unnest(&b, []consumer.Column{
			{Name: referralbondreplica.FieldID, Type: "uuid", Values: &ids},
			{Name: referralbondreplica.FieldStatus, Type: "text", Values: &status},
			{Name: referralbondreplica.FieldReplicaVersion, Type: "bigint", Values: &versions},
			{Name: referralbondreplica.FieldSyncedAt, Type: "timestamptz", Values: &synced},
		})
		b.WriteString(" WHERE r.bond_id = u.bond_id")
		if g := marks.Gate(); g != "" {
			b.WriteString(" AND " + g)
		}
		b.WriteString(" RETURNING 1)")
		counts[0] = "(SELECT count(*) FROM updated)"
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
		tail := "RETURNING 1"
		switch {
		case len(v.updates) > 0:
			b.WriteString(", inserted AS (")
			tail = "WHERE (SELECT count(*) FROM updated) >= 0 RETURNING 1" // the UPDATE first, whole
		default:
			b.WriteString("inserted AS (")
			if g := marks.Gate(); g != "" {
				tail = "WHERE " + g + " RETURNING 1" // the marks first, whole
			}
		}
		consumer.WriteInsertRows(&b, referralbondreplica.Table, []consumer.Column{
			{Name: referralbondreplica.FieldID, Type: "uuid", Values: &ids},
			{Name: referralbondreplica.FieldReferredUserID, Type: "uuid", Values: &referred},
			{Name: referralbondreplica.FieldReferrerUserID, Type: "uuid", Values: &referrer},
			{Name: referralbondreplica.FieldReferrerCompanyID, Type: "uuid", Values: &company},
			{Name: referralbondreplica.FieldStatus, Type: "text", Values: &status},
			{Name: referralbondreplica.FieldBoundAt, Type: "timestamptz", Values: &bound},
			{Name: referralbondreplica.FieldReplicaVersion, Type: "bigint", Values: &versions},
			{Name: referralbondreplica.FieldSyncedAt, Type: "timestamptz", Values: &synced},
		}, tail)
		b.WriteString(")")
		counts[1] = "(SELECT count(*) FROM inserted)"
	}
	// The inserts' count first: the order is the filter's, not this
	// list's (TestARebindIsWrittenInOneStatementCloseFirst).
	b.WriteString(" SELECT " + counts[1] + ", " + counts[0])
	return b.Query()
}

// scanOne runs q and scans its one row into dst.
func scanOne(ctx context.Context, tx *ent.Tx, q string, args []any, dst ...any) error {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return fmt.Errorf("no row")
	}
	if err := rows.Scan(dst...); err != nil {
		return err
	}
	return rows.Close()
}
