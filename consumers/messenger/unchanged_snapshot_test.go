package messenger

import (
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
)

// A newer Version that changes no membership only moves
// lead_member_version: no feed rows, no chat_updates row.
func TestNewerVersionWithoutChangeOnlyMovesVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a, b := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)

	v1 := newEv(lead, 1, member{a, RoleExecutor}, member{b, RoleLawyer})
	// Same set, other order, other spelling, a delta that claims changes.
	v7 := newEv(lead, 7, member{b, "lawyer"}, member{a, "EXECUTOR"}).
		with(change{User: b, Type: ChangeRoleChanged, Role: RoleLawyer, PreviousRole: RoleAssistant})
	tps := e.produce(v1, v7)
	e.awaitOutcome(v7.ID, Synced)
	e.awaitCommitted(tps...)

	if s := e.chat(chatID); s.LeadMemberVersion.Int64 != 7 || s.RowVersion != 2 {
		t.Fatalf("chat %+v, want lead_member_version 7, row_version 2", s)
	}
	checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{b, RoleLawyer})
	if n := len(e.eventsOfMessage(chatID, v7.ID)); n != 0 {
		t.Fatalf("%d facts for a snapshot that changes nothing", n)
	}
	if n := len(e.pushes(chatID)); n != 1 {
		t.Fatalf("%d chat_updates rows, want v1's only", n)
	}
}
