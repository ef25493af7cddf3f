package chaos

import (
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/messenger"
)

// snap is a snapshot of lead 1 (or of lead, with leadOf) as message msg.
func snap(msg int, version int64, members ...member) *event {
	return &event{id: id(msg), route: messenger.KeyPrefix, note: "snapshot",
		body: participantsChanged{lead: id(1), version: version, target: members, at: at(msg)}}
}

func leadOf(e *event, lead int) *event {
	p := e.body.(participantsChanged)
	p.lead = id(lead)
	e.body = p
	return e
}

func m(user int, role string) member { return member{id(user), role} }

// oneChat: lead 1's chat (id 500) provisioned at the start, lead 2's late,
// lead 3's never.
var oneChat = map[uuid.UUID]messengerLead{id(1): {chat: id(500)}, id(2): {chat: id(501), when: late}, id(3): {chat: id(502), when: never}}

func factsOf(c *chatState) map[string]string {
	out := map[string]string{}
	for _, f := range c.facts {
		out[f.typ+" "+f.user.String()[24:]] = f.role + "/" + f.prev
	}
	return out
}

func TestMessengerModel(t *testing.T) {
	t.Run("reconciliation: joins, leaves, role changes and a member back", func(t *testing.T) {
		x := modelMessenger(inOrder([]*event{
			snap(1, 1, m(11, "Executor"), m(12, "InvestorPrimary")),
			snap(2, 2, m(11, "Executor"), m(13, "Lawyer")),
			snap(3, 3, m(11, "executor"), m(13, "CoAgent"), m(12, "Lawyer")),
		}), oneChat)
		c := x.chats[id(1)]
		want := map[string]string{
			"ParticipantJoined 000000000011": "Executor/", "ParticipantJoined 000000000012": "Lawyer/", // 12 joined twice: the last wins here
			"ParticipantLeft 000000000012": "InvestorPrimary/", "ParticipantJoined 000000000013": "Lawyer/",
			"ParticipantRoleChanged 000000000013": "CoAgent/Lawyer",
		}
		got := factsOf(c)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q, want %q", k, got[k], v)
			}
		}
		if len(c.facts) != 6 || len(c.updates) != 3 || c.version != 3 || c.applied != 3 {
			t.Fatalf("facts %d updates %d version %d applied %d", len(c.facts), len(c.updates), c.version, c.applied)
		}
		if c.updates[1] != newChatUpdate([]uuid.UUID{id(11), id(13)}, []uuid.UUID{id(12)}) {
			t.Fatalf("the second update: %+v", c.updates[1])
		}
		if mb := c.members[id(11)]; mb.role != "Executor" || !mb.active {
			t.Fatalf("a role in another case is the same role, stored in the spec's spelling: %+v", mb)
		}
	})
	t.Run("stale, duplicate and no-change snapshots", func(t *testing.T) {
		v2 := snap(2, 2, m(11, "Executor"), m(13, "Notary"))
		x := modelMessenger(inOrder([]*event{
			snap(1, 1, m(11, "Executor")),
			v2, snap(3, 1, m(11, "Executor"), m(14, "Lawyer")), v2,
			snap(4, 4, m(13, "Notary"), m(11, "Executor"), m(11, "Executor")),
		}), oneChat)
		c := x.chats[id(1)]
		if c.version != 4 || c.applied != 3 || len(c.facts) != 2 || len(c.updates) != 2 {
			t.Fatalf("version %d applied %d facts %d updates %d", c.version, c.applied, len(c.facts), len(c.updates))
		}
		if got := x.marks[snap(3, 0).markKey()].outcomes; len(got) != 1 || got[0] != outStale {
			t.Fatalf("an older Version: %v, want skipped-stale", got)
		}
		if got := x.marks[snap(4, 0).markKey()].outcomes; len(got) != 1 || got[0] != outSynced {
			t.Fatalf("a newer Version that changes nothing: %v, want synced", got)
		}
		if len(x.marks) != 4 {
			t.Fatalf("%d marks, want 4 (the copy of message 2 is a duplicate)", len(x.marks))
		}
		if c.members[id(13)].role != "Notary" {
			t.Fatalf("an unknown role is stored as it came: %+v", c.members[id(13)])
		}
	})
	t.Run("a chat never provisioned dead-letters every copy; a late one may apply in any order", func(t *testing.T) {
		n := expect(leadOf(snap(1, 1, m(11, "Executor")), 3), msgNotProvisioned)
		x := modelMessenger(inOrder([]*event{n, n, leadOf(snap(2, 1, m(11, "Executor")), 2), leadOf(snap(3, 2, m(12, "Executor")), 2)}), oneChat)
		if len(x.dlq) != 2 || len(x.disagree) != 0 {
			t.Fatalf("dlq %+v %v", x.dlq, x.disagree)
		}
		if got := x.marks[snap(2, 0).markKey()].outcomes; len(got) != 2 {
			t.Fatalf("a late chat's snapshot: %v, want synced or skipped-stale", got)
		}
		if len(x.lateMsgs[id(2)]) != 2 {
			t.Fatalf("late messages %v", x.lateMsgs)
		}
	})
}

