package messenger

import (
	"bytes"
	"slices"

	"github.com/google/uuid"
)

// member is one active member of a chat, or of a lead's target set.
type member struct {
	UserID uuid.UUID
	Role   string
}

// roleChange is a member whose role moves From → To.
type roleChange struct {
	UserID   uuid.UUID
	From, To string
}

// diff is what it takes to turn a chat's active members into a target set.
// Every slice is sorted by UserID.
type diff struct {
	Add    []member     // in the target, not active in the chat: with the target role
	Remove []member     // active in the chat, not in the target: with the role they had
	Roles  []roleChange // in both, with another role
}

// empty reports a diff that changes nothing.
func (d diff) empty() bool { return len(d.Add) == 0 && len(d.Remove) == 0 && len(d.Roles) == 0 }

// reconcile is the set reconciliation of the spec (step 5): target is the
// lead's ActiveParticipants (folded, one entry per user), current the chat's
// active members. ActiveParticipants is the only authority: the delta of the
// event plays no part here, so a lost or reordered delta cannot change the
// outcome. Roles are compared case-insensitively, like every enum value.
func reconcile(target, current []member) diff {
	have := make(map[uuid.UUID]string, len(current))
	for _, m := range current {
		have[m.UserID] = m.Role
	}
	want := make(map[uuid.UUID]bool, len(target))
	var d diff
	for _, t := range target {
		want[t.UserID] = true
		role, ok := have[t.UserID]
		switch {
		case !ok:
			d.Add = append(d.Add, t)
		case !sameRole(role, t.Role):
			d.Roles = append(d.Roles, roleChange{UserID: t.UserID, From: role, To: t.Role})
		}
	}
	for _, m := range current {
		if !want[m.UserID] {
			d.Remove = append(d.Remove, m)
		}
	}
	sortMembers(d.Add)
	sortMembers(d.Remove)
	slices.SortFunc(d.Roles, func(a, b roleChange) int { return bytes.Compare(a.UserID[:], b.UserID[:]) })
	return d
}

func sortMembers(ms []member) {
	slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(a.UserID[:], b.UserID[:]) })
}

// Types of the feed facts (chat_events.type, MSG-6).
const (
	EventParticipantJoined      = "ParticipantJoined"
	EventParticipantLeft        = "ParticipantLeft"
	EventParticipantRoleChanged = "ParticipantRoleChanged"
)

// fact is one membership fact of the chat's system feed.
type fact struct {
	Type         string
	UserID       uuid.UUID
	Role         string  // the role after the change; for ParticipantLeft the role they had
	PreviousRole *string // set only for ParticipantRoleChanged
}

// facts are the feed facts of a diff, one per change: who left first, then
// role changes, then who joined, so that a hand-over reads in its natural
// order. They come from the diff, not from the delta: the feed never states
// a change that did not happen (a replayed or stale delta), and a change
// whose delta was lost still gets its fact.
func (d diff) facts() []fact {
	out := make([]fact, 0, len(d.Add)+len(d.Remove)+len(d.Roles))
	for _, m := range d.Remove {
		out = append(out, fact{Type: EventParticipantLeft, UserID: m.UserID, Role: m.Role})
	}
	for _, r := range d.Roles {
		prev := r.From
		out = append(out, fact{Type: EventParticipantRoleChanged, UserID: r.UserID, Role: r.To, PreviousRole: &prev})
	}
	for _, m := range d.Add {
		out = append(out, fact{Type: EventParticipantJoined, UserID: m.UserID, Role: m.Role})
	}
	return out
}

// userIDs returns the members' user ids, in their order.
func userIDs(ms []member) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.UserID
	}
	return out
}
