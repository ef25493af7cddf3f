package messenger

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// The fuzz targets of this package; their seed corpora are under
// testdata/fuzz/<name> (plain `go test` runs them), `make fuzz` fuzzes each.

// FuzzDecodeMessenger: decode (DecodePayload and validate, as the handler
// runs them) does not panic on any Payload; a refusal carries
// MSG_LEAD_PARTICIPANTS_INVALID and no other code (or, for a value whose
// envelope cannot be read, EVENT_ENVELOPE_INVALID); an accepted snapshot
// is storable — LeadId and every UserId non-nil, Version ≥ 1, ChangedAt set
// and not beyond MAX_CLOCK_SKEW, 1 to MaxParticipants members, one per
// user, sorted, roles non-blank, at most 32 bytes, valid UTF-8 without NUL,
// a known role in the spec's spelling — and, written back as a payload,
// decodes to the same snapshot.
func FuzzDecodeMessenger(f *testing.F) {
	svc := New(prometheus.NewRegistry())
	f.Fuzz(func(t *testing.T, payload []byte) {
		m, err := servicetest.PayloadMessage(svc, EventType, "Lead", payload)
		if err != nil {
			servicetest.RequireOneCode(t, err, consumer.EnvelopeInvalid)
			return
		}
		s, err := decode(m)
		if err != nil {
			servicetest.RequireOneCode(t, err, CodeInvalid)
			return
		}
		checkSnapshot(t, s)
		again := encodeSnapshot(t, s)
		m2, err := servicetest.PayloadMessage(svc, EventType, "Lead", again)
		if err != nil {
			t.Fatalf("the snapshot written back is not a readable envelope: %v\n%s", err, again)
		}
		s2, err := decode(m2)
		if err != nil {
			t.Fatalf("the snapshot written back is refused: %v\nfirst: %q\nagain: %s", err, payload, again)
		}
		if s2.LeadID != s.LeadID || s2.Version != s.Version || !s2.ChangedAt.Equal(s.ChangedAt) || s2.Folded != 0 ||
			!slices.Equal(s2.Target, s.Target) || !slices.Equal(s2.UnknownRoles, s.UnknownRoles) ||
			!slices.EqualFunc(s2.Delta, s.Delta, sameChange) || !slices.EqualFunc(s2.UnknownChanges, s.UnknownChanges, sameChange) {
			t.Fatalf("the snapshot written back decodes to another one:\nfirst %+v\nagain %+v", s, s2)
		}
	})
}

func checkSnapshot(t *testing.T, s snapshot) {
	t.Helper()
	if s.LeadID == uuid.Nil || s.Version < 1 || s.ChangedAt.IsZero() {
		t.Fatalf("accepted LeadId %s, Version %d, ChangedAt %s", s.LeadID, s.Version, s.ChangedAt)
	}
	if s.ChangedAt.After(time.Now().Add(servicetest.MaxSkew)) {
		t.Fatalf("accepted ChangedAt %s, beyond MAX_CLOCK_SKEW", s.ChangedAt)
	}
	if _, err := s.ChangedAt.MarshalJSON(); err != nil {
		t.Fatalf("accepted ChangedAt %s out of range: %v", s.ChangedAt, err)
	}
	if n := len(s.Target); n < 1 || n > MaxParticipants {
		t.Fatalf("accepted %d members", n)
	}
	if n := len(s.Delta) + len(s.UnknownChanges); n > MaxParticipants {
		t.Fatalf("accepted %d changes", n)
	}
	unknown := 0
	for i, mb := range s.Target {
		if mb.UserID == uuid.Nil {
			t.Fatalf("member %d has the nil UserId", i)
		}
		if i > 0 && strings.Compare(s.Target[i-1].UserID.String(), mb.UserID.String()) >= 0 {
			t.Fatalf("members not sorted by UserId, or a user twice: %v", s.Target)
		}
		checkRole(t, mb.Role)
		if c, known := canonicalRole(mb.Role); known {
			if c != mb.Role {
				t.Fatalf("known role %q not in the spec's spelling %q", mb.Role, c)
			}
		} else {
			if !slices.Contains(s.UnknownRoles, mb) {
				t.Fatalf("unknown role %q of %s not reported", mb.Role, mb.UserID)
			}
			unknown++
		}
	}
	if unknown != len(s.UnknownRoles) {
		t.Fatalf("%d unknown roles reported, %d in the target", len(s.UnknownRoles), unknown)
	}
	for _, c := range s.Delta {
		if c.UserID == uuid.Nil || !slices.Contains(knownChangeTypes, c.ChangeType) {
			t.Fatalf("delta entry %+v: nil UserId or a ChangeType not in the spec's spelling", c)
		}
	}
	for _, c := range s.UnknownChanges {
		if _, known := canonical(c.ChangeType, knownChangeTypes); c.UserID == uuid.Nil || known {
			t.Fatalf("unknown change %+v: nil UserId or a known ChangeType", c)
		}
	}
	// The facts of a chat that had no members: every role goes into
	// chat_events.role (varchar(32), NOT NULL, non-empty).
	for _, fc := range reconcile(s.Target, nil).facts() {
		checkRole(t, fc.Role)
	}
}

