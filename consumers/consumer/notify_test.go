package consumer_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/consumers/consumers/consumer/consumertest"
	"github.com/pin-platform/consumers/consumers/kafkatest"
)

// listenProbe opens a LISTEN probe_events session.
func (e *env) listenProbe() *pq.Listener {
	e.t.Helper()
	l := pq.NewListener(e.url, 10*time.Millisecond, time.Second, nil)
	e.t.Cleanup(func() { _ = l.Close() })
	if err := l.Listen(probeChannel); err != nil { // returns once LISTEN ran
		e.t.Fatalf("LISTEN %s: %v", probeChannel, err)
	}
	return l
}

// notificationsUntilEnd sends a notification "end" from a session of its
// own, then returns every payload received before it, with each payload's
// count at the moment it arrived of marks committed for it (one if its
// message was committed by then). Notifications are delivered in commit
// order, so everything that was sent before the "end" arrives before it:
// stop the consumer first, which sends what its committed messages queued.
func (e *env) notificationsUntilEnd(l *pq.Listener) (payloads []string, marked map[string]int) {
	e.t.Helper()
	if _, err := e.db.Exec(`SELECT pg_notify($1, 'end')`, probeChannel); err != nil {
		e.t.Fatal(err)
	}
	marked = map[string]int{}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case n := <-l.Notify:
			if n == nil {
				e.t.Fatal("the listener reconnected: notifications may have been missed")
			}
			if n.Extra == "end" {
				return payloads, marked
			}
			payloads = append(payloads, n.Extra)
			if _, err := uuid.Parse(n.Extra); err == nil {
				marked[n.Extra] = e.count(`SELECT count(*) FROM processed_messages WHERE idempotency_key = $1`, "probe:"+n.Extra)
			}
		case <-deadline:
			e.t.Fatalf("no %q notification within 20 s; got %q", "end", payloads)
		}
	}
}

// A notification queued with NotifyAfterCommit is sent once its message's
// transaction committed — in a batch, on its own, from the parked-message
// re-driver — and never for an attempt that rolled back: the batch that a
// failing message rolled back, the failing message's own attempts.
func TestNotificationsAreSentForCommittedAttemptsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.listenProbe()
	leadID, missing := e.lead(), uuid.New()
	ok1, v1 := envelope(leadID, "")
	conflict, v2 := envelope(leadID, "conflict") // rolls its batch back, then fails 3 more times: DLQ
	ok2, v3 := envelope(leadID, "")
	for _, v := range [][]byte{v1, v2, v3} {
		e.produce(1, v) // one partition: one batch
	}
	parked, v4 := envelope(missing, "") // parked until its lead exists
	e.produce(2, v4)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(4)
	e.insertLead(missing)
	kafkatest.Eventually(t, 20*time.Second, func() bool { return e.events(missing) == 1 }, "the parked message to apply")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	got, marked := e.notificationsUntilEnd(l)
	want := map[string]bool{ok1.String(): true, ok2.String(): true, parked.String(): true}
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
		if !want[p] {
			t.Errorf("notification %q: not a committed message's (the conflict is %s)", p, conflict)
		}
	}
	for p := range want {
		if seen[p] != 1 {
			t.Errorf("%s notified %d times, want once", p, seen[p])
		}
		if marked[p] != 1 {
			t.Errorf("%s: its mark was not committed when its notification arrived", p)
		}
	}
}

// A notification that cannot be sent after the commit (here a payload
// longer than PostgreSQL's 8000 bytes) is counted and logged; its message
// stays committed and its offset moves on, and other runs' notifications
// are sent.
func TestANotificationThatCannotBeSentIsCountedAndItsMessageStaysCommitted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.listenProbe()
	loudLead, quietLead := e.lead(), e.lead()
	_, loud := envelope(loudLead, "loud")
	quiet, v := envelope(quietLead, "")
	e.produce(0, loud)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(1)
	e.produce(1, v) // after the loud one's run: a statement of its own
	e.waitCommitted(2)

	if got := e.events(loudLead); got != 1 {
		t.Fatalf("the loud message's lead has %d events, want 1: a failed notification must not undo its commit", got)
	}
	if err := r.Stop(); err != nil { // the notifications are sent by then
		t.Fatal(err)
	}
	if got := r.Counter("pin_consumer_notifications_lost_total", map[string]string{"service": "probe"}); got != 1 {
		t.Fatalf("pin_consumer_notifications_lost_total = %v, want 1", got)
	}
	got, _ := e.notificationsUntilEnd(l)
	if len(got) != 1 || got[0] != quiet.String() {
		t.Fatalf("notifications %q, want only the quiet message's %s", abbreviated(got), quiet)
	}
}

func abbreviated(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if len(p) > 40 {
			p = p[:40] + "…"
		}
		out[i] = p
	}
	return out
}
