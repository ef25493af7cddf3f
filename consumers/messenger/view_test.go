package messenger

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
)

// read always returns a view, an empty one when no message decodes.
func TestReadAlwaysHasAView(t *testing.T) {
	t.Parallel()
	bad := &consumer.Message{Envelope: consumer.Envelope{MessageID: uuid.New(), EventType: EventType,
		ContractVersion: 1, Payload: json.RawMessage(`{"LeadId": 7}`)}, Topic: Topic}
	v, err := read(context.Background(), nil, []*consumer.Message{bad})
	if err != nil || v == nil || len(v.chats) != 0 {
		t.Fatalf("read of an undecodable message: %+v, %v; want an empty view", v, err)
	}
}

// read takes a chat's active member rows and the removed rows of users
// that a snapshot of the transaction lists (an add brings the row back,
// MSG-4), and leaves the other removed rows out: they accumulate over a
// chat's life and no diff needs them.
func TestReadTakesActiveRowsAndTheRemovedRowsSnapshotsList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	ctx := context.Background()
	lead, otherLead := uuid.New(), uuid.New()
	chatID, otherChat := e.provision(lead), e.provision(otherLead)
	active, gone, back, elsewhere := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	for _, r := range []struct {
		chat, user uuid.UUID
		removed    bool
	}{{chatID, active, false}, {chatID, gone, true}, {chatID, back, true}, {otherChat, elsewhere, true}, {otherChat, active, false}} {
		e.Exec(`INSERT INTO chat_participants (id, chat_id, user_id, role, removed_at) VALUES ($1, $2, $3, 'Executor', CASE WHEN $4 THEN now() END)`,
			uuid.New(), r.chat, r.user, r.removed)
	}
	msg := func(x ev) *consumer.Message {
		return &consumer.Message{Envelope: consumer.Envelope{MessageID: x.ID, EventType: EventType, ContractVersion: 1,
			Payload: must(json.Marshal(x.payload()))}, Topic: Topic}
	}
	// back is listed by the other lead's snapshot: a user one snapshot
	// lists is read in every chat of the transaction.
	msgs := []*consumer.Message{
		msg(newEv(lead, 1, member{active, RoleExecutor})),
		msg(newEv(otherLead, 1, member{active, RoleExecutor}, member{back, RoleLawyer})),
	}
	tx, err := e.Client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	v, err := read(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	users := func(chat uuid.UUID) []uuid.UUID {
		var out []uuid.UUID
		for _, r := range v.members[chat] {
			out = append(out, r.UserID)
		}
		return out
	}
	if got := users(chatID); !sameIDs(got, []uuid.UUID{active, back}) {
		t.Fatalf("the chat's rows read: %v, want the active %v and the listed removed %v (not %v)", got, active, back, gone)
	}
	if got := users(otherChat); !sameIDs(got, []uuid.UUID{active}) {
		t.Fatalf("the other chat's rows read: %v, want the active %v only (not the unlisted removed %v)", got, active, elsewhere)
	}
}
