package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Envelope is the message format of docs/contract.md §4. Member names are matched
// case-insensitively and unknown members are ignored (encoding/json's
// rules).
type Envelope struct {
	MessageID       uuid.UUID
	EventType       string
	ContractVersion int
	CreatedAt       time.Time // event time
	AggregateID     string
	AggregateType   string
	Payload         json.RawMessage

	problem error // a member that could not be read (see Problem)
	// eventTypeJSON is an EventType that is present but not a JSON string
	// (42, {"a":1}, true), as it came; EventType is then "". No route
	// takes it: it is an unknown EventType, logged as this text.
	eventTypeJSON json.RawMessage
}

// DecodeEnvelope reads a message value. A value that is not a JSON object, a
// tombstone, or an envelope without a valid MessageId is an
// EVENT_ENVELOPE_INVALID error. Any other member that cannot be read leaves
// the envelope readable: an EventType that is not a string is one no route
// takes (skipped as unknown, its JSON text logged: docs/contract.md §4.3),
// ContractVersion becomes 0 (a mismatch, warned about) and a CreatedAt that
// is not RFC 3339 is reported by Problem, which the runtime dead-letters
// with the service's own invalid code.
func DecodeEnvelope(value []byte) (Envelope, error) {
	v := bytes.TrimSpace(value)
	if value == nil {
		return Envelope{}, EnvelopeInvalid.Errorf("null value (tombstone)")
	}
	if len(v) == 0 || v[0] != '{' {
		return Envelope{}, EnvelopeInvalid.Errorf("value is not a JSON object")
	}
	if !utf8.Valid(v) { // the contract: one UTF-8 JSON envelope
		return Envelope{}, EnvelopeInvalid.Errorf("value is not valid UTF-8")
	}
	// Every member kept raw: a member of an unexpected type must not make
	// the whole envelope unreadable. Names match as encoding/json matches
	// them, case-insensitively; a member given twice (in any case) counts
	// as its last occurrence.
	w, err := envelopeMembers(v)
	if err != nil {
		return Envelope{}, EnvelopeInvalid.Errorf("unreadable envelope: %v", err)
	}
	var e Envelope
	if w.MessageID == nil || isNull(w.MessageID) {
		return Envelope{}, EnvelopeInvalid.Errorf("MessageId is missing")
	}
	id, ok := jsonString(w.MessageID)
	if !ok {
		return Envelope{}, EnvelopeInvalid.Errorf("MessageId %s is not a UUID string", Cut(string(w.MessageID)))
	}
	parsed, err := uuid.Parse(id)
	if err != nil || parsed == uuid.Nil {
		return Envelope{}, EnvelopeInvalid.Errorf("MessageId %q is not a UUID", Cut(id))
	}
	e.MessageID = parsed
	if raw := w.EventType; raw != nil && !isNull(raw) {
		if e.EventType, ok = jsonString(raw); !ok {
			e.eventTypeJSON = raw // unknown: skipped, as a string no route takes
		}
	}
	if raw := w.ContractVersion; raw != nil && !isNull(raw) {
		// A number, or a number in a string.
		if i, err := strconv.ParseInt(strings.Trim(string(raw), `"`), 10, 64); err == nil {
			e.ContractVersion = int(i)
		}
	}
	if raw := w.CreatedAt; raw != nil && !isNull(raw) {
		var t time.Time
		if err := t.UnmarshalJSON(raw); err != nil {
			e.problem = fmt.Errorf("CreatedAt %s is not an RFC 3339 time", Cut(string(raw)))
		}
		e.CreatedAt = t
	}
	if raw := w.AggregateID; raw != nil && !isNull(raw) {
		s, ok := jsonString(raw)
		if !ok {
			s = string(raw)
		}
		e.AggregateID = s
	}
	if raw := w.AggregateType; raw != nil && !isNull(raw) {
		e.AggregateType, _ = jsonString(raw)
	}
	e.Payload = w.Payload
	return e, nil
}

// rawEnvelope is an envelope's members as they came, nil when absent.
type rawEnvelope struct {
	MessageID, EventType, ContractVersion, CreatedAt, AggregateID, AggregateType, Payload json.RawMessage
}

