package consumer

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/lib/pq"
	"github.com/rs/zerolog"
)

// notifyTimeout bounds the statement that sends committed messages'
// notifications.
const notifyTimeout = 5 * time.Second

// notifyQueue is how many committed runs' notifications may wait for the
// sender before a worker that hands over more waits for it.
const notifyQueue = 256

// notifySQL sends notifications in their order: unnest WITH ORDINALITY
// yields the rows, and calls pg_notify, in array order.
const notifySQL = `SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(c, p, n) ORDER BY n`

// notifier sends the notifications of committed messages
// (NotifyAfterCommit) from a goroutine of its own: a worker hands its run's
// over after the commit and goes on, and the sender sends whatever has
// accumulated meanwhile — several runs' at a busy time — with one statement
// outside any transaction, in the order they were handed over.
type notifier struct {
	db  *sql.DB
	m   *metrics
	log *zerolog.Logger

	mu     sync.RWMutex // held for reading while handing over; close takes it
	closed bool
	queue  chan []notification
	done   chan struct{} // closed when the sender has sent everything and quit
}

func startNotifier(db *sql.DB, m *metrics, log *zerolog.Logger) *notifier {
	n := &notifier{db: db, m: m, log: log, queue: make(chan []notification, notifyQueue), done: make(chan struct{})}
	go n.run()
	return n
}

// add hands ns over to the sender; false once the notifier is closed (the
// caller then sends them itself).
func (n *notifier) add(ns []notification) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return false
	}
	n.queue <- ns // the sender never waits for a lock: this ends
	return true
}

func (n *notifier) run() {
	defer close(n.done)
	for ns := range n.queue {
	more: // what else is waiting goes in the same statement
		for {
			select {
			case next, ok := <-n.queue:
				if !ok {
					break more
				}
				ns = append(ns, next...)
			default:
				break more
			}
		}
		send(n.db, n.m, n.log, ns)
	}
}

// close sends what was handed over, waiting at most budget; later
// notifications are sent by whoever queues them.
func (n *notifier) close(budget time.Duration) {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.queue)
	}
	n.mu.Unlock()
	select {
	case <-n.done:
	case <-time.After(budget):
		n.log.Warn().Msg("notifications still being sent at shutdown: left behind")
	}
}

// send sends ns with one statement. A failure loses them: counted and
// logged; the messages that queued them stay committed.
func send(db *sql.DB, m *metrics, log *zerolog.Logger, ns []notification) {
	chans, payloads := make([]string, len(ns)), make([]string, len(ns))
	for i, x := range ns {
		chans[i], payloads[i] = x.channel, x.payload
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, notifySQL, pq.Array(chans), pq.Array(payloads)); err != nil {
		m.notificationsLost.Add(float64(len(ns)))
		log.Warn().Err(err).Int("notifications", len(ns)).Str("channel", chans[0]).
			Msg("notify after commit failed: notifications lost, their messages are committed")
	}
}

// notifyCommitted hands the notifications that the committed messages
// queued (NotifyAfterCommit) to the sender, in their order, and forgets
// them; without a running sender it sends them itself.
func (r *Runtime) notifyCommitted(items []*item) {
	var ns []notification
	for _, it := range items {
		if it.st != nil && len(it.st.notify) > 0 {
			ns = append(ns, it.st.notify...)
			it.st.notify = nil
		}
	}
	if len(ns) == 0 {
		return
	}
	if r.notes != nil && r.notes.add(ns) {
		return
	}
	send(r.db, r.m, &r.log, ns)
}