// checkRole asserts a role a row can hold: chat_participants.role and
// chat_events.role are non-empty varchar(32) text (32 characters).
func checkRole(t *testing.T, role string) {
	t.Helper()
	if strings.TrimSpace(role) == "" || utf8.RuneCountInString(role) > maxRoleLen || !utf8.ValidString(role) || strings.ContainsRune(role, 0) {
		t.Fatalf("role %q: blank, longer than %d characters, not UTF-8 or with a NUL", role, maxRoleLen)
	}
}

func sameChange(a, b participantChange) bool {
	return a.UserID == b.UserID && a.ChangeType == b.ChangeType && a.Role == b.Role &&
		(a.PreviousRole == nil) == (b.PreviousRole == nil) && (a.PreviousRole == nil || *a.PreviousRole == *b.PreviousRole)
}

// encodeSnapshot writes a snapshot back as a payload of the contract.
func encodeSnapshot(t *testing.T, s snapshot) []byte {
	t.Helper()
	delta := append(append([]participantChange{}, s.Delta...), s.UnknownChanges...)
	p := payload{LeadID: s.LeadID, Version: s.Version, ChangedAt: s.ChangedAt, Participants: &delta}
	for _, mb := range s.Target {
		p.ActiveParticipants = append(p.ActiveParticipants, participantSnapshot(mb))
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("encode %+v: %v", p, err)
	}
	return b
}

// FuzzReconcile: for any chat's active members (one row per user, roles as
// stored) and any valid target set (built by validate from
// ActiveParticipants), reconcile does not panic; its diff is consistent
// with the members (a removed or re-roled member is active with the role
// the diff names, an added one is not), touches each user at most once,
// is sorted; applying it yields exactly the target's users with the
// target's roles (equal case-insensitively, the comparison of every enum
// value; a written role in the target's spelling); the diff is empty
// exactly when the members already match; and reconciling the result again
// changes nothing. Each input byte pair is a member: a user of 16 and a
// role from a pool of known, differently cased and unknown roles, and
// extra.
func FuzzReconcile(f *testing.F) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, currentBytes, targetBytes []byte, extra string) {
		pool := []string{RoleExecutor, "executor", "EXECUTOR", RoleResponsible, RoleCoAgent, "coagent", RoleAssistant,
			RoleLawyer, RoleInvestorPrimary, "investorPrimary", RoleInvestorSecondary, "Notary", "NOTARY", extra}
		members := func(b []byte) []member {
			var out []member
			seen := map[uuid.UUID]bool{}
			for i := 0; i+1 < len(b); i += 2 {
				mb := member{UserID: u(int(b[i]%16) + 1), Role: pool[int(b[i+1])%len(pool)]}
				if !seen[mb.UserID] { // one row per chat and user (ux_chat_participants_chat_user)
					seen[mb.UserID] = true
					out = append(out, mb)
				}
			}
			return out
		}
		current := members(currentBytes)
		var active []participantSnapshot
		for _, mb := range members(targetBytes) {
			active = append(active, participantSnapshot(mb))
		}
		s, err := validate(payload{LeadID: u(100), ActiveParticipants: active, Version: 1, ChangedAt: at})
		if err != nil {
			servicetest.RequireOneCode(t, err, CodeInvalid)
			return
		}

		d := reconcile(s.Target, current)
		checkDiff(t, d)
		got := applyDiff(t, current, d)
		if len(got) != len(s.Target) {
			t.Fatalf("applied: %d members, target %d\ncurrent %v\ntarget %v\ndiff %+v", len(got), len(s.Target), current, s.Target, d)
		}
		written := map[uuid.UUID]bool{}
		for _, a := range d.Add {
			written[a.UserID] = true
		}
		for _, r := range d.Roles {
			written[r.UserID] = true
		}
		for _, tm := range s.Target {
			role, ok := got[tm.UserID]
			if !ok || !sameRole(role, tm.Role) || (written[tm.UserID] && role != tm.Role) {
				t.Fatalf("applied: %s has role %q (member %v), target %q\ncurrent %v\ndiff %+v", tm.UserID, role, ok, tm.Role, current, d)
			}
		}
		matched := len(current) == len(s.Target)
		for _, c := range current {
			i := slices.IndexFunc(s.Target, func(tm member) bool { return tm.UserID == c.UserID })
			matched = matched && i >= 0 && sameRole(c.Role, s.Target[i].Role)
		}
		if d.empty() != matched {
			t.Fatalf("diff empty %v, members already match %v\ncurrent %v\ntarget %v", d.empty(), matched, current, s.Target)
		}
		var after []member
		for id, role := range got {
			after = append(after, member{UserID: id, Role: role})
		}
		if again := reconcile(s.Target, after); !again.empty() {
			t.Fatalf("not idempotent: after applying %+v, reconcile gives %+v", d, again)
		}
	})
}

