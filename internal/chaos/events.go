package chaos

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
)

// EnvelopeInvalid is the runtime's code for a message whose envelope cannot
// be read (docs/contract.md §4).
const EnvelopeInvalid = "EVENT_ENVELOPE_INVALID"

// event is one message of a service's stream, as the generator made it.
type event struct {
	seq   int    // its place in the stream (header x-chaos-seq)
	key   []byte // the Kafka key
	value []byte // nil: a tombstone
	// id is the envelope's MessageId; uuid.Nil when it has none.
	id uuid.UUID
	// note says what the message exercises ("bond created", "poison:
	// BondId missing", …); poison notes start with "poison".
	note string
	// code is the DLQ code of a message that is poison whatever the state
	// (an unreadable envelope, a payload that breaks the spec); "" for
	// one the model decides.
	code string
	// unknownType: an EventType the service does not route (skipped, no
	// mark, no dead letter).
	unknownType bool
	// body is what the model applies: the service's typed event; nil for
	// poison and unknown types.
	body any
	// route is the idempotency key prefix of its EventType (the mark of a
	// message is route + MessageId).
	route string
	// want is the DLQ code the generator meant the message to end with
	// ("" none): the model must agree (a check of the run itself).
	want string
}

// markKey is the idempotency key e's processing marks; "" for a message
// without a MessageId.
func (e *event) markKey() string {
	if e.id == uuid.Nil {
		return ""
	}
	return e.route + e.id.String()
}

// gen is a seeded source of ids, times and choices: the same seed makes
// the same stream.
type gen struct {
	rng   *rand.Rand
	clock time.Time
}

// epoch is when every generated stream's clock starts: events carry
// times of their own, not the wall clock's, so that a seed makes the same
// bytes on every run.
var epoch = time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)

func newGen(seed, stream uint64) *gen {
	return &gen{rng: rand.New(rand.NewPCG(seed, stream)), clock: epoch}
}

// id is a random (version 4) UUID from the seeded source.
func (g *gen) id() uuid.UUID {
	var u uuid.UUID
	binary.LittleEndian.PutUint64(u[:8], g.rng.Uint64())
	binary.LittleEndian.PutUint64(u[8:], g.rng.Uint64())
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func (g *gen) intn(n int) int { return g.rng.IntN(n) }

// chance is true with probability p.
func (g *gen) chance(p float64) bool { return g.rng.Float64() < p }

// now moves the stream's clock on by 1–20 ms and returns it (millisecond
// precision, which PostgreSQL's microseconds keep).
func (g *gen) now() time.Time {
	g.clock = g.clock.Add(time.Duration(1+g.rng.IntN(20)) * time.Millisecond)
	return g.clock
}

// pick returns one of xs.
func pick[T any](g *gen, xs []T) T { return xs[g.rng.IntN(len(xs))] }

// mutate decodes an envelope, lets fn change it and encodes it again.
func mutate(value []byte, fn func(env map[string]any)) []byte {
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber()
	var env map[string]any
	if err := d.Decode(&env); err != nil {
		panic(err) // only envelopes the generator built are mutated
	}
	fn(env)
	b, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	return b
}

// payloadOf is the envelope's Payload object, for mutate's callers.
func payloadOf(env map[string]any) map[string]any { return env["Payload"].(map[string]any) }

// withContractVersion is value with another ContractVersion: warned about,
// processed as usual.
func withContractVersion(value []byte, v int) []byte {
	return mutate(value, func(env map[string]any) { env["ContractVersion"] = v })
}

// poisonKind is a way to break a valid message: note names it, code is
// the DLQ code it must end with, and make turns the valid envelope into
// the broken value (nil: a tombstone).
type poisonKind struct {
	note string
	code string
	make func(valid []byte) []byte
}

// envelopePoisons break the envelope itself: EVENT_ENVELOPE_INVALID on
// every topic, or the service's invalid code for a readable envelope with
// a member that cannot be read (invalid is the service's code).
func envelopePoisons(invalid string) []poisonKind {
	set := func(k string, v any) func([]byte) []byte {
		return func(b []byte) []byte { return mutate(b, func(env map[string]any) { env[k] = v }) }
	}
	drop := func(k string) func([]byte) []byte {
		return func(b []byte) []byte { return mutate(b, func(env map[string]any) { delete(env, k) }) }
	}
	constant := func(v []byte) func([]byte) []byte { return func([]byte) []byte { return v } }
	return []poisonKind{
		{"unreadable envelope", EnvelopeInvalid, constant([]byte(`{"MessageId": "`))},
		{"envelope not JSON", EnvelopeInvalid, constant([]byte("{not json"))},
		{"envelope a JSON array", EnvelopeInvalid, constant([]byte(`[{"MessageId":"6f1c2b8e-1f7a-4d2e-9a51-2f0a5e3c9b10"}]`))},
		{"envelope a JSON string", EnvelopeInvalid, constant([]byte(`"hello"`))},
		{"envelope JSON null", EnvelopeInvalid, constant([]byte(`null`))},
		{"tombstone", EnvelopeInvalid, constant(nil)},
		{"MessageId missing", EnvelopeInvalid, drop("MessageId")},
		{"MessageId not a UUID", EnvelopeInvalid, set("MessageId", "message-1")},
		{"MessageId all zeros", EnvelopeInvalid, set("MessageId", uuid.Nil.String())},
		{"MessageId a number", EnvelopeInvalid, set("MessageId", 42)},
		{"CreatedAt not RFC 3339", invalid, set("CreatedAt", "yesterday")},
		{"Payload missing", invalid, drop("Payload")},
		{"Payload null", invalid, set("Payload", nil)},
		{"Payload a string", invalid, set("Payload", "{}")},
		{"Payload an array", invalid, set("Payload", []any{1, 2})},
		{"CreatedAt in the year 9999", invalid, set("CreatedAt", "9999-12-31T23:59:59Z")},
		{"a NUL in the Payload", invalid, func(b []byte) []byte {
			return mutate(b, func(env map[string]any) { payloadOf(env)["Note"] = "a\x00b" })
		}},
	}
}

// payloadPoison is a poisonKind that changes one payload member: set it to
// v, or drop it when v is dropMember.
func payloadPoison(note, code, member string, v any) poisonKind {
	return poisonKind{note: note, code: code, make: func(b []byte) []byte {
		return mutate(b, func(env map[string]any) {
			p := payloadOf(env)
			if v == dropMember {
				delete(p, member)
				return
			}
			p[member] = v
		})
	}}
}

// dropMember as payloadPoison's value removes the member.
var dropMember = &struct{ drop bool }{true}

// poison turns e, a valid message, into a poison message of kind k.
func poison(e *event, k poisonKind) {
	e.value = k.make(e.value)
	e.note = "poison: " + k.note
	e.code, e.want = k.code, k.code
	e.body = nil
	var env struct{ MessageID string }
	if e.value == nil || json.Unmarshal(e.value, &env) != nil {
		e.id = uuid.Nil
		return
	}
	if id, err := uuid.Parse(env.MessageID); err == nil {
		e.id = id
	} else {
		e.id = uuid.Nil
	}
}

// unknownType turns e into a message of an EventType the service does not
// route — a string, or a value that is not one (a number: no route takes
// it either) — skipped with a warning, never dead-lettered.
func unknownType(e *event, eventType any) {
	e.value = mutate(e.value, func(env map[string]any) { env["EventType"] = eventType })
	e.note = "unknown EventType"
	e.unknownType = true
	e.body = nil
}
