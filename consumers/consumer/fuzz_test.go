package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// The fuzz targets of this package; their seed corpora are under
// testdata/fuzz/<name> (plain `go test` runs them), `make fuzz` fuzzes each.

// FuzzDecodeEnvelope: whatever a Kafka value holds, DecodeEnvelope does not
// panic, and either refuses it with EVENT_ENVELOPE_INVALID and no other
// code, or returns an envelope the runtime can route and log — a non-nil
// MessageId, an EventType in valid UTF-8 (or the JSON of one that is not a
// string) whose logged and stored forms stay within their bounds, a
// Payload that is JSON or absent — and whose members, encoded again,
// decode to the same envelope.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, value []byte) {
		if v := bytes.TrimSpace(value); len(v) > 0 && v[0] == '{' {
			sameMembersAsUnmarshal(t, v)
		}
		e, err := DecodeEnvelope(value)
		if err != nil {
			requireOnlyCode(t, err, EnvelopeInvalid)
			return
		}
		checkEnvelope(t, e)
		again, err := DecodeEnvelope(encodeEnvelope(t, e))
		if err != nil {
			t.Fatalf("the accepted envelope, encoded again, is refused: %v\nvalue: %q\nagain: %q", err, value, encodeEnvelope(t, e))
		}
		if again.Problem() != nil {
			t.Fatalf("the re-encoded envelope has a problem: %v", again.Problem())
		}
		if again.MessageID != e.MessageID || again.EventType != e.EventType || !bytes.Equal(again.eventTypeJSON, e.eventTypeJSON) || again.ContractVersion != e.ContractVersion ||
			!again.CreatedAt.Equal(e.CreatedAt) || again.AggregateID != e.AggregateID || again.AggregateType != e.AggregateType ||
			!bytes.Equal(again.Payload, e.Payload) || (again.Payload == nil) != (e.Payload == nil) {
			t.Fatalf("round trip changed the envelope:\n first %+v\n again %+v", e, again)
		}
	})
}

// checkEnvelope asserts what the runtime relies on in an accepted envelope.
func checkEnvelope(t *testing.T, e Envelope) {
	t.Helper()
	if e.MessageID == uuid.Nil {
		t.Fatal("accepted an envelope with the nil MessageId")
	}
	for name, s := range map[string]string{"EventType": e.EventType, "AggregateId": e.AggregateID, "AggregateType": e.AggregateType} {
		if !utf8.ValidString(s) {
			t.Fatalf("%s %q is not valid UTF-8", name, s)
		}
	}
	// The log line carries at most ProducerTextLimit bytes of the
	// EventType and a marker; a parked row stores it cleaned (no NUL,
	// valid UTF-8, at most 2,000 bytes).
	if e.eventTypeJSON != nil && (e.EventType != "" || !json.Valid(e.eventTypeJSON)) {
		t.Fatalf("EventType %q not a string, but read as %q", e.eventTypeJSON, e.EventType)
	}
	if lg := e.loggedEventType(); !utf8.ValidString(lg) || len(lg) > ProducerTextLimit+len("…(+1000000000 bytes)") {
		t.Fatalf("logged EventType %q: not valid UTF-8 or longer than the limit", lg)
	}
	if st := cleanText(e.EventType); !utf8.ValidString(st) || strings.ContainsRune(st, 0) || len(st) > 2000+len("…") {
		t.Fatalf("stored EventType %q: not valid UTF-8, holds a NUL or is longer than 2,000 bytes", st)
	}
	if e.Payload != nil && !json.Valid(e.Payload) {
		t.Fatalf("Payload %q is not JSON", e.Payload)
	}
	if e.Problem() != nil && !e.CreatedAt.IsZero() {
		t.Fatalf("CreatedAt %s is set although it could not be read (%v)", e.CreatedAt, e.Problem())
	}
}

