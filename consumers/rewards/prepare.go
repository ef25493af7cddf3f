package rewards

import (
	"context"

	"github.com/google/uuid"

	"github.com/pin-platform/consumers/consumers/consumer"
	"github.com/pin-platform/consumers/ent"
	"github.com/pin-platform/consumers/ent/referralbondreplica"
)

// rows is what prepare loaded for a batch: the replica rows of every bond
// of the batch, locked FOR UPDATE in the batch's transaction, and the ids
// known to have no row. The handlers keep it in step with their writes, so
// a bond met twice in one batch sees the first event's effect.
type rows struct {
	byID   map[uuid.UUID]*ent.ReferralBondReplica
	absent map[uuid.UUID]bool
}

type rowsKey struct{}

// prepare reads and locks, in id order and with one statement, the rows of
// every bond of the batch: one round trip instead of one per event, and
// the lock order makes batches that share a bond wait instead of
// deadlocking. Messages without a readable BondId are left to their
// handlers (which dead-letter them).
func prepare(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
	seen := make(map[uuid.UUID]bool, len(msgs))
	ids := make([]uuid.UUID, 0, len(msgs))
	for _, m := range msgs {
		w, err := consumer.DecodePayload[struct {
			BondID *string `json:"BondId"`
		}](m)
		if err != nil || w.BondID == nil {
			continue
		}
		id, err := uuid.Parse(*w.BondID)
		if err != nil || seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return ctx, nil
	}
	found, err := tx.ReferralBondReplica.Query().
		Where(referralbondreplica.IDIn(ids...)).
		Order(ent.Asc(referralbondreplica.FieldID)).
		ForUpdate().
		All(ctx)
	if err != nil {
		return nil, err
	}
	rs := &rows{byID: make(map[uuid.UUID]*ent.ReferralBondReplica, len(found)), absent: seen}
	for _, r := range found {
		rs.byID[r.ID] = r
		delete(rs.absent, r.ID)
	}
	return context.WithValue(ctx, rowsKey{}, rs), nil
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

// rememberRow records the row a handler wrote (nil: forget what prepare
// knew of the bond, so the next event of it reads the table).
func rememberRow(ctx context.Context, id uuid.UUID, r *ent.ReferralBondReplica) {
	rs, ok := ctx.Value(rowsKey{}).(*rows)
	if !ok {
		return
	}
	delete(rs.absent, id)
	delete(rs.byID, id)
	if r != nil {
		rs.byID[id] = r
	}
}
