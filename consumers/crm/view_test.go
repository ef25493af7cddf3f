package crm

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// read always returns a view, an empty one when no message decodes.
func TestReadAlwaysHasAView(t *testing.T) {
	t.Parallel()
	svc := New(prometheus.NewRegistry())
	bad, err := servicetest.PayloadMessage(svc, EventType, "Selection", []byte(`{"AgentUserId": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := read(context.Background(), nil, []*consumer.Message{bad})
	if err != nil || v == nil || len(v.leads)+len(v.inFeed) != 0 {
		t.Fatalf("read of an undecodable message: %+v, %v; want an empty view", v, err)
	}
}
