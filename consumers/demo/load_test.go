package demo

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
)

// The load's ids: random by default; with TimeOrdered, every MessageId,
// BondId and referred user's id a UUIDv7, the MessageIds each above the
// one before.
func TestLoadMintsRandomOrTimeOrderedIDs(t *testing.T) {
	type minted struct{ message, bond, referred uuid.UUID }
	mint := func(l *Load, n int) []minted {
		var out []minted
		for range n {
			e := l.Rewards()
			var env struct {
				MessageId uuid.UUID
				Payload   struct{ BondId, ReferredUserId uuid.UUID }
			}
			if err := json.Unmarshal(e.Value, &env); err != nil {
				t.Fatal(err)
			}
			if env.MessageId != e.MessageID {
				t.Fatalf("envelope MessageId %s, event's %s", env.MessageId, e.MessageID)
			}
			out = append(out, minted{e.MessageID, env.Payload.BondId, env.Payload.ReferredUserId})
		}
		return out
	}

	for _, m := range mint(NewLoad(1, 1, 1), 200) {
		if m.message.Version() != 4 || m.bond.Version() != 4 || m.referred.Version() != 4 {
			t.Fatalf("default load: MessageId %s, BondId %s, ReferredUserId %s: want random (v4) ids", m.message, m.bond, m.referred)
		}
	}

	l := NewLoad(1, 1, 1)
	l.TimeOrdered()
	var last uuid.UUID
	for i, m := range mint(l, 2000) {
		if m.message.Version() != 7 {
			t.Fatalf("event %d: MessageId %s is not a UUIDv7", i, m.message)
		}
		if bytes.Compare(m.message[:], last[:]) <= 0 {
			t.Fatalf("event %d: MessageId %s not above the one before, %s", i, m.message, last)
		}
		last = m.message
		if m.referred.Version() != 7 {
			t.Fatalf("event %d: ReferredUserId %s is not a UUIDv7", i, m.referred)
		}
		if m.bond.Version() != 7 { // a close or a repeat names a bond the load minted
			t.Fatalf("event %d: BondId %s is not a UUIDv7", i, m.bond)
		}
	}
}
