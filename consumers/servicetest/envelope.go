package servicetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// Envelope is a message value: the envelope of docs/contract.md §4.1 with
// the members a test varies. Value writes it; it is a function of the
// fields, so a test can build again what it sent.
type Envelope struct {
	MessageID       uuid.UUID
	EventType       string
	ContractVersion int       // 0: 1, the version the contract expects
	CreatedAt       time.Time // written in UTC, RFC 3339 with the nanoseconds it has
	AggregateID     uuid.UUID
	AggregateType   string
	// Payload is written as encoding/json marshals it: a map or a struct
	// for an object, []any{…} or "x" for a payload that is not one (nil:
	// null); a Raw byte for byte.
	Payload any
	// Omit leaves these members out ("MessageId", "CreatedAt", "Payload", …).
	Omit []string
	// Set writes these members as encoding/json marshals the values, in
	// place of the fields above or besides them: a member of the wrong
	// type, one in another case, an unknown one.
	Set map[string]any
}

// Value is the envelope as a message value: one JSON object, its members in
// the order of the fields above, then Set's other members by name, the
// Payload last.
func (e Envelope) Value() []byte {
	version := e.ContractVersion
	if version == 0 {
		version = 1
	}
	type member struct {
		name  string
		value any
	}
	members := []member{
		{"MessageId", e.MessageID},
		{"EventType", e.EventType},
		{"ContractVersion", version},
		{"CreatedAt", e.CreatedAt.UTC().Format(time.RFC3339Nano)},
		{"AggregateId", e.AggregateID},
		{"AggregateType", e.AggregateType},
	}
	members = append(members, member{"Payload", e.Payload})
	for _, name := range slices.Sorted(maps.Keys(e.Set)) {
		i := slices.IndexFunc(members, func(m member) bool { return m.name == name })
		if i < 0 { // before the Payload
			i = len(members) - 1
			members = slices.Insert(members, i, member{name, nil})
		}
		members[i].value = e.Set[name]
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for _, m := range members {
		if slices.Contains(e.Omit, m.name) {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.Write(marshal(m.name))
		b.WriteByte(':')
		if raw, ok := m.value.(Raw); ok {
			b.Write(raw)
		} else {
			b.Write(marshal(m.value))
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Raw is a member's value written byte for byte, unchecked: not JSON,
// possibly (a fuzzer's payload).
type Raw []byte

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("servicetest: envelope member %#v: %v", v, err))
	}
	return b
}

// Message is the envelope as a message to produce: keyed by key (the
// contract's key, a UUID in canonical form), on partition (-1: the key's),
// with headers.
func (e Envelope) Message(key uuid.UUID, partition int32, headers map[string]string) kafkatest.Message {
	return kafkatest.Message{Partition: partition, Key: []byte(key.String()), Value: e.Value(), Headers: headers}
}

// MaxSkew is the runtime's default MAX_CLOCK_SKEW.
const MaxSkew = 24 * time.Hour

// RuntimeMessage is the message the runtime hands svc's handler for value:
// the value decoded by consumer.DecodeEnvelope (an error is
// EVENT_ENVELOPE_INVALID, and no handler runs), carrying the service's
// invalid code and the default MAX_CLOCK_SKEW.
func RuntimeMessage(svc consumer.Service, value []byte) (*consumer.Message, error) {
	env, err := consumer.DecodeEnvelope(value)
	if err != nil {
		return nil, err
	}
	return consumer.NewMessage(env, svc.InvalidCode, MaxSkew), nil
}

// RequireOneCode fails unless err carries exactly one of codes: every
// *consumer.Error along its chain has the same name, one of theirs. It
// returns that code.
func RequireOneCode(t testing.TB, err error, codes ...consumer.Code) consumer.Code {
	t.Helper()
	var got *consumer.Code
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ce, ok := e.(*consumer.Error); ok {
			if got != nil && ce.Code.Name != got.Name {
				t.Fatalf("error %q carries two codes, %s and %s", err, got.Name, ce.Code.Name)
			}
			got = &ce.Code
		}
	}
	if got == nil {
		t.Fatalf("error %q carries no code, want one of %v", err, names(codes))
	}
	for _, c := range codes {
		if c.Name == got.Name {
			return c
		}
	}
	t.Fatalf("error %q carries code %s, want one of %v", err, got.Name, names(codes))
	return consumer.Code{}
}

func names(codes []consumer.Code) []string {
	out := make([]string, len(codes))
	for i, c := range codes {
		out[i] = c.Name
	}
	return out
}

// PayloadMessage is the message the runtime hands svc's handler of
// eventType for a value whose Payload is payload, byte for byte — not JSON,
// possibly, as a fuzzer makes it — in an envelope of aggregateType whose
// other members are fixed and valid (RuntimeMessage).
func PayloadMessage(svc consumer.Service, eventType, aggregateType string, payload []byte) (*consumer.Message, error) {
	return RuntimeMessage(svc, Envelope{
		MessageID:     uuid.MustParse("6f1c2b9e-1111-4222-8333-444455556666"),
		EventType:     eventType,
		CreatedAt:     time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		AggregateID:   uuid.MustParse("6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10"),
		AggregateType: aggregateType,
		Payload:       Raw(payload),
	}.Value())
}
