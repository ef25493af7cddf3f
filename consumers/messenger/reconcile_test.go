package messenger

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
)

// u is a readable fixed user id for pure tests: u(1) = 00000000-…-000000000001.
func u(n int) uuid.UUID { return uuid.MustParse(fmt.Sprintf("00000000-0000-0000-0000-%012d", n)) }

func m(n int, role string) member { return member{UserID: u(n), Role: role} }

func rc(n int, from, to string) roleChange { return roleChange{UserID: u(n), From: from, To: to} }

func TestReconcile(t *testing.T) {
	tests := []struct {
		name             string
		target, current  []member
		add, remove      []member
		roles            []roleChange
		wantEmpty        bool
		wantFactsInOrder []string
	}{
		{
			name:    "a new user in the target is added",
			target:  []member{m(1, RoleExecutor), m(2, RoleInvestorPrimary)},
			current: []member{m(1, RoleExecutor)},
			add:     []member{m(2, RoleInvestorPrimary)},
		},
		{
			name:    "an active member missing from the target is removed with the role they had",
			target:  []member{m(1, RoleExecutor)},
			current: []member{m(1, RoleExecutor), m(2, RoleLawyer)},
			remove:  []member{m(2, RoleLawyer)},
		},
		{
			name:    "a role change updates the role and nothing else",
			target:  []member{m(1, RoleExecutor), m(2, RoleCoAgent)},
			current: []member{m(1, RoleExecutor), m(2, RoleAssistant)},
			roles:   []roleChange{rc(2, RoleAssistant, RoleCoAgent)},
		},
		{
			name:             "hand-over to a member: the old Executor leaves, the new one is re-roled",
			target:           []member{m(2, RoleExecutor), m(3, RoleInvestorPrimary)},
			current:          []member{m(1, RoleExecutor), m(2, RoleCoAgent), m(3, RoleInvestorPrimary)},
			remove:           []member{m(1, RoleExecutor)},
			roles:            []roleChange{rc(2, RoleCoAgent, RoleExecutor)},
			wantFactsInOrder: []string{EventParticipantLeft, EventParticipantRoleChanged},
		},
		{
			name:             "hand-over to an outsider: the old Executor leaves, the new one joins",
			target:           []member{m(3, RoleInvestorPrimary), m(4, RoleExecutor)},
			current:          []member{m(1, RoleExecutor), m(3, RoleInvestorPrimary)},
			add:              []member{m(4, RoleExecutor)},
			remove:           []member{m(1, RoleExecutor)},
			wantFactsInOrder: []string{EventParticipantLeft, EventParticipantJoined},
		},
		{
			name:    "several agents and investors are all members",
			target:  []member{m(1, RoleExecutor), m(2, RoleCoAgent), m(3, RoleInvestorPrimary), m(4, RoleInvestorSecondary), m(5, RoleCoAgent)},
			current: []member{m(1, RoleExecutor)},
			add:     []member{m(2, RoleCoAgent), m(3, RoleInvestorPrimary), m(4, RoleInvestorSecondary), m(5, RoleCoAgent)},
		},
		{
			name:    "an unknown role is added as it came",
			target:  []member{m(1, RoleExecutor), m(2, "Notary")},
			current: []member{m(1, RoleExecutor)},
			add:     []member{m(2, "Notary")},
		},
		{
			name:    "a move to an unknown role is a role change",
			target:  []member{m(1, "Notary")},
			current: []member{m(1, RoleLawyer)},
			roles:   []roleChange{rc(1, RoleLawyer, "Notary")},
		},
		{
			name:      "roles are compared case-insensitively",
			target:    []member{m(1, RoleExecutor), m(2, "Notary")},
			current:   []member{m(1, "executor"), m(2, "NOTARY")},
			wantEmpty: true,
		},
		{
			name:      "the same set in another order changes nothing",
			target:    []member{m(3, RoleInvestorPrimary), m(1, RoleExecutor)},
			current:   []member{m(1, RoleExecutor), m(3, RoleInvestorPrimary)},
			wantEmpty: true,
		},
		{
			name:   "an empty chat gets the whole target",
			target: []member{m(2, RoleResponsible), m(1, RoleExecutor)},
			add:    []member{m(1, RoleExecutor), m(2, RoleResponsible)},
		},
		{
			name:             "a whole new team replaces the old one",
			target:           []member{m(5, RoleExecutor), m(6, RoleInvestorPrimary)},
			current:          []member{m(1, RoleExecutor), m(2, RoleInvestorPrimary)},
			add:              []member{m(5, RoleExecutor), m(6, RoleInvestorPrimary)},
			remove:           []member{m(1, RoleExecutor), m(2, RoleInvestorPrimary)},
			wantFactsInOrder: []string{EventParticipantLeft, EventParticipantLeft, EventParticipantJoined, EventParticipantJoined},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := reconcile(tt.target, tt.current)
			if !reflect.DeepEqual(d.Add, tt.add) {
				t.Errorf("toAdd = %v, want %v", d.Add, tt.add)
			}
			if !reflect.DeepEqual(d.Remove, tt.remove) {
				t.Errorf("toRemove = %v, want %v", d.Remove, tt.remove)
			}
			if !reflect.DeepEqual(d.Roles, tt.roles) {
				t.Errorf("toRole = %v, want %v", d.Roles, tt.roles)
			}
			if d.empty() != tt.wantEmpty {
				t.Errorf("empty() = %v, want %v", d.empty(), tt.wantEmpty)
			}
			facts := d.facts()
			if n := len(tt.add) + len(tt.remove) + len(tt.roles); len(facts) != n {
				t.Errorf("%d facts, want one per change (%d)", len(facts), n)
			}
			if tt.wantFactsInOrder != nil {
				var types []string
				for _, f := range facts {
					types = append(types, f.Type)
				}
				if !reflect.DeepEqual(types, tt.wantFactsInOrder) {
					t.Errorf("fact types %v, want %v", types, tt.wantFactsInOrder)
				}
			}
		})
	}
}

