package crm

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// Messages that break the contract go to the DLQ at once, with the
// service's invalid code (or EVENT_ENVELOPE_INVALID for an unreadable
// envelope), and do not hold their partition.
func TestInvalidEventsAreDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	l := h.insertLead("Active")
	at := micro(time.Now().Add(-time.Minute))
	change := func(fn func(p map[string]any)) []byte {
		e := newEvent(l, "Shared", at)
		fn(e.Payload)
		return e.value()
	}
	envelope := func(fn func(env *servicetest.Envelope)) []byte {
		env := newEvent(l, "Shared", at).envelope()
		fn(&env)
		return env.Value()
	}
	cases := []struct {
		name  string
		value []byte
		code  string
	}{
		{"not JSON", []byte("not json"), consumer.EnvelopeInvalid.Name},
		{"tombstone", nil, consumer.EnvelopeInvalid.Name},
		{"no MessageId", envelope(func(env *servicetest.Envelope) { env.Omit = []string{"MessageId"} }), consumer.EnvelopeInvalid.Name},
		{"no Payload", envelope(func(env *servicetest.Envelope) { env.Omit = []string{"Payload"} }), CodeEventInvalid.Name},
		{"Payload not an object", envelope(func(env *servicetest.Envelope) { env.Payload = []int{1} }), CodeEventInvalid.Name},
		{"SelectionId not a GUID", change(func(p map[string]any) { p["SelectionId"] = "42" }), CodeEventInvalid.Name},
		{"AgentUserId missing", change(func(p map[string]any) { delete(p, "AgentUserId") }), CodeEventInvalid.Name},
		{"empty title", change(func(p map[string]any) { p["SelectionTitle"] = "" }), CodeEventInvalid.Name},
		{"negative count", change(func(p map[string]any) { p["PropertyObjectsCount"] = -3 }), CodeEventInvalid.Name},
		{"count of the wrong type", change(func(p map[string]any) { p["PropertyObjectsCount"] = "seven" }), CodeEventInvalid.Name},
		{"OccurredAt missing", change(func(p map[string]any) { delete(p, "OccurredAt") }), CodeEventInvalid.Name},
		{"Action missing", change(func(p map[string]any) { delete(p, "Action") }), CodeEventInvalid.Name},
	}
	msgs := make([]kafkatest.Message, len(cases))
	for i, c := range cases {
		msgs[i] = kafkatest.Message{Partition: 5, Key: []byte(uuid.NewString()), Value: c.value}
	}
	tps := h.Produce(msgs...)
	good := newEvent(l, "Shared", at).on(5)
	offs := h.produce(good)
	run := h.start(0, "")

	h.waitOutcome(good.MessageID, "attached")
	h.waitCommitted(Group, 5, offs[0]+1)
	byOffset := map[string]string{}
	for _, m := range h.AwaitDLQ(len(cases)) {
		if a := kafkatest.Header(m, consumer.HeaderAttempts); a != "1" {
			t.Errorf("x-attempts %s, want 1: never retried", a)
		}
		byOffset[kafkatest.Header(m, consumer.HeaderOriginalOffset)] = kafkatest.Header(m, consumer.HeaderErrorCode)
	}
	for i, c := range cases {
		if got := byOffset[strconv.FormatInt(int64(tps[i].Offset), 10)]; got != c.code {
			t.Errorf("%s: dead-lettered with %q, want %q", c.name, got, c.code)
		}
	}
	if n := h.Count(`SELECT count(*) FROM lead_events`); n != 1 {
		t.Fatalf("%d feed entries, want 1 (the valid event's)", n)
	}
	if n := run.Counter(MetricDLQ, nil); n != float64(len(cases)) {
		t.Fatalf("%s = %v, want %d", MetricDLQ, n, len(cases))
	}
	if n := run.Counter(MetricRetries, nil); n != 0 {
		t.Fatalf("%s = %v, want 0", MetricRetries, n)
	}
}

// Another ContractVersion is logged and counted, then processed; an
// EventType the consumer does not know is skipped and acknowledged.
func TestContractVersionMismatchIsProcessedAndUnknownEventTypesSkipped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	l := h.insertLead("Active")
	at := micro(time.Now().Add(-time.Minute))
	v2 := newEvent(l, "Shared", at).on(2)
	v2.Version = 2
	foreign := newEvent(l, "Shared", at).envelope()
	foreign.EventType = "pin.selections.selection-deleted"
	h.Produce(foreign.Message(uuid.New(), 2, nil))
	offs := h.produce(v2)
	run := h.start(0, "")

	h.waitOutcome(v2.MessageID, "attached")
	h.waitCommitted(Group, 2, offs[0]+1)
	if n := run.Counter(MetricContractMismatch, nil); n != 1 {
		t.Fatalf("%s = %v, want 1", MetricContractMismatch, n)
	}
	if n := len(h.Logs.Find("contract-version-mismatch", map[string]any{"MessageId": v2.MessageID.String()})); n == 0 {
		t.Fatal("no contract-version-mismatch warning")
	}
	if n := h.Count(`SELECT count(*) FROM lead_events`); n != 1 {
		t.Fatalf("%d feed entries, want 1", n)
	}
	if n := h.Cluster.Count(t, DLQTopic); n != 0 {
		t.Fatalf("%d dead letters, want 0", n)
	}
}
