package crm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// The handler only decides on the view Prepare handed it: without one it
// fails, before anything is read or written (it is given no transaction
// here).
func TestHandlerWithoutItsPrepareFails(t *testing.T) {
	t.Parallel()
	svc := New(prometheus.NewRegistry())
	m, err := servicetest.PayloadMessage(svc, EventType, "Selection", []byte(`{"SelectionId":"`+uuid.NewString()+`","SelectionTitle":"t","PropertyObjectsCount":1,
		"Action":"Shared","AgentUserId":"`+uuid.NewString()+`","InvestorUserId":"`+uuid.NewString()+`","OccurredAt":"2026-11-30T10:00:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{m: newMetrics(prometheus.NewRegistry()), pub: LogPublisher, now: time.Now}
	out, err := h.handle(context.Background(), nil, m)
	if err == nil || out != "" || !strings.Contains(err.Error(), "without its Prepare") {
		t.Fatalf("handle without a view: %q, %v; want the programming error", out, err)
	}
	if _, ok := consumer.CodeOf(err); ok {
		t.Fatalf("%v: a programming error, not one of the spec's codes", err)
	}
}

// Prepare always installs a view, an empty one when no message decodes,
// and refuses to run outside a transaction of the runtime, where its
// writer would never run.
func TestPrepareAlwaysHasAView(t *testing.T) {
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
	if got, err := viewOf(consumer.WithView(context.Background(), v)); err != nil || got != v {
		t.Fatalf("viewOf: %p, %v; want %p", got, err, v)
	}
	if _, err := prepare(context.Background(), nil, []*consumer.Message{bad}); err == nil {
		t.Fatal("prepare outside the runtime: no error")
	}
}