// encodeEnvelope writes the envelope's members as a canonical envelope (by
// hand, so that the Payload goes in byte for byte). An unreadable CreatedAt
// (Problem) is left out: the round trip is of what was read.
func encodeEnvelope(t *testing.T, e Envelope) []byte {
	t.Helper()
	str := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var b strings.Builder
	b.WriteString(`{"MessageId":` + str(e.MessageID.String()))
	if e.eventTypeJSON != nil { // as it came
		b.WriteString(`,"EventType":` + string(e.eventTypeJSON))
	} else {
		b.WriteString(`,"EventType":` + str(e.EventType))
	}
	b.WriteString(`,"ContractVersion":` + strconv.Itoa(e.ContractVersion))
	if !e.CreatedAt.IsZero() {
		at, err := e.CreatedAt.MarshalJSON()
		if err != nil {
			t.Fatalf("accepted CreatedAt %s cannot be encoded again: %v", e.CreatedAt, err)
		}
		b.WriteString(`,"CreatedAt":` + string(at))
	}
	b.WriteString(`,"AggregateId":` + str(e.AggregateID))
	b.WriteString(`,"AggregateType":` + str(e.AggregateType))
	if e.Payload != nil {
		b.WriteString(`,"Payload":` + string(e.Payload))
	}
	b.WriteString("}")
	return []byte(b.String())
}

// FuzzDecodePayload: DecodePayload does not panic, refuses with the
// message's invalid code and no other, and what it accepts never decodes
// to a string (a member's name or value, at any depth) holding U+0000,
// which PostgreSQL text and jsonb cannot store. The same bytes decode into
// a struct of strings too (encoding/json's other path).
func FuzzDecodePayload(f *testing.F) {
	invalid := Code{Name: "FUZZ_PAYLOAD_INVALID", Class: Invalid}
	f.Fuzz(func(t *testing.T, payload []byte) {
		m := NewMessage(Envelope{Payload: payload}, invalid, time.Hour)
		v, err := DecodePayload[map[string]any](m)
		if err != nil {
			requireOnlyCode(t, err, invalid)
		} else {
			// What is parsed is the payload without the white space around
			// it, which bytes.TrimSpace takes in Unicode's sense (also \v,
			// \f, U+0085, U+00A0; JSON has four). From the runtime, Payload
			// is the envelope's member, exact JSON.
			if !json.Valid(bytes.TrimSpace(payload)) {
				t.Fatalf("accepted a payload that is not JSON: %q", payload)
			}
			if s, ok := findNUL(v); ok {
				t.Fatalf("accepted payload %q decodes to %q, which holds U+0000", payload, s)
			}
			if again, err2 := DecodePayload[map[string]any](m); err2 != nil || len(again) != len(v) {
				t.Fatalf("the kept result differs: %v, %v", again, err2)
			}
		}

		type texts struct {
			S string
			P *string
			L []string
			M map[string]string
		}
		w, err := DecodePayload[texts](NewMessage(Envelope{Payload: payload}, invalid, time.Hour))
		if err != nil {
			requireOnlyCode(t, err, invalid)
			return
		}
		all := append([]string{w.S}, w.L...)
		if w.P != nil {
			all = append(all, *w.P)
		}
		for k, x := range w.M {
			all = append(all, k, x)
		}
		for _, s := range all {
			if strings.ContainsRune(s, 0) {
				t.Fatalf("accepted payload %q decodes to %q, which holds U+0000", payload, s)
			}
		}
	})
}

// findNUL returns a string of v (a decoded JSON value) holding U+0000.
func findNUL(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, strings.ContainsRune(x, 0)
	case []any:
		for _, e := range x {
			if s, ok := findNUL(e); ok {
				return s, true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) {
				return k, true
			}
			if s, ok := findNUL(e); ok {
				return s, true
			}
		}
	}
	return "", false
}

// requireOnlyCode fails unless err carries code c and no other: every
// *Error along its chain has c's name.
func requireOnlyCode(t *testing.T, err error, c Code) {
	t.Helper()
	n := 0
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ce, ok := e.(*Error); ok {
			n++
			if ce.Code.Name != c.Name {
				t.Fatalf("error %q carries code %q, want only %s", err, ce.Code.Name, c.Name)
			}
		}
	}
	if n == 0 {
		t.Fatalf("error %q carries no code, want %s", err, c.Name)
	}
}