// checkDiff asserts a diff's shape: sorted, each user once, a role change
// a change, one fact per change in the feed's order.
func checkDiff(t *testing.T, d diff) {
	t.Helper()
	seen := map[uuid.UUID]bool{}
	var ids []uuid.UUID
	sorted := func(ids []uuid.UUID) bool {
		return slices.IsSortedFunc(ids, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	}
	for _, part := range [][]uuid.UUID{userIDs(d.Add), userIDs(d.Remove)} {
		if !sorted(part) {
			t.Fatalf("diff not sorted: %+v", d)
		}
		ids = append(ids, part...)
	}
	var roled []uuid.UUID
	for _, r := range d.Roles {
		roled = append(roled, r.UserID)
		if sameRole(r.From, r.To) {
			t.Fatalf("role change %+v changes nothing", r)
		}
	}
	if !sorted(roled) {
		t.Fatalf("role changes not sorted: %+v", d.Roles)
	}
	for _, id := range append(ids, roled...) {
		if seen[id] {
			t.Fatalf("user %s twice in %+v", id, d)
		}
		seen[id] = true
	}
	facts := d.facts()
	if len(facts) != len(d.Add)+len(d.Remove)+len(d.Roles) {
		t.Fatalf("%d facts for %+v", len(facts), d)
	}
	order := map[string]int{EventParticipantLeft: 0, EventParticipantRoleChanged: 1, EventParticipantJoined: 2}
	if !slices.IsSortedFunc(facts, func(a, b fact) int { return order[a.Type] - order[b.Type] }) {
		t.Fatalf("facts out of order: %+v", facts)
	}
	for _, fc := range facts {
		if (fc.Type == EventParticipantRoleChanged) != (fc.PreviousRole != nil) { // ck_chat_events_previous_role
			t.Fatalf("fact %+v: previous_role set exactly for role changes", fc)
		}
	}
}

// applyDiff applies a diff to the members as the handler writes it, and
// fails when the diff does not fit them.
func applyDiff(t *testing.T, current []member, d diff) map[uuid.UUID]string {
	t.Helper()
	got := make(map[uuid.UUID]string, len(current))
	for _, c := range current {
		got[c.UserID] = c.Role
	}
	for _, r := range d.Remove {
		if role, ok := got[r.UserID]; !ok || role != r.Role {
			t.Fatalf("removes %v, which is not an active member with that role (%q, %v)", r, role, ok)
		}
		delete(got, r.UserID)
	}
	for _, r := range d.Roles {
		if role, ok := got[r.UserID]; !ok || role != r.From {
			t.Fatalf("re-roles %+v, which is not an active member with role From (%q, %v)", r, role, ok)
		}
		got[r.UserID] = r.To
	}
	for _, a := range d.Add {
		if _, ok := got[a.UserID]; ok {
			t.Fatalf("adds %v, an active member", a)
		}
		got[a.UserID] = a.Role
	}
	return got
}
