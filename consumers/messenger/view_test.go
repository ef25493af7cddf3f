package messenger

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

// The handler only decides on the view Prepare handed it: without one it
// fails, before anything is read or written (it is given no transaction
// here).
func TestHandlerWithoutItsPrepareFails(t *testing.T) {
	t.Parallel()
	h := &handler{m: newMetrics(nil)}
	x := newEv(uuid.New(), 1, member{uuid.New(), RoleExecutor})
	msg := &consumer.Message{Envelope: consumer.Envelope{
		MessageID: x.ID, EventType: EventType, ContractVersion: 1, Payload: must(json.Marshal(x.payload())),
	}, Topic: Topic}
	out, err := h.handle(context.Background(), nil, msg)
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
	bad := &consumer.Message{Envelope: consumer.Envelope{MessageID: uuid.New(), EventType: EventType,
		ContractVersion: 1, Payload: json.RawMessage(`{"LeadId": 7}`)}, Topic: Topic}
	v, err := read(context.Background(), nil, []*consumer.Message{bad})
	if err != nil || v == nil || len(v.chats) != 0 {
		t.Fatalf("read of an undecodable message: %+v, %v; want an empty view", v, err)
	}
	if got, err := viewOf(consumer.WithView(context.Background(), v)); err != nil || got != v {
		t.Fatalf("viewOf: %p, %v; want %p", got, err, v)
	}
	if _, err := prepare(context.Background(), nil, []*consumer.Message{bad}); err == nil {
		t.Fatal("prepare outside the runtime: no error")
	}
}
