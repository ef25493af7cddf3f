package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// shareFixture is a sharer with one lane over workers that only wait: its
// transactions are a stand-in that records the runs it was given.
type shareFixture struct {
	t     *testing.T
	s     *sharer
	r     *Runtime
	ran   chan []*worker // per stand-in transaction: the workers of its runs
	owner map[*item]*worker
}

func newShareFixture(t *testing.T) *shareFixture {
	f := &shareFixture{t: t, s: newSharer(1, 100), ran: make(chan []*worker, 10), owner: map[*item]*worker{}}
	f.r = &Runtime{m: newMetrics(prometheus.NewRegistry(), Service{}, nil)}
	f.s.commit = func(_ *worker, items []*item) (bool, int, error) {
		var ws []*worker
		for _, it := range items {
			ws = append(ws, f.owner[it])
		}
		f.ran <- ws
		return true, -1, nil
	}
	return f
}

// start offers a run of one message of a new worker; its result arrives
// on the returned channel.
func (f *shareFixture) start() (*worker, chan shared) {
	w := newTurnWorker(f.r)
	f.t.Cleanup(w.cancel)
	it := &item{}
	f.owner[it] = w
	res := make(chan shared, 1)
	go func() { res <- f.s.run(w, []*item{it}) }()
	return w, res
}

func (f *shareFixture) waitPending(n int) {
	f.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		f.s.mu.Lock()
		got := len(f.s.pending)
		f.s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d runs waiting, want %d", got, n)
		}
	}
}

// twoWaiting holds the lane and queues two runs behind it, in order.
func (f *shareFixture) twoWaiting() (a *worker, resA chan shared, b *worker, resB chan shared) {
	f.t.Helper()
	f.s.leaders = 1 // the lane is held
	a, resA = f.start()
	f.waitPending(1)
	b, resB = f.start()
	f.waitPending(2)
	return a, resA, b, resB
}

// noneRan fails the test if a transaction ran.
func (f *shareFixture) noneRan() {
	f.t.Helper()
	select {
	case ws := <-f.ran:
		f.t.Fatalf("a transaction ran %d runs", len(ws))
	default:
	}
}

func (f *shareFixture) leaders() int {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.s.leaders
}

// A run still waiting for the lane when its worker's drain budget is spent
// leaves the queue, uncommitted; the lane stays with its holder.
func TestAWaitingRunLeavesTheQueueWhenItsBudgetIsSpent(t *testing.T) {
	f := newShareFixture(t)
	f.s.leaders = 1 // the lane is held
	w, res := f.start()
	f.waitPending(1)
	w.cancel()
	if got := <-res; got.ok || got.failed != -1 {
		t.Fatalf("run = %+v, want not committed, no failure of its own", got)
	}
	f.waitPending(0)
	if n := f.leaders(); n != 1 {
		t.Fatalf("%d lanes taken, want 1 (the holder's)", n)
	}
	f.noneRan()
}

// A lane handed to a worker that is stopping is passed on to the next
// waiting run; the last leader frees it. No run is left waiting.
func TestALaneHandedToAStoppingWorkerGoesOn(t *testing.T) {
	f := newShareFixture(t)
	b, resB, c, resC := f.twoWaiting()

	// The holder finishes while b is stopping: b is promoted, and either
	// sees its stop first (and hands the lane on) or leads a transaction
	// of its own run and c's.
	f.s.mu.Lock()
	b.cancel()
	f.s.handOnLocked()
	f.s.mu.Unlock()

	gotB, gotC := <-resB, <-resC
	if !gotC.ok {
		t.Fatalf("c's run = %+v, want committed", gotC)
	}
	ws := <-f.ran
	switch {
	case len(ws) == 1 && ws[0] == c: // b handed the lane on; c led its own
		if gotB.ok {
			t.Fatal("b's run committed, though b handed the lane on")
		}
	case len(ws) == 2 && ws[0] == b && ws[1] == c: // b led both
		if !gotB.ok {
			t.Fatal("b led a committed transaction, but its run is reported uncommitted")
		}
	default:
		t.Fatalf("a transaction of %d runs, want c's alone or b's then c's", len(ws))
	}
	f.waitPending(0)
	if n := f.leaders(); n != 0 {
		t.Fatalf("%d lanes taken after the last leader, want 0", n)
	}
}

