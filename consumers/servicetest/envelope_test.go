package servicetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

func TestEnvelopeValue(t *testing.T) {
	id := uuid.MustParse("6f1c2b9e-1111-4222-8333-444455556666")
	agg := uuid.MustParse("6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10")
	at := time.Date(2026, 11, 30, 13, 0, 0, 500, time.FixedZone("MSK", 3*3600))
	base := Envelope{MessageID: id, EventType: "pin.test.happened", CreatedAt: at, AggregateID: agg, AggregateType: "Lead",
		Payload: map[string]any{"b": 2, "a": "x"}}
	const head = `{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"pin.test.happened","ContractVersion":1,` +
		`"CreatedAt":"2026-11-30T10:00:00.0000005Z","AggregateId":"6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10","AggregateType":"Lead"`
	with := func(fn func(e *Envelope)) Envelope { e := base; fn(&e); return e }
	for _, tt := range []struct {
		name string
		env  Envelope
		want string
	}{
		{"members in order, the Payload last", base, head + `,"Payload":{"a":"x","b":2}}`},
		{"another ContractVersion", with(func(e *Envelope) { e.ContractVersion = 2 }),
			`{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"pin.test.happened","ContractVersion":2,` +
				`"CreatedAt":"2026-11-30T10:00:00.0000005Z","AggregateId":"6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10","AggregateType":"Lead","Payload":{"a":"x","b":2}}`},
		{"a raw payload, byte for byte", with(func(e *Envelope) { e.Payload = Raw(`{"a":`) }), head + `,"Payload":{"a":}`},
		{"an empty raw payload", with(func(e *Envelope) { e.Payload = Raw(nil) }), head + `,"Payload":}`},
		{"no payload", with(func(e *Envelope) { e.Payload = nil }), head + `,"Payload":null}`},
		{"members left out", with(func(e *Envelope) {
			e.Omit = []string{"MessageId", "CreatedAt", "AggregateId", "AggregateType", "Payload"}
		}),
			`{"EventType":"pin.test.happened","ContractVersion":1}`},
		{"members set in place and besides", with(func(e *Envelope) {
			e.Set = map[string]any{"ContractVersion": "1", "zeta": true, "Extra": []int{1}}
			e.Payload = []int{1}
		}), `{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"pin.test.happened","ContractVersion":"1",` +
			`"CreatedAt":"2026-11-30T10:00:00.0000005Z","AggregateId":"6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10","AggregateType":"Lead",` +
			`"Extra":[1],"zeta":true,"Payload":[1]}`},
	} {
		if got := string(tt.env.Value()); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}

	// What the consumer reads of it.
	env, err := consumer.DecodeEnvelope(base.Value())
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if env.MessageID != id || env.EventType != base.EventType || env.ContractVersion != 1 || !env.CreatedAt.Equal(at) ||
		env.AggregateID != agg.String() || env.AggregateType != "Lead" || json.Unmarshal(env.Payload, &p) != nil || p["a"] != "x" {
		t.Fatalf("decoded %+v", env)
	}
	m := base.Message(agg, 2, map[string]string{"h": "v"})
	if string(m.Key) != agg.String() || m.Partition != 2 || string(m.Value) != string(base.Value()) || m.Headers["h"] != "v" {
		t.Fatalf("message %+v", m)
	}
}

func TestPayloadMessage(t *testing.T) {
	svc := consumer.Service{InvalidCode: consumer.Code{Name: "TEST_INVALID"}}
	m, err := PayloadMessage(svc, "pin.test.happened", "Lead", []byte(`{"x":1}`))
	if err != nil || m.EventType != "pin.test.happened" || string(m.Payload) != `{"x":1}` {
		t.Fatalf("%+v, %v", m, err)
	}
	if _, err := PayloadMessage(svc, "pin.test.happened", "Lead", []byte(`{"x":`)); err == nil {
		t.Fatal("a payload that is not JSON makes a readable envelope")
	} else {
		RequireOneCode(t, err, consumer.EnvelopeInvalid)
	}
}
