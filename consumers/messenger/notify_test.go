package messenger

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// listen opens a LISTEN chat_updates session on url.
func listen(t *testing.T, url string) *pq.Listener {
	t.Helper()
	l := pq.NewListener(url, 10*time.Millisecond, time.Second, nil)
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Listen("chat_updates"); err != nil { // returns once LISTEN ran
		t.Fatalf("LISTEN chat_updates: %v", err)
	}
	return l
}

// nextNotification waits for the next chat_updates notification and
// returns its payload.
func nextNotification(t *testing.T, l *pq.Listener) string {
	t.Helper()
	deadline := time.After(servicetest.Wait)
	for {
		select {
		case n := <-l.Notify:
			if n == nil { // the listener reconnected; nothing was lost for committed rows
				continue
			}
			if n.Channel != "chat_updates" {
				t.Fatalf("notification on %q", n.Channel)
			}
			return n.Extra
		case <-deadline:
			t.Fatalf("no chat_updates notification within %s", servicetest.Wait)
		}
	}
}

// Persist-then-push: the notification carries the chat_updates id, comes
// after the commit (row, membership and idempotency mark are visible when it
// arrives), and a change that rolls back notifies nobody.
func TestChatUpdatesNotificationAfterCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	l := listen(t, e.URL)

	lead, a, b := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)
	v1 := newEv(lead, 1, member{a, RoleExecutor}, member{b, RoleInvestorPrimary})
	e.produce(v1)
	id := nextNotification(t, l)
	// No polling: everything the notification announces is committed.
	if got := e.outcome(v1.ID); got != string(Synced) {
		t.Fatalf("at notification time the mark is %q, want synced", got)
	}
	ps := e.pushes(chatID)
	if len(ps) != 1 || ps[0].ID.String() != id || !sameIDs(ps[0].Recipients, []uuid.UUID{a, b}) {
		t.Fatalf("notification %q, chat_updates %+v", id, ps)
	}
	checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{b, RoleInvestorPrimary})

	// A newer snapshot without a change writes no chat_updates row and
	// sends nothing; the next notification is the next real change's.
	v2 := newEv(lead, 2, member{b, RoleInvestorPrimary}, member{a, RoleExecutor})
	v3 := newEv(lead, 3, member{a, RoleExecutor})
	e.produce(v2, v3)
	id = nextNotification(t, l)
	ps = e.pushes(chatID)
	if len(ps) != 2 || ps[1].ID.String() != id || !sameIDs(ps[1].Revoked, []uuid.UUID{b}) {
		t.Fatalf("notification %q, chat_updates %+v: want v3's row revoking b", id, ps)
	}
	if got := e.outcome(v2.ID); got != string(Synced) {
		t.Fatalf("v2 outcome %q", got)
	}

	t.Run("a rolled-back change notifies nobody", func(t *testing.T) {
		h := &handler{m: newMetrics(nil)}
		ctx := context.Background()
		lost, kept := uuid.New(), uuid.New()
		lostChat, keptChat := e.provision(lost), e.provision(kept)

		tx, err := e.Client.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		x := newEv(lost, 1, member{a, RoleExecutor})
		m := &consumer.Message{Envelope: consumer.Envelope{MessageID: x.ID, EventType: EventType, ContractVersion: 1,
			Payload: must(jsonRaw(x.payload()))}}
		if out, err := handleInTx(ctx, tx, h, m); err != nil || out != Synced { // the writer queued the notification
			t.Fatalf("handle: %v, %v", out, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := applyDirect(ctx, e.Client, h, newEv(kept, 1, member{b, RoleExecutor})); err != nil {
			t.Fatal(err)
		}
		id := nextNotification(t, l)
		if ps := e.pushes(keptChat); len(ps) != 1 || ps[0].ID.String() != id {
			t.Fatalf("first notification after the rollback is %q, want the committed change's %+v", id, ps)
		}
		if ps := e.pushes(lostChat); len(ps) != 0 {
			t.Fatalf("rolled-back chat_updates rows: %+v", ps)
		}
	})
}