// A leader takes every run waiting for the lane, its own first, up to the
// limit of messages; those beyond it wait for the next transaction.
func TestALeaderTakesTheWaitingRunsUpToTheLimit(t *testing.T) {
	f := newShareFixture(t)
	f.s.limit = 3
	f.s.leaders = 1 // the lane is held
	var ws []*worker
	var results []chan shared
	for i := 0; i < 4; i++ {
		w, res := f.start()
		f.waitPending(i + 1)
		ws = append(ws, w)
		results = append(results, res)
	}
	f.s.mu.Lock()
	f.s.handOnLocked() // the holder finishes: ws[0] leads
	f.s.mu.Unlock()
	first, second := <-f.ran, <-f.ran
	if len(first) != 3 || first[0] != ws[0] || first[1] != ws[1] || first[2] != ws[2] {
		t.Fatalf("first transaction: %d runs, want ws[0..2] in order", len(first))
	}
	if len(second) != 1 || second[0] != ws[3] {
		t.Fatalf("second transaction: %d runs, want ws[3]'s", len(second))
	}
	for i, res := range results {
		if got := <-res; !got.ok {
			t.Fatalf("run %d = %+v, want committed", i, got)
		}
	}
	if n := f.leaders(); n != 0 {
		t.Fatalf("%d lanes taken at the end, want 0", n)
	}
}

// A worker that waits for a lane gives its CONSUMER_MAX_TRANSACTIONS turn
// up: a leader, which takes a turn for its transaction, must not wait for
// one that a run waiting for the leader's lane holds.
func TestAWaitingRunHoldsNoTurn(t *testing.T) {
	f := newShareFixture(t)
	f.r.turns = make(chan struct{}, 1)
	f.s.leaders = 1 // the lane is held
	w := newTurnWorker(f.r)
	t.Cleanup(w.cancel)
	if !w.takeTurn(nil) { // as the run loop does before it gathers a batch
		t.Fatal("takeTurn")
	}
	it := &item{}
	f.owner[it] = w
	res := make(chan shared, 1)
	go func() { res <- f.s.run(w, []*item{it}) }()
	f.waitPending(1)
	for deadline := time.Now().Add(10 * time.Second); w.hasTurn.Load() || len(f.r.turns) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a run waiting for the lane still holds its turn")
		}
	}
	f.s.mu.Lock()
	f.s.handOnLocked()
	f.s.mu.Unlock()
	if got := <-res; !got.ok {
		t.Fatalf("run = %+v, want committed", got)
	}
}

// When the leader's drain budget is spent, its transaction is cancelled:
// the failure that shows in it (a cancelled statement, in whichever
// handler ran) is no message's attempt. Every run goes its own way.
func TestALeaderCancelledMidTransactionBlamesNoMessage(t *testing.T) {
	f := newShareFixture(t)
	leader, resL, _, resF := f.twoWaiting()
	f.s.commit = func(_ *worker, items []*item) (bool, int, error) {
		leader.cancel()                                                            // the budget is spent mid-transaction
		return false, 1, errors.New("pq: canceling statement due to user request") // in the follower's handler
	}
	f.s.mu.Lock()
	f.s.handOnLocked() // the leader leads both runs
	f.s.mu.Unlock()
	for name, res := range map[string]chan shared{"leader": resL, "follower": resF} {
		if got := <-res; got.ok || got.failed != -1 {
			t.Fatalf("%s's run = %+v, want not committed and no failure of its own", name, got)
		}
	}
	if n := f.leaders(); n != 0 {
		t.Fatalf("%d lanes taken at the end, want 0", n)
	}
}

// A worker that is stopping does not lead: the lane goes on, and the runs
// waiting are not taken into a transaction bound to fail.
func TestAStoppingWorkerDoesNotLead(t *testing.T) {
	f := newShareFixture(t)
	w := newTurnWorker(f.r)
	w.cancel()
	if got := f.s.run(w, []*item{{}}); got.ok || got.failed != -1 {
		t.Fatalf("run = %+v, want not committed, no failure of its own", got)
	}
	if n := f.leaders(); n != 0 {
		t.Fatalf("%d lanes taken, want 0", n)
	}
	f.noneRan()
}
