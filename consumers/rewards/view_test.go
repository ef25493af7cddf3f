package rewards

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

// prepared reads the view of msgs in tx as Prepare does, and returns the
// context the handlers run under.
func prepared(ctx context.Context, tx *ent.Tx, msgs ...*consumer.Message) (context.Context, *view, error) {
	v, err := read(ctx, tx, msgs)
	if err != nil {
		return nil, nil, err
	}
	return consumer.WithView(ctx, v), v, nil
}

// handleInTx runs m in tx the way the runtime runs a transaction of one
// message, the mark aside: Prepare's read, the handler on its view, then
// the writer. It neither commits nor rolls back.
func handleInTx(ctx context.Context, tx *ent.Tx, handle consumer.Handler, m *consumer.Message) (consumer.Outcome, error) {
	ctx, v, err := prepared(ctx, tx, m)
	if err != nil {
		return "", err
	}
	out, err := handle(ctx, tx, m)
	if err != nil {
		return "", err
	}
	return out, v.flush(ctx)
}

// The handlers only decide on the view Prepare handed them: without one
// they fail, before anything is read or written (they are given no
// transaction here).
func TestHandlersWithoutTheirPrepareFail(t *testing.T) {
	t.Parallel()
	h := &handler{m: newMetrics(prometheus.NewRegistry())}
	b := newBond(uuid.New())
	for name, c := range map[string]struct {
		handle consumer.Handler
		ev     event
	}{
		"bond-created": {h.bondCreated, created(b, 1, baseTime)},
		"bond-closed":  {h.bondClosed, closed(b, "Revoked", 2, baseTime)},
	} {
		out, err := c.handle(context.Background(), nil, message(t, c.ev))
		if err == nil || out != "" || !strings.Contains(err.Error(), "without its Prepare") {
			t.Errorf("%s without a view: %q, %v; want the programming error", name, out, err)
		}
		if _, ok := consumer.CodeOf(err); ok {
			t.Errorf("%s: %v: a programming error, not one of the spec's codes", name, err)
		}
	}
}

// Prepare always installs a view, an empty one when no message decodes,
// and refuses to run outside a transaction of the runtime, where its
// writer would never run. A bond the view does not hold is an error, not
// "no row".
func TestPrepareAlwaysHasAView(t *testing.T) {
	t.Parallel()
	bad := &consumer.Message{Envelope: consumer.Envelope{MessageID: uuid.New(), EventType: EventTypeBondCreated,
		ContractVersion: 1, Payload: []byte(`{"BondId": 7}`)}, Topic: Topic}
	ctx, v, err := prepared(context.Background(), nil, bad)
	if err != nil || v == nil || len(v.byID)+len(v.absent) != 0 {
		t.Fatalf("read of an undecodable message: %+v, %v; want an empty view", v, err)
	}
	if got, err := viewOf(ctx); err != nil || got != v {
		t.Fatalf("viewOf: %p, %v; want %p", got, err, v)
	}
	if r, err := v.row(uuid.New()); r != nil || err == nil {
		t.Fatalf("row of a bond the view does not hold: %v, %v; want an error", r, err)
	}
	if _, err := prepare(context.Background(), nil, []*consumer.Message{bad}); err == nil {
		t.Fatal("prepare outside the runtime: no error")
	}
}
