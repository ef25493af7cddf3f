package rewards

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
)

// TestDecide covers every row state (absent, Active, Replaced, Revoked, an
// unknown status, known statuses in another case) × event (bond-created,
// bond-closed) × version relation (lower, equal, higher) × ReferredUserId
// (same, different). The expectations are spelled out per row state, not
// derived from Decide's own order of checks.
func TestDecide(t *testing.T) {
	const (
		lower = iota
		equal
		higher
	)
	relName := []string{"lower", "equal", "higher"}
	const rowVersion = 5
	versionFor := []int64{rowVersion - 1, rowVersion, rowVersion + 1}

	// want[state][event][relation] for the same ReferredUserId;
	// wantMismatch overrides it when the event's ReferredUserId differs.
	type expect struct {
		created, closed [3]Action
	}
	stale := ActionSkipStale
	cases := []struct {
		state        string
		status       Status // "" = no row
		want         expect
		wantMismatch *expect
	}{
		{state: "active", status: StatusActive, want: expect{
			created: [3]Action{stale, stale, ActionUpdate},
			closed:  [3]Action{stale, stale, ActionClose},
		}, wantMismatch: &expect{
			// a newer created on an Active row keeps the row's
			// immutable fields and logs the difference
			created: [3]Action{stale, stale, ActionUpdate},
			closed:  [3]Action{stale, stale, ActionReferredMismatch},
		}},
		{state: "active-lowercase", status: "active", want: expect{
			created: [3]Action{stale, stale, ActionUpdate},
			closed:  [3]Action{stale, stale, ActionClose},
		}},
		{state: "replaced", status: StatusReplaced, want: expect{
			created: [3]Action{stale, stale, ActionInvalidTerminal},
			closed:  [3]Action{ActionSkipAlreadyClosed, ActionSkipAlreadyClosed, ActionSkipAlreadyClosed},
		}, wantMismatch: &expect{
			created: [3]Action{stale, stale, ActionInvalidTerminal},
			closed:  [3]Action{ActionSkipAlreadyClosed, ActionSkipAlreadyClosed, ActionSkipAlreadyClosed},
		}},
		{state: "revoked", status: StatusRevoked, want: expect{
			created: [3]Action{stale, stale, ActionInvalidTerminal},
			closed:  [3]Action{ActionSkipAlreadyClosed, ActionSkipAlreadyClosed, ActionSkipAlreadyClosed},
		}, wantMismatch: &expect{
			created: [3]Action{stale, stale, ActionInvalidTerminal},
			closed:  [3]Action{ActionSkipAlreadyClosed, ActionSkipAlreadyClosed, ActionSkipAlreadyClosed},
		}},
		{state: "revoked-uppercase", status: "REVOKED", want: expect{
			created: [3]Action{stale, stale, ActionInvalidTerminal},
			closed:  [3]Action{ActionSkipAlreadyClosed, ActionSkipAlreadyClosed, ActionSkipAlreadyClosed},
		}},
		// An unknown status came from a bond-closed: not Active, so a
		// created never re-activates it (fail closed); not one of the
		// terminal statuses either, so a newer closed still applies.
		{state: "unknown", status: "Suspended", want: expect{
			created: [3]Action{stale, stale, ActionInvalidTerminal},
			closed:  [3]Action{stale, stale, ActionClose},
		}, wantMismatch: &expect{
			created: [3]Action{stale, stale, ActionInvalidTerminal},
			closed:  [3]Action{stale, stale, ActionReferredMismatch},
		}},
	}

	referred := uuid.MustParse("11111111-1111-1111-1111-111111111111")
	other := uuid.MustParse("22222222-2222-2222-2222-222222222222")
	seen := map[string]bool{}
	for _, c := range cases {
		for _, mismatch := range []bool{false, true} {
			want := c.want
			if mismatch {
				if c.wantMismatch == nil {
					continue
				}
				want = *c.wantMismatch
			}
			for rel := lower; rel <= higher; rel++ {
				for _, et := range []EventType{BondCreatedEvent, BondClosedEvent} {
					exp := want.created[rel]
					if et == BondClosedEvent {
						exp = want.closed[rel]
					}
					evReferred := referred
					if mismatch {
						evReferred = other
					}
					name := fmt.Sprintf("%s/%s/version-%s/referred-same=%t", c.state, et, relName[rel], !mismatch)
					t.Run(name, func(t *testing.T) {
						row := &Row{Status: c.status, ReplicaVersion: rowVersion, ReferredUserID: referred}
						ev := Event{Type: et, Version: versionFor[rel], ReferredUserID: evReferred}
						if got := Decide(row, ev); got != exp {
							t.Errorf("Decide(%+v, %+v) = %s, want %s", *row, ev, got, exp)
						}
					})
					seen[fmt.Sprintf("%s/%s/%d/%t", c.status, et, rel, mismatch)] = true
				}
			}
		}
	}

	// No row: whatever the version, a created inserts, a closed is an orphan.
	for _, v := range []int64{1, 2, 1 << 40} {
		for et, want := range map[EventType]Action{BondCreatedEvent: ActionInsert, BondClosedEvent: ActionOrphan} {
			t.Run(fmt.Sprintf("absent/%s/version-%d", et, v), func(t *testing.T) {
				if got := Decide(nil, Event{Type: et, Version: v, ReferredUserID: referred}); got != want {
					t.Errorf("Decide(nil, %s v%d) = %s, want %s", et, v, got, want)
				}
			})
		}
	}

	// Exhaustiveness: each spec status and the unknown one, both event
	// types, all three version relations, both referred cases.
	for _, st := range []Status{StatusActive, StatusReplaced, StatusRevoked, "Suspended"} {
		for _, et := range []EventType{BondCreatedEvent, BondClosedEvent} {
			for rel := lower; rel <= higher; rel++ {
				for _, mm := range []bool{false, true} {
					if !seen[fmt.Sprintf("%s/%s/%d/%t", st, et, rel, mm)] {
						t.Errorf("no case for status %s × %s × version %s × mismatch %t", st, et, relName[rel], mm)
					}
				}
			}
		}
	}
}

func TestActionNames(t *testing.T) {
	for a := ActionInsert; a <= ActionReferredMismatch; a++ {
		if _, ok := actionNames[a]; !ok {
			t.Errorf("action %d has no name", int(a))
		}
	}
}

func TestParseStatus(t *testing.T) {
	for _, c := range []struct {
		in    string
		want  Status
		known bool
	}{
		{"Active", StatusActive, true},
		{"active", StatusActive, true},
		{"REPLACED", StatusReplaced, true},
		{"revoked", StatusRevoked, true},
		{"ReVoKeD", StatusRevoked, true},
		{"Suspended", "Suspended", false},
		{"revoked ", "revoked ", false}, // stored as it came
		{"", "", false},
	} {
		got, known := ParseStatus(c.in)
		if got != c.want || known != c.known {
			t.Errorf("ParseStatus(%q) = %q, %t; want %q, %t", c.in, got, known, c.want, c.known)
		}
	}
	if !StatusReplaced.Terminal() || !StatusRevoked.Terminal() || StatusActive.Terminal() || Status("Suspended").Terminal() {
		t.Error("Terminal: only Replaced and Revoked are terminal")
	}
	if !StatusActive.Active() || Status("Suspended").Active() || StatusRevoked.Active() {
		t.Error("Active: only Active is active")
	}
}
