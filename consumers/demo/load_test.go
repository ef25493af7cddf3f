package demo

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
)

// envelopeOf decodes an event's envelope.
func envelopeOf(t *testing.T, e Event) (env struct {
	MessageId uuid.UUID
	EventType string
	Payload   map[string]any
}) {
	t.Helper()
	if err := json.Unmarshal(e.Value, &env); err != nil {
		t.Fatal(err)
	}
	if env.MessageId != e.MessageID {
		t.Fatalf("envelope MessageId %s, event's %s", env.MessageId, e.MessageID)
	}
	return env
}

// idOf is the payload member k as a UUID, uuid.Nil when absent.
func idOf(t *testing.T, p map[string]any, k string) uuid.UUID {
	t.Helper()
	s, ok := p[k].(string)
	if !ok {
		return uuid.Nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatalf("%s %q: %v", k, s, err)
	}
	return id
}

// The load's ids, over the three topics' mix: random by default; with
// TimeOrdered every MessageId a UUIDv7 above the one before, and every
// BondId, referred user's id and ReplacedByBondId a UUIDv7.
func TestLoadMintsRandomOrTimeOrderedIDs(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		l := NewLoad(1, 1, 1)
		want := 4
		if ordered {
			l.TimeOrdered()
			want = 7
		}
		var last uuid.UUID
		kinds := map[string]int{}
		for i := range 3000 {
			env := envelopeOf(t, l.Next())
			kinds[env.EventType]++
			if v := env.MessageId.Version(); int(v) != want {
				t.Fatalf("ordered %v, event %d (%s): MessageId %s is v%d", ordered, i, env.EventType, env.MessageId, v)
			}
			if ordered {
				if bytes.Compare(env.MessageId[:], last[:]) <= 0 {
					t.Fatalf("event %d: MessageId %s not above the one before, %s", i, env.MessageId, last)
				}
				last = env.MessageId
			}
			for _, k := range []string{"BondId", "ReferredUserId", "ReplacedByBondId"} {
				if id := idOf(t, env.Payload, k); id != uuid.Nil && int(id.Version()) != want {
					t.Fatalf("ordered %v, event %d (%s): %s %s is v%d", ordered, i, env.EventType, k, id, id.Version())
				}
			}
		}
		if len(kinds) != 4 {
			t.Fatalf("ordered %v: event types %v, want the four of the three topics", ordered, kinds)
		}
	}
}

// TimeOrdered changes the ids only: a seed gives the same events either
// way (types, versions, statuses, roles, actions, sizes).
func TestTimeOrderedKeepsTheLoadsChoices(t *testing.T) {
	random, ordered := NewLoad(7, 3, 3), NewLoad(7, 3, 3)
	ordered.TimeOrdered()
	for i := range 3000 {
		a, b := envelopeOf(t, random.Next()), envelopeOf(t, ordered.Next())
		if a.EventType != b.EventType || !reflect.DeepEqual(masked(a.Payload), masked(b.Payload)) {
			t.Fatalf("event %d differs beyond its ids and times:\n%s %v\n%s %v", i, a.EventType, masked(a.Payload), b.EventType, masked(b.Payload))
		}
	}
}

// masked is v with every UUID and every time replaced by a placeholder.
func masked(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = masked(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = masked(x)
		}
		return out
	case string:
		if _, err := uuid.Parse(v); err == nil {
			return "<id>"
		}
		if _, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return "<time>"
		}
	}
	return v
}
