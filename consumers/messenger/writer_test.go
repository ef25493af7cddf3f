package messenger

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
)

// A transaction's writes take two round trips whatever they hold: the
// marks and the chats' claim, then one statement for the member rows, the
// feed facts, the chat_updates rows and their notifications (rowsSQL).
// Far from its database a transaction waits for each statement; with one
// per kind messenger's writes took five. The rows of two chats, each with
// a new member, and the marks all land.
func TestATransactionsWritesTakeTwoStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	ctx := context.Background()

	client, sent := consumertest.NewStatementsClient(e.DB)

	leads := []uuid.UUID{uuid.New(), uuid.New()}
	users := []uuid.UUID{uuid.New(), uuid.New()}
	chats := []uuid.UUID{e.provision(leads[0]), e.provision(leads[1])}
	h := &handler{m: newMetrics(nil)}
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // after the commit: a no-op
	var msgs []*consumer.Message
	for i, lead := range leads {
		x := newEv(lead, 1, member{users[i], RoleExecutor})
		msgs = append(msgs, &consumer.Message{Envelope: consumer.Envelope{MessageID: x.ID, EventType: EventType,
			ContractVersion: 1, Payload: must(jsonRaw(x.payload()))}, Topic: Topic})
	}
	v, err := read(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if out, err := h.handle(ctx, v, m); err != nil || out != Synced {
			t.Fatalf("handle: %v, %v", out, err)
		}
	}
	marks := consumer.NewMarks(Group, Topic)
	for i, m := range msgs {
		marks.Add(KeyPrefix+m.MessageID.String(), 0, int64(i), Synced)
	}
	sent.Start()
	if err := write(ctx, tx, v, marks); err != nil {
		t.Fatal(err)
	}
	got := sent.Stop()
	if len(got) != 2 || !strings.Contains(got[0], "pin_marks") {
		t.Fatalf("the writes took %d statements, want 2 (the marks and the claim, the rows):\n%s", len(got), strings.Join(got, "\n"))
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, chat := range chats {
		checkActive(t, e.DB, chat, member{users[i], RoleExecutor})
		if evs := e.events(chat); len(evs) != 1 {
			t.Fatalf("chat %d: %d feed facts, want 1: %+v", i, len(evs), evs)
		}
		if ps := e.pushes(chat); len(ps) != 1 {
			t.Fatalf("chat %d: %d chat_updates rows, want 1: %+v", i, len(ps), ps)
		}
		if c := e.chat(chat); c.RowVersion != 1 || c.LeadMemberVersion.Int64 != 1 {
			t.Fatalf("chat %d after the claim: %+v, want row_version 1, lead_member_version 1", i, c)
		}
		if got := e.outcome(msgs[i].MessageID); got != string(Synced) {
			t.Fatalf("message %d: mark %q, want %q", i, got, Synced)
		}
	}
}
