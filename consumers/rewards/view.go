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

// view is what read read, and locked, for a transaction: the replica
// rows of its messages' bonds and the Active bonds of their referred
// users, and the bonds known to have no row; with the writes its handlers
// queued (writer.go), which keep it in step, so a bond met twice in one
// transaction sees the first event's effect.
type view struct {
	byID map[uuid.UUID]*ent.ReferralBondReplica
	// byUser is byID's rows by referred user (a bond's never changes):
	// the single-active check of each bond-created looks at its user's
	// rows, not at the whole view (which made a transaction's checks
	// quadratic: 14 % of the consumer's CPU under a backlog).
	byUser map[uuid.UUID][]*ent.ReferralBondReplica
	absent map[uuid.UUID]bool
	writes
}

// put makes r the view's row of its bond.
func (v *view) put(r *ent.ReferralBondReplica) {
	delete(v.absent, r.ID)
	if old, ok := v.byID[r.ID]; ok {
		if old == r {
			return
		}
		rows := v.byUser[old.ReferredUserID]
		for i, o := range rows {
			if o == old {
				v.byUser[old.ReferredUserID] = append(rows[:i:i], rows[i+1:]...)
				break
			}
		}
	}
	v.byID[r.ID] = r
	v.byUser[r.ReferredUserID] = append(v.byUser[r.ReferredUserID], r)
}

// lockedRows is read's condition: the rows whose id is one of ids, or of
// an Active bond of one of users, as
//
//	bond_id = ANY(ARRAY(SELECT unnest($1::uuid[]) UNION
//	    SELECT bond_id FROM referral_bond_replicas WHERE referred_user_id = ANY($2::uuid[]) AND status = 'Active'))
//
// one key condition on the primary key, not `bond_id = ANY($1) OR
// (referred_user_id = ANY($2) AND status = 'Active')`. Each connection
// plans the read once, for any arguments (db.go), and for the OR a plan
// made while the table's statistics said it was empty (analyzed before
// its first rows, until autovacuum analyzes it again) read the whole
// table through the primary key, in the order the locks need, with the
// condition as a filter: a read's p99 rose to 407 ms as the replica
// filled. With one key condition every plan looks the rows up: the users'
// Active bonds through the partial index of Active bonds, then the rows
// by id, in id order. A row that an Active bond of a user no longer is
// when its lock is granted (another transaction changed it) stays in the
// view with what it is now; the single-active check looks at Active rows
// only.
func lockedRows(ids, users *consumer.Array) func(*sql.Selector) {
	return func(s *sql.Selector) {
		s.Where(sql.P(func(b *sql.Builder) {
			b.Ident(s.C(referralbondreplica.FieldID)).WriteString(" = ANY(ARRAY(SELECT unnest(").Arg(ids).
				WriteString("::uuid[]) UNION SELECT ").Ident(referralbondreplica.FieldID).
				WriteString(" FROM ").Ident(referralbondreplica.Table).
				WriteString(" WHERE ").Ident(referralbondreplica.FieldReferredUserID).WriteString(" = ANY(").Arg(users).
				WriteString("::uuid[]) AND ").Ident(referralbondreplica.FieldStatus).WriteString(" = '" + string(StatusActive) + "'))")
		}))
	}
}

// read reads and locks, in id order and with one statement, the rows of
// every bond of msgs, and the Active bonds of their referred users: a
// bond-created checks the single-active rule (BND-3) against them, as its
// INSERT would, before the INSERT runs at the end. The lock order makes
// transactions that share a bond wait instead of deadlocking. Messages
// whose payload does not decode, or has no BondId, are left to their
// handlers (which dead-letter them; read decodes the handler's type, which
// the handler then reuses); with none left the view is empty.
func read(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (*view, error) {
	seen := make(map[uuid.UUID]bool, len(msgs))
	ids := make([]uuid.UUID, 0, len(msgs))
	seenUser := make(map[uuid.UUID]bool, len(msgs))
	users := make([]uuid.UUID, 0, len(msgs))
	for _, m := range msgs {
		w, err := bondOf(m)
		if err != nil || w.BondID == nil {
			continue
		}
		id, err := uuid.Parse(*w.BondID)
		if err != nil {
			continue
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
		if w.ReferredUserID != nil {
			if u, err := uuid.Parse(*w.ReferredUserID); err == nil && !seenUser[u] {
				seenUser[u] = true
				users = append(users, u)
			}
		}
	}
	v := &view{byID: map[uuid.UUID]*ent.ReferralBondReplica{}, byUser: map[uuid.UUID][]*ent.ReferralBondReplica{}, absent: seen, writes: newWrites()}
	if len(ids) == 0 {
		return v, nil
	}
	found, err := tx.ReferralBondReplica.Query().
		Where(lockedRows(consumer.UUIDArray(ids), consumer.UUIDArray(users))).
		Order(ent.Asc(referralbondreplica.FieldID)).
		ForUpdate().
		All(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range found {
		v.put(r)
	}
	return v, nil
}

// row is the bond's row in the view, nil when it has none. A bond that
// its Read did not read is a programming error.
func (v *view) row(id uuid.UUID) (*ent.ReferralBondReplica, error) {
	if r, ok := v.byID[id]; ok {
		return r, nil
	}
	if v.absent[id] {
		return nil, nil
	}
	return nil, fmt.Errorf("rewards: bond %s is not in the view Prepare read", id)
}

// activeOf is the Active bond of the referred user in the view (the table
// as locked, with the transaction's writes), or nil.
func (v *view) activeOf(user uuid.UUID) *ent.ReferralBondReplica {
	for _, r := range v.byUser[user] {
		if Status(r.Status).Active() {
			return r
		}
	}
	return nil
}

// bondRef is what read takes of a payload.
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
