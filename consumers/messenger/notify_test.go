package messenger

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/consumers/consumers/consumer/consumertest"
	"github.com/pin-platform/consumers/consumers/kafkatest"
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
	deadline := time.After(wait)
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
			t.Fatalf("no chat_updates notification within %s", wait)
		}
	}
}

// Persist-then-push: the notification carries the chat_updates id, comes
// after the commit (row, membership and idempotency mark are visible when it
// arrives), and a change that rolls back notifies nobody.
func TestChatUpdatesNotificationAfterCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	l := listen(t, e.url)

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
	checkActive(t, e.db, chatID, member{a, RoleExecutor}, member{b, RoleInvestorPrimary})

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

	// The handler's own path (a message on its own: a replay, or the
	// re-driver of parked messages) notifies after its commit too. A
	// change that rolls back notifies nobody: the runtime drops what its
	// attempt queued (consumer's TestNotificationsAreSentForCommittedAttemptsOnly).
	t.Run("a change re-driven after waiting for its chat notifies once", func(t *testing.T) {
		waiting := uuid.New()
		x := newEv(waiting, 1, member{a, RoleExecutor})
		e.produce(x)
		kafkatest.Eventually(t, wait, func() bool {
			return e.count(`SELECT count(*) FROM parked_messages WHERE message_id = $1`, x.ID) == 1
		}, "message %s was not parked", x.ID)
		waitingChat := e.provision(waiting)
		id := nextNotification(t, l)
		if got := e.outcome(x.ID); got != string(Synced) {
			t.Fatalf("at notification time the re-driven message's mark is %q, want synced", got)
		}
		if ps := e.pushes(waitingChat); len(ps) != 1 || ps[0].ID.String() != id {
			t.Fatalf("notification %q, chat_updates %+v", id, ps)
		}
		// Nothing else was notified: an "end" sent now is the next one.
		if _, err := e.db.Exec(`SELECT pg_notify($1, 'end')`, NotifyChannel); err != nil {
			t.Fatal(err)
		}
		if id := nextNotification(t, l); id != "end" {
			t.Fatalf("notification %q after the re-driven change's, want none", id)
		}
	})
}
