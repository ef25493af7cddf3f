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
	return out, write(ctx, tx, v)
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