// dbOf is the database state the model's chat would leave.
func dbOf(c *chatState) *chatState {
	d := newChatState()
	d.version, d.applied = c.version, c.applied
	for u, mb := range c.members {
		cp := *mb
		d.members[u] = &cp
	}
	d.facts = append(d.facts, c.facts...)
	d.updates = append(d.updates, c.updates...)
	return d
}

func TestMessengerCompare(t *testing.T) {
	evs := []*event{
		snap(1, 1, m(11, "Executor"), m(12, "InvestorPrimary")),
		snap(2, 2, m(11, "Executor")),
		leadOf(snap(3, 1, m(21, "Executor")), 2),
		leadOf(snap(4, 3, m(21, "Executor"), m(22, "Lawyer")), 2),
		leadOf(snap(5, 2, m(21, "Executor"), m(23, "Lawyer")), 2),
	}
	x := modelMessenger(inOrder(evs), oneChat)
	chatLead := map[uuid.UUID]uuid.UUID{id(500): id(1), id(501): id(2)}
	// The late chat, as the run left it: v1, then v3 (v2 waited and came
	// after v3: stale).
	lateChat := newChatState()
	lateChat.apply(id(3), evs[2].body.(participantsChanged))
	lateChat.apply(id(4), evs[3].body.(participantsChanged))
	marks := map[string]string{evs[2].markKey(): outSynced, evs[3].markKey(): outSynced, evs[4].markKey(): outStale}

	t.Run("as the model says, the late chat in another order: nothing off", func(t *testing.T) {
		var tl Tally
		x.compare(&tl, map[uuid.UUID]*chatState{id(500): dbOf(x.chats[id(1)]), id(501): dbOf(lateChat)}, chatLead, marks)
		if !tl.OK() {
			t.Fatal(tl.Notes())
		}
	})
	t.Run("a fact lost, facts twice, a chat_updates row twice", func(t *testing.T) {
		d := dbOf(x.chats[id(1)])
		d.facts = d.facts[1:]                              // lost
		d.facts = append(d.facts, d.facts[len(d.facts)-1]) // doubled
		d.updates = append(d.updates, d.updates[0])        // doubled
		late := dbOf(lateChat)
		late.facts = append(late.facts, late.facts[0]) // doubled
		var tl Tally
		x.compare(&tl, map[uuid.UUID]*chatState{id(500): d, id(501): late}, chatLead, marks)
		if tl.lost != 1 || tl.doubled != 3 || tl.wrong != 0 {
			t.Fatalf("lost %d doubled %d wrong %d: %v", tl.lost, tl.doubled, tl.wrong, tl.Notes())
		}
	})
	t.Run("the late chat stuck at an older snapshot", func(t *testing.T) {
		late := newChatState()
		late.apply(id(3), evs[2].body.(participantsChanged))
		var tl Tally
		x.compare(&tl, map[uuid.UUID]*chatState{id(500): dbOf(x.chats[id(1)]), id(501): late}, chatLead, marks)
		if tl.lost == 0 {
			t.Fatalf("want lost: %v", tl.Notes())
		}
	})
}
