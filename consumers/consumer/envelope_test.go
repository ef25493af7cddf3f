package consumer

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestDecodeEnvelope(t *testing.T) {
	cases := []struct {
		name  string
		value string
		ok    bool
	}{
		{"canonical", `{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"x","ContractVersion":1,"CreatedAt":"2026-11-30T10:00:00Z","Payload":{}}`, true},
		{"camel case members", `{"messageId":"6f1c2b9e-1111-4222-8333-444455556666","eventType":"x","payload":{}}`, true},
		{"unknown members ignored", `{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","Extra":[1,2],"Payload":{}}`, true},
		{"array", `[1]`, false},
		{"null", `null`, false},
		{"empty", ``, false},
		{"no id", `{"EventType":"x"}`, false},
		{"nil id", `{"MessageId":"00000000-0000-0000-0000-000000000000"}`, false},
		{"bad id", `{"MessageId":"abc"}`, false},
		{"id of wrong type", `{"MessageId":12}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := DecodeEnvelope([]byte(c.value))
			if c.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, c.ok)
			}
			if err != nil {
				if code, _ := CodeOf(err); code.Name != "EVENT_ENVELOPE_INVALID" {
					t.Fatalf("code = %s", code.Name)
				}
				return
			}
			if e.MessageID.String() != "6f1c2b9e-1111-4222-8333-444455556666" {
				t.Fatalf("MessageID = %s", e.MessageID)
			}
		})
	}
}

func TestDecodeEnvelopeIsLenientBeyondMessageId(t *testing.T) {
	const id = `"MessageId":"6f1c2b9e-1111-4222-8333-444455556666"`
	cases := []struct {
		name    string
		value   string
		version int
		problem bool
	}{
		{"ContractVersion as a string", `{` + id + `,"ContractVersion":"1"}`, 1, false},
		{"ContractVersion unreadable", `{` + id + `,"ContractVersion":{}}`, 0, false},
		{"AggregateId a number", `{` + id + `,"AggregateId":42}`, 0, false},
		{"CreatedAt not RFC 3339", `{` + id + `,"CreatedAt":"2026-11-30 10:00:00"}`, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := DecodeEnvelope([]byte(c.value))
			if err != nil {
				t.Fatalf("readable envelope refused: %v", err)
			}
			if e.ContractVersion != c.version || (e.Problem() != nil) != c.problem {
				t.Fatalf("version %d problem %v", e.ContractVersion, e.Problem())
			}
		})
	}
	// An EventType that is not a string is one no route takes (skipped as
	// unknown, docs/contract.md §4.3): the envelope is readable, its
	// EventType empty, its JSON text what the log line carries.
	for raw, logged := range map[string]string{`7`: `7`, `{"a":1}`: `{"a":1}`, `[ true ]`: `[ true ]`, `false`: `false`} {
		e, err := DecodeEnvelope([]byte(`{` + id + `,"EventType":` + raw + `}`))
		if err != nil || e.EventType != "" || e.loggedEventType() != logged || e.Problem() != nil {
			t.Fatalf("EventType %s: %+v, logged %q, %v; want readable, EventType \"\", logged %q", raw, e, e.loggedEventType(), err, logged)
		}
	}
	if e, err := DecodeEnvelope([]byte(`{` + id + `,"EventType":null}`)); err != nil || e.EventType != "" || e.loggedEventType() != "" {
		t.Fatalf("EventType null (as missing): %+v, %v", e, err)
	}
	e, err := DecodeEnvelope([]byte(`{` + id + `,"EventType":"pin.a\u0062c","AggregateType":"L\"x","CreatedAt":"2026-11-30T10:00:00.5+01:00"}`))
	if err != nil || e.EventType != "pin.abc" || e.AggregateType != `L"x` || !e.CreatedAt.Equal(time.Date(2026, 11, 30, 9, 0, 0, 5e8, time.UTC)) {
		t.Fatalf("escaped strings and an offset time: %+v, %v", e, err)
	}
	// The contract's envelope is UTF-8 JSON: a value that is not UTF-8 is
	// refused whole (its EventType would be a log field, its strings rows).
	_, err = DecodeEnvelope([]byte(`{` + id + `,"EventType":"x` + "\xff" + `"}`))
	if c, ok := CodeOf(err); !ok || c.Name != EnvelopeInvalid.Name {
		t.Fatalf("an envelope with invalid UTF-8: %v, want %s", err, EnvelopeInvalid.Name)
	}
}

// BenchmarkDecodeEnvelope measures the per-message envelope decode (go test
// -bench DecodeEnvelope -benchmem ./consumers/consumer).
func BenchmarkDecodeEnvelope(b *testing.B) {
	v := []byte(`{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"pin.referral.bond-created","ContractVersion":1,` +
		`"CreatedAt":"2026-11-30T10:00:00.123456Z","AggregateId":"0d6f2b6e-1111-4222-8333-444455556666","AggregateType":"ReferralBond",` +
		`"Payload":{"BondId":"0d6f2b6e-1111-4222-8333-444455556666","ReferredUserId":"1d6f2b6e-1111-4222-8333-444455556666",` +
		`"ReferrerUserId":"2d6f2b6e-1111-4222-8333-444455556666","ReferrerCompanyId":null,"BoundAt":"2026-11-30T09:59:00Z","Version":1}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEnvelope(v); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDecodePayloadErrorsCarryTheServiceCode(t *testing.T) {
	code := Code{Name: "SVC_INVALID", Class: Invalid}
	type P struct{ N int }
	for name, payload := range map[string]string{"missing": ``, "null": `null`, "array": `[]`, "wrong type": `{"N":"x"}`} {
		t.Run(name, func(t *testing.T) {
			m := &Message{Envelope: Envelope{Payload: []byte(payload)}, invalid: code}
			_, err := DecodePayload[P](m)
			if c, _ := CodeOf(err); c.Name != "SVC_INVALID" {
				t.Fatalf("err = %v", err)
			}
		})
	}
	m := &Message{Envelope: Envelope{Payload: []byte(`{"n":3}`)}, invalid: code}
	if p, err := DecodePayload[P](m); err != nil || p.N != 3 {
		t.Fatalf("case-insensitive member: %v %v", p, err)
	}
}

// A payload is decoded once per message and type: Read's decode is the
// handler's, and so are a retry's. Another type decodes anew.
func TestDecodePayloadKeepsItsResultWithTheMessage(t *testing.T) {
	code := Code{Name: "SVC_INVALID", Class: Invalid}
	type P struct{ N int }
	m := &Message{Envelope: Envelope{Payload: []byte(`{"N":3}`)}, invalid: code}
	if p, err := DecodePayload[P](m); err != nil || p.N != 3 {
		t.Fatalf("first decode: %v %v", p, err)
	}
	m.Payload = []byte(`{"N":"x"}`) // what a second decode would read
	if p, err := DecodePayload[P](m); err != nil || p.N != 3 {
		t.Fatalf("second decode: %v %v, want the first's result", p, err)
	}
	type Q struct{ N string }
	if q, err := DecodePayload[Q](m); err != nil || q.N != "x" {
		t.Fatalf("another type: %v %v, want a decode of its own", q, err)
	}
	// A failure is kept as well, with what was decoded before it (a
	// handler logs those fields on the dead letter's line).
	type R struct{ N, M int }
	m.Payload = []byte(`{"M":2,"N":"x"}`)
	if r, err := DecodePayload[R](m); err == nil || r.M != 2 {
		t.Fatalf("%s as R: %+v, %v; want M = 2 and an error", m.Payload, r, err)
	}
	m.Payload = []byte(`{"M":5,"N":5}`)
	if r, err := DecodePayload[R](m); err == nil || r.M != 2 {
		t.Fatalf("again: %+v, %v; want the kept M = 2 and error", r, err)
	}
}

// BenchmarkDecodePayload measures a payload's decode into a struct of the
// field types the services' payloads use, with 5 members (go test -bench
// DecodePayload -benchmem ./consumers/consumer): "decode" a first decode,
// "kept" a second call for the same type (a handler after its Read),
// "partial" a first decode into a struct of one field (what each Read
// decoded until it decoded its handler's type).
func BenchmarkDecodePayload(b *testing.B) {
	type member struct {
		UserID       uuid.UUID `json:"UserId"`
		Role         string
		PreviousRole *string
	}
	type payload struct {
		LeadID  uuid.UUID  `json:"LeadId"`
		BondID  *string    `json:"BondId"`
		Version *int64     `json:"Version"`
		BoundAt *time.Time `json:"BoundAt"`
		At      time.Time  `json:"ChangedAt"`
		Title   string
		Members []member `json:"ActiveParticipants"`
	}
	m := &Message{Envelope: Envelope{Payload: []byte(`{"LeadId":"0d6f2b6e-1111-4222-8333-444455556666","BondId":"0d6f2b6e-1111-4222-8333-444455556667",` +
		`"Version":7,"BoundAt":"2026-11-30T09:59:00Z","ChangedAt":"2026-11-30T10:00:00.123456Z","Title":"t","ActiveParticipants":[` +
		`{"UserId":"2d6f2b6e-1111-4222-8333-444455556661","Role":"Executor"},{"UserId":"2d6f2b6e-1111-4222-8333-444455556662","Role":"Responsible"},` +
		`{"UserId":"2d6f2b6e-1111-4222-8333-444455556663","Role":"CoAgent"},{"UserId":"2d6f2b6e-1111-4222-8333-444455556664","Role":"Lawyer"},` +
		`{"UserId":"2d6f2b6e-1111-4222-8333-444455556665","Role":"Assistant","PreviousRole":null}]}`)}}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.decoded = nil
			if _, err := DecodePayload[payload](m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodePayload[payload](m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("partial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.decoded = nil
			if _, err := DecodePayload[struct {
				LeadID uuid.UUID `json:"LeadId"`
			}](m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