func TestFacts(t *testing.T) {
	d := diff{
		Add:    []member{m(4, RoleExecutor)},
		Remove: []member{m(1, RoleExecutor)},
		Roles:  []roleChange{rc(2, RoleAssistant, RoleCoAgent)},
	}
	prev := RoleAssistant
	want := []fact{
		{Type: EventParticipantLeft, UserID: u(1), Role: RoleExecutor},
		{Type: EventParticipantRoleChanged, UserID: u(2), Role: RoleCoAgent, PreviousRole: &prev},
		{Type: EventParticipantJoined, UserID: u(4), Role: RoleExecutor},
	}
	if got := d.facts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("facts = %+v, want %+v", got, want)
	}
}

// TestReconcileSnapshot goes from the payload's ActiveParticipants and
// Participants, through validation, to the diff: the delta never changes
// the outcome.
func TestReconcileSnapshot(t *testing.T) {
	type ap = participantSnapshot
	type pc = participantChange
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		active      []ap
		delta       []pc
		current     []member
		add, remove []member
		roles       []roleChange
		unknownCT   int
		unknownRole int
		invalid     bool
	}{
		{
			name:    "hand-over delta: Removed + ExecutorChanged",
			active:  []ap{{u(2), "Executor"}, {u(3), "InvestorPrimary"}},
			delta:   []pc{{UserID: u(1), ChangeType: "Removed", Role: "Executor"}, {UserID: u(2), ChangeType: "ExecutorChanged", Role: "Executor"}},
			current: []member{m(1, RoleExecutor), m(2, RoleCoAgent), m(3, RoleInvestorPrimary)},
			remove:  []member{m(1, RoleExecutor)},
			roles:   []roleChange{rc(2, RoleCoAgent, RoleExecutor)},
		},
		{
			name:      "an unknown ChangeType is a no-op of the delta; the target still decides",
			active:    []ap{{u(1), "Executor"}, {u(2), "Lawyer"}},
			delta:     []pc{{UserID: u(2), ChangeType: "Promoted", Role: "Lawyer"}},
			current:   []member{m(1, RoleExecutor)},
			add:       []member{m(2, RoleLawyer)},
			unknownCT: 1,
		},
		{
			name:    "a delta that lies (says Removed, target keeps them) does not remove",
			active:  []ap{{u(1), "Executor"}, {u(2), "Lawyer"}},
			delta:   []pc{{UserID: u(2), ChangeType: "Removed", Role: "Lawyer"}},
			current: []member{m(1, RoleExecutor), m(2, RoleLawyer)},
		},
		{
			name:    "a lost delta: the target alone gives the change",
			active:  []ap{{u(1), "Executor"}},
			current: []member{m(1, RoleExecutor), m(2, RoleLawyer)},
			remove:  []member{m(2, RoleLawyer)},
		},
		{
			name:        "an unknown role is kept as it came",
			active:      []ap{{u(1), "executor"}, {u(2), "Notary"}},
			add:         []member{m(1, RoleExecutor), m(2, "Notary")},
			unknownRole: 1,
		},
		{
			name:   "roles are matched case-insensitively and stored in the spec's spelling",
			active: []ap{{u(1), "EXECUTOR"}, {u(2), "investorsecondary"}, {u(3), "coAgent"}},
			add:    []member{m(1, RoleExecutor), m(2, RoleInvestorSecondary), m(3, RoleCoAgent)},
		},
		{
			name:   "the same user twice with the same role is folded",
			active: []ap{{u(1), "Executor"}, {u(2), "CoAgent"}, {u(1), "executor"}},
			add:    []member{m(1, RoleExecutor), m(2, RoleCoAgent)},
		},
		{
			name:    "the same user twice with different roles is invalid",
			active:  []ap{{u(1), "Executor"}, {u(1), "CoAgent"}},
			invalid: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := validate(payload{LeadID: u(100), ActiveParticipants: tt.active, Participants: &tt.delta, Version: 1, ChangedAt: at})
			if tt.invalid {
				if !isCode(err, CodeInvalid) {
					t.Fatalf("err = %v, want %s", err, CodeInvalid.Name)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.UnknownChanges) != tt.unknownCT || len(s.UnknownRoles) != tt.unknownRole {
				t.Errorf("unknown change types %d, roles %d; want %d, %d", len(s.UnknownChanges), len(s.UnknownRoles), tt.unknownCT, tt.unknownRole)
			}
			d := reconcile(s.Target, tt.current)
			if !reflect.DeepEqual(d.Add, tt.add) || !reflect.DeepEqual(d.Remove, tt.remove) || !reflect.DeepEqual(d.Roles, tt.roles) {
				t.Errorf("diff = %+v, want add %v remove %v roles %v", d, tt.add, tt.remove, tt.roles)
			}
		})
	}
}