// envelopeMembers reads the members of v, a JSON object: what
// json.Unmarshal into rawEnvelope (json.RawMessage fields named
// "MessageId", …) gives, at a fraction of the cost. Unmarshal checks the
// value, then decodes it by reflection, scanning the payload (most of the
// bytes) a second time to copy it out; under a backlog that was a quarter
// of a consumer's CPU. Here json.Valid checks v, then a byte loop that
// relies on its validity splits the top-level members; the raw members
// share v's bytes. A differential test holds it to json.Unmarshal's
// results (envelope_internal_test.go).
func envelopeMembers(v []byte) (rawEnvelope, error) {
	var w rawEnvelope
	i := skipSpace(v, 0)
	if !json.Valid(v) || v[i] != '{' {
		err := json.Unmarshal(v, &w) // says why
		if err == nil {
			err = errors.New("not a JSON object")
		}
		return rawEnvelope{}, err
	}
	i = skipSpace(v, i+1)
	for v[i] != '}' {
		end := stringEnd(v, i)
		key := v[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if err := json.Unmarshal(v[i:end], &k); err != nil {
				return rawEnvelope{}, err
			}
			key = []byte(k)
		}
		i = skipSpace(v, skipSpace(v, end)+1) // past the colon
		start := i
		i = valueEnd(v, i)
		if dst := w.member(key); dst != nil {
			*dst = v[start:i:i]
		}
		if i = skipSpace(v, i); v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return w, nil
}

// member is the field named key, as encoding/json matches names (under
// Unicode case folding, as bytes.EqualFold: its fold.go); nil for a
// member the envelope does not have.
func (w *rawEnvelope) member(key []byte) *json.RawMessage {
	for _, f := range [...]struct {
		name string
		dst  *json.RawMessage
	}{
		{"MessageId", &w.MessageID}, {"EventType", &w.EventType}, {"ContractVersion", &w.ContractVersion},
		{"CreatedAt", &w.CreatedAt}, {"AggregateId", &w.AggregateID}, {"AggregateType", &w.AggregateType}, {"Payload", &w.Payload},
	} {
		if bytes.EqualFold(key, []byte(f.name)) {
			return f.dst
		}
	}
	return nil
}

// skipSpace returns the index of the first byte at or after i in v that
// is not JSON white space.
func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that starts at v[i]
// (a quote), in valid JSON.
func stringEnd(v []byte, i int) int {
	for i++; ; i++ {
		switch v[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// valueEnd returns the index just past the value that starts at v[i], in
// valid JSON.
func valueEnd(v []byte, i int) int {
	switch v[i] {
	case '"':
		return stringEnd(v, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch v[i] {
			case '"':
				i = stringEnd(v, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(v) { // a number, true, false or null
		switch v[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// jsonString reads a JSON string value (raw is valid JSON): without escapes
// and in valid UTF-8 it is the text between the quotes, else encoding/json
// decodes it (which replaces invalid UTF-8 with U+FFFD: an EventType ends up
// in metric labels, which must be valid UTF-8).
func jsonString(raw json.RawMessage) (string, bool) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : n-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// Problem reports a member of a readable envelope that could not be read.
func (e Envelope) Problem() error { return e.problem }

// loggedEventType is the EventType as log lines and span attributes carry
// it, cut (Cut): the string, or the JSON text of an EventType that is not
// one.
func (e Envelope) loggedEventType() string {
	if e.eventTypeJSON != nil {
		return Cut(string(e.eventTypeJSON))
	}
	return Cut(e.EventType)
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// ProducerTextLimit bounds the bytes of a producer's string (a MessageId
// that is not a UUID, an EventType, a payload member, a key) that go into a
// log line, a DLQ reason or a span attribute: a 1 MB "UUID" must not make
// megabyte lines on every attempt. The DLQ record keeps the message's own
// key, value and headers byte for byte; only the texts about it are cut.
const ProducerTextLimit = 200

// Cut bounds a producer's string s for a log line, a DLQ reason or a span
// attribute: at most ProducerTextLimit bytes of it, valid UTF-8, then a
// marker naming how much was left out ("…(+N bytes)").
func Cut(s string) string {
	if len(s) <= ProducerTextLimit {
		return s
	}
	n := ProducerTextLimit
	for n > ProducerTextLimit-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n-- // not inside a character
	}
	return strings.ToValidUTF8(s[:n], "") + fmt.Sprintf("…(+%d bytes)", len(s)-n)
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// DecodePayload decodes the message's Payload into a P. A payload that is
// missing, not an object, or has a member of the wrong type is an error of
// the service's invalid code.
//
// The result is kept with the message: the next call for the same P — a
// Read's, then the handler's, and the handler's on every retry —
// returns it without decoding again. So a Read decodes the handler's
// own payload type. P's values are then shared between the calls: read
// what its pointers, slices and maps refer to, never change it.
func DecodePayload[P any](m *Message) (P, error) {
	if d, ok := m.decoded.(*decoded[P]); ok {
		return d.p, d.err
	}
	p, err := decodePayload[P](m)
	m.decoded = &decoded[P]{p, err}
	return p, err
}

// decoded is a DecodePayload result kept with its message.
type decoded[P any] struct {
	p   P
	err error
}

func decodePayload[P any](m *Message) (P, error) {
	var p P
	v := bytes.TrimSpace(m.Payload)
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return p, m.invalid.Errorf("Payload is missing")
	}
	if v[0] != '{' {
		return p, m.invalid.Errorf("Payload is not a JSON object")
	}
	if hasNUL(v) {
		return p, m.invalid.Errorf("Payload holds a NUL character (\\u0000), which PostgreSQL text cannot store")
	}
	if err := json.Unmarshal(v, &p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return p, m.invalid.Errorf("Payload.%s: %s is not a valid %s", Cut(te.Field), Cut(te.Value), te.Type)
		}
		return p, m.invalid.Errorf("Payload: %v", err)
	}
	return p, nil
}

// hasNUL reports whether the JSON text raw holds the escape \u0000 (a NUL
// character in a string: the only way JSON carries one) outside another
// escape (\\u0000 is a backslash and the text u0000).
func hasNUL(raw []byte) bool {
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		j += i
		slashes := 0
		for k := j - 1; k >= 0 && raw[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 { // the backslash of \u0000 is not itself escaped
			return true
		}
		i = j + 1
	}
}

// CheckTime returns an error of the message's invalid code when t, the
// payload member named member, lies further in the future than the
// runtime's MAX_CLOCK_SKEW allows (a producer's clock that far ahead, or a
// value no event can have, year 9999, would otherwise stay the newest
// event time for ever), or is a time PostgreSQL does not store
// (StorableTime): refused here, with its reason, rather than by the
// server's data exception in the middle of a shared transaction.
func (m *Message) CheckTime(member string, t time.Time) error {
	if err := timeProblem(member, t, m.maxSkew); err != nil {
		return m.invalid.Wrap(err)
	}
	return nil
}

// timeProblem says what makes t, the member named member, no event's
// time (CheckTime), or nil: the envelope's CreatedAt is judged the same.
func timeProblem(member string, t time.Time, maxSkew time.Duration) error {
	if maxSkew > 0 && t.After(time.Now().Add(maxSkew)) {
		return fmt.Errorf("%s %s is more than %s in the future (MAX_CLOCK_SKEW)", member, t.Format(time.RFC3339), maxSkew)
	}
	if !StorableTime(t) {
		return fmt.Errorf("%s %s is not a time PostgreSQL stores (a year from 0001 and an offset within ±15:59)", member, t.Format(time.RFC3339))
	}
	return nil
}

// StorableTime reports whether a timestamptz column takes t as the text
// an event carries it in: PostgreSQL refuses a year before 0001 (RFC 3339
// writes 0000; 0001-01-01T00:30+01:00, 1 BC in UTC, it takes) and an
// offset of 16 hours or more (RFC 3339 and Go's parser allow up to 23:59).
// Years past 9999 do not come in RFC 3339, which writes four digits, and
// CheckTime refuses the future anyway.
func StorableTime(t time.Time) bool {
	_, off := t.Zone()
	return t.Year() >= 1 && off > -16*3600 && off < 16*3600
}

// Invalid returns an error of the message's service invalid code: for
// handlers' own validation.
func (m *Message) Invalid(format string, args ...any) error {
	return m.invalid.Wrap(fmt.Errorf(format, args...))
}
