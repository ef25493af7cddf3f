package rewards

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

// decision is a route's Decide.
type decision = func(context.Context, *view, *consumer.Message) (consumer.Outcome, error)

// handleInTx runs m in tx the way the runtime runs a transaction of one
// message, the mark aside: the service's read, the route on its view, then
// its write. It neither commits nor rolls back.
func handleInTx(ctx context.Context, tx *ent.Tx, decide decision, m *consumer.Message) (consumer.Outcome, error) {
	v, err := read(ctx, tx, []*consumer.Message{m})
	if err != nil {
		return "", err
	}
	out, err := decide(ctx, v, m)
	if err != nil {
		return "", err
	}
	return out, write(ctx, tx, v, nil)
}

// read always returns a view, an empty one when no message decodes. A
// bond the view does not hold is an error, not "no row".
func TestReadAlwaysHasAView(t *testing.T) {
	t.Parallel()
	bad := &consumer.Message{Envelope: consumer.Envelope{MessageID: uuid.New(), EventType: EventTypeBondCreated,
		ContractVersion: 1, Payload: []byte(`{"BondId": 7}`)}, Topic: Topic}
	v, err := read(context.Background(), nil, []*consumer.Message{bad})
	if err != nil || v == nil || len(v.byID)+len(v.absent) != 0 {
		t.Fatalf("read of an undecodable message: %+v, %v; want an empty view", v, err)
	}
	if r, err := v.row(uuid.New()); r != nil || err == nil {
		t.Fatalf("row of a bond the view does not hold: %v, %v; want an error", r, err)
	}
}

// activeOf finds a referred user's Active bond among the view's rows as
// the transaction changed them: read's, queued inserts, a bond closed in
// place, and a row the view took again for the same bond.
func TestActiveOfFollowsTheTransactionsWrites(t *testing.T) {
	t.Parallel()
	v := &view{byID: map[uuid.UUID]*ent.ReferralBondReplica{}, byUser: map[uuid.UUID][]*ent.ReferralBondReplica{}, absent: map[uuid.UUID]bool{}, writes: newWrites()}
	user, other := uuid.New(), uuid.New()
	closed := &ent.ReferralBondReplica{ID: uuid.New(), ReferredUserID: user, Status: string(StatusRevoked)}
	v.put(closed)
	if got := v.activeOf(user); got != nil {
		t.Fatalf("a user with only a closed bond has Active %v", got.ID)
	}
	a := &ent.ReferralBondReplica{ID: uuid.New(), ReferredUserID: user, Status: string(StatusActive)}
	v.queueInsert(a)
	v.queueInsert(&ent.ReferralBondReplica{ID: uuid.New(), ReferredUserID: other, Status: string(StatusActive)})
	if got := v.activeOf(user); got != a {
		t.Fatalf("activeOf = %v, want the inserted bond %v", got, a.ID)
	}
	a.Status = string(StatusReplaced) // closed in place, then queued
	v.queueUpdate(a)
	if got := v.activeOf(user); got != nil {
		t.Fatalf("after the close, activeOf = %v, want none", got.ID)
	}
	again := &ent.ReferralBondReplica{ID: closed.ID, ReferredUserID: user, Status: string(StatusActive)}
	v.put(again) // another value for a bond the view holds: it replaces the first
	if got := v.activeOf(user); got != again || len(v.byUser[user]) != 2 {
		t.Fatalf("activeOf = %v with %d rows of the user, want %v of 2", got, len(v.byUser[user]), again.ID)
	}
	if got := v.activeOf(uuid.New()); got != nil {
		t.Fatalf("a user without rows has Active %v", got.ID)
	}
}
