package consumer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"
)

// schedFixture is a scheduler with one lane over workers that only wait:
// its transactions are a stand-in that records the runs it was given.
type schedFixture struct {
	t     *testing.T
	s     *scheduler
	r     *Runtime
	ran   chan []*worker // per stand-in transaction: the workers of its runs
	owner map[*item]*worker
}

func newSchedFixture(t *testing.T) *schedFixture {
	f := &schedFixture{t: t, s: newScheduler(1, 100, 0, 0), ran: make(chan []*worker, 10), owner: map[*item]*worker{}}
	f.r = &Runtime{m: newMetrics(prometheus.NewRegistry(), Service{}, nil, func() float64 { return 0 })}
	f.s.tx = func(_ *worker, items []*item, _ txMode) txResult {
		var ws []*worker
		for _, it := range items {
			ws = append(ws, f.owner[it])
		}
		f.ran <- ws
		return txResult{committed: true}
	}
	return f
}

// newIdleWorker is a worker with only what the scheduler uses.
func newIdleWorker(r *Runtime) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &worker{r: r, quit: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// start offers a run of one message of a new worker (alone: a run that
// shares nothing); its result arrives on the returned channel.
func (f *schedFixture) start(alone bool) (*worker, chan txResult) {
	w := newIdleWorker(f.r)
	f.t.Cleanup(w.cancel)
	it := &item{}
	f.owner[it] = w
	res := make(chan txResult, 1)
	go func() { res <- f.s.do(w, []*item{it}, alone, txMode{}) }()
	return w, res
}

func (f *schedFixture) waitPending(n int) {
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
func (f *schedFixture) twoWaiting() (a *worker, resA chan txResult, b *worker, resB chan txResult) {
	f.t.Helper()
	f.s.leaders = 1 // the lane is held
	a, resA = f.start(false)
	f.waitPending(1)
	b, resB = f.start(false)
	f.waitPending(2)
	return a, resA, b, resB
}

// nextRan is the workers of the next stand-in transaction; the test fails
// if none runs within 10 s.
func (f *schedFixture) nextRan() []*worker {
	f.t.Helper()
	select {
	case ws := <-f.ran:
		return ws
	case <-time.After(10 * time.Second):
		f.t.Fatal("no transaction ran in 10 s")
		return nil
	}
}

// ranAlone fails the test unless the next stand-in transaction carries
// w's run alone.
func (f *schedFixture) ranAlone(w *worker) {
	f.t.Helper()
	if ws := f.nextRan(); len(ws) != 1 || ws[0] != w {
		f.t.Fatalf("a transaction of %d runs, want one worker's run alone", len(ws))
	}
}

// committed fails the test unless every run of results was reported
// committed.
func (f *schedFixture) committed(results ...chan txResult) {
	f.t.Helper()
	for i, res := range results {
		if got := <-res; !got.committed {
			f.t.Fatalf("run %d = %+v, want committed", i, got)
		}
	}
}

// noneRan fails the test if a transaction ran.
func (f *schedFixture) noneRan() {
	f.t.Helper()
	select {
	case ws := <-f.ran:
		f.t.Fatalf("a transaction ran %d runs", len(ws))
	default:
	}
}

func (f *schedFixture) leaders() int {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.s.leaders
}

// wantLanes fails the test unless want lanes are taken (leaders); why
// says when, and why that many.
func (f *schedFixture) wantLanes(want int, why string) {
	f.t.Helper()
	if n := f.leaders(); n != want {
		f.t.Fatalf("%d lanes taken, want %d: %s", n, want, why)
	}
}

func (f *schedFixture) handOn() {
	f.s.mu.Lock()
	f.s.handOnLocked()
	f.s.mu.Unlock()
}

// A run still waiting for the lane when its worker's drain budget is spent
// leaves the queue, uncommitted; the lane stays with its holder.
func TestAWaitingRunLeavesTheQueueWhenItsBudgetIsSpent(t *testing.T) {
	f := newSchedFixture(t)
	f.s.leaders = 1 // the lane is held
	w, res := f.start(false)
	f.waitPending(1)
	w.cancel()
	if got := <-res; got.committed || got.failed != nil {
		t.Fatalf("run = %+v, want not committed, no failure of its own", got)
	}
	f.waitPending(0)
	f.wantLanes(1, "the holder's")
	f.noneRan()
}

// A lane handed to a worker that is stopping is passed on to the next
// waiting run; the last leader frees it. No run is left waiting.
func TestALaneHandedToAStoppingWorkerGoesOn(t *testing.T) {
	f := newSchedFixture(t)
	b, resB, c, resC := f.twoWaiting()

	// The holder finishes while b is stopping: b is promoted, and either
	// sees its stop first (and hands the lane on) or leads a transaction
	// of its own run and c's.
	f.s.mu.Lock()
	b.cancel()
	f.s.handOnLocked()
	f.s.mu.Unlock()

	gotB, gotC := <-resB, <-resC
	if !gotC.committed {
		t.Fatalf("c's run = %+v, want committed", gotC)
	}
	ws := <-f.ran
	switch {
	case len(ws) == 1 && ws[0] == c: // b handed the lane on; c led its own
		if gotB.committed {
			t.Fatal("b's run committed, though b handed the lane on")
		}
	case len(ws) == 2 && ws[0] == b && ws[1] == c: // b led both
		if !gotB.committed {
			t.Fatal("b led a committed transaction, but its run is reported uncommitted")
		}
	default:
		t.Fatalf("a transaction of %d runs, want c's alone or b's then c's", len(ws))
	}
	f.waitPending(0)
	f.wantLanes(0, "after the last leader")
}

// A leader takes every run waiting for the lane, its own first, up to the
// limit of messages; those beyond it wait for the next transaction.
func TestALeaderTakesTheWaitingRunsUpToTheLimit(t *testing.T) {
	f := newSchedFixture(t)
	f.s.limit = 3
	f.s.leaders = 1 // the lane is held
	var ws []*worker
	var results []chan txResult
	for i := 0; i < 4; i++ {
		w, res := f.start(false)
		f.waitPending(i + 1)
		ws = append(ws, w)
		results = append(results, res)
	}
	f.handOn() // the holder finishes: ws[0] leads
	first, second := <-f.ran, <-f.ran
	if len(first) != 3 || first[0] != ws[0] || first[1] != ws[1] || first[2] != ws[2] {
		t.Fatalf("first transaction: %d runs, want ws[0..2] in order", len(first))
	}
	if len(second) != 1 || second[0] != ws[3] {
		t.Fatalf("second transaction: %d runs, want ws[3]'s", len(second))
	}
	f.committed(results...)
	f.wantLanes(0, "at the end")
}

// A run that must be alone (a message retried on its own, a probe) takes
// a lane in its turn like any other, but no leader takes it into a shared
// transaction and it takes none with it: the runs before and after it in
// the queue share theirs.
func TestARunAloneSharesNoTransaction(t *testing.T) {
	f := newSchedFixture(t)
	f.s.leaders = 1 // the lane is held
	a, resA := f.start(false)
	f.waitPending(1)
	solo, resSolo := f.start(true)
	f.waitPending(2)
	b, resB := f.start(false)
	f.waitPending(3)

	f.handOn() // a leads: it takes b, not the lone run between them
	if ws := <-f.ran; len(ws) != 2 || ws[0] != a || ws[1] != b {
		t.Fatalf("first transaction: %v, want a's and b's runs", ws)
	}
	if ws := <-f.ran; len(ws) != 1 || ws[0] != solo { // then the lone run, alone
		t.Fatalf("second transaction: %v, want the lone run only", ws)
	}
	for name, res := range map[string]chan txResult{"a": resA, "b": resB, "alone": resSolo} {
		if got := <-res; !got.committed {
			t.Fatalf("%s's run = %+v, want committed", name, got)
		}
	}
	f.wantLanes(0, "at the end")
}

// When the leader's drain budget is spent, its transaction is cancelled:
// the failure that shows in it (a cancelled statement, in whichever
// handler ran) is no message's attempt. Every run goes its own way.
func TestALeaderCancelledMidTransactionBlamesNoMessage(t *testing.T) {
	f := newSchedFixture(t)
	leader, resL, _, resF := f.twoWaiting()
	f.s.tx = func(_ *worker, items []*item, _ txMode) txResult {
		leader.cancel()                                                                                   // the budget is spent mid-transaction
		return txResult{failed: items[1], err: errors.New("pq: canceling statement due to user request")} // in the follower's handler
	}
	f.handOn() // the leader leads both runs
	for name, res := range map[string]chan txResult{"leader": resL, "follower": resF} {
		if got := <-res; got.committed || got.failed != nil {
			t.Fatalf("%s's run = %+v, want not committed and no failure of its own", name, got)
		}
	}
	f.wantLanes(0, "at the end")
}

// A handler's failure in a shared transaction is reported to its own run
// only, with the failing message; the other runs learn only that nothing
// committed.
func TestAFailureInASharedTransactionGoesToItsRunOnly(t *testing.T) {
	f := newSchedFixture(t)
	_, resA, _, resB := f.twoWaiting()
	boom := errors.New("boom")
	var failing *item
	f.s.tx = func(_ *worker, items []*item, _ txMode) txResult {
		failing = items[1]
		return txResult{failed: items[1], err: boom}
	}
	f.handOn()
	if got := <-resA; got.committed || got.failed != nil || got.err != nil {
		t.Fatalf("the other run = %+v, want not committed, nothing of its own", got)
	}
	if got := <-resB; got.committed || got.failed != failing || !errors.Is(got.err, boom) {
		t.Fatalf("the failing run = %+v, want its message and the failure", got)
	}
}

// A worker that is stopping does not lead: the lane goes on, and the runs
// waiting are not taken into a transaction bound to fail.
func TestAStoppingWorkerDoesNotLead(t *testing.T) {
	f := newSchedFixture(t)
	w := newIdleWorker(f.r)
	w.cancel()
	if got := f.s.do(w, []*item{{}}, false, txMode{}); got.committed || got.failed != nil {
		t.Fatalf("run = %+v, want not committed, no failure of its own", got)
	}
	f.wantLanes(0, "a stopping worker leads nothing")
	f.noneRan()
}

// startSized is start for a run of one message of size bytes.
func (f *schedFixture) startSized(size int) chan txResult {
	w := newIdleWorker(f.r)
	f.t.Cleanup(w.cancel)
	it := &item{km: &kafka.Message{Value: make([]byte, size)}, size: int64(size)}
	f.owner[it] = w
	res := make(chan txResult, 1)
	go func() { res <- f.s.do(w, []*item{it}, false, txMode{}) }()
	return res
}

// CONSUMER_TRANSACTION_BYTES: a leader takes the waiting runs along only
// while their messages' bytes fit its budget; the others wait for the
// next transaction.
func TestASharedTransactionTakesRunsWithinItsByteBudget(t *testing.T) {
	f := newSchedFixture(t)
	f.s.bytes = 2 << 20
	f.s.leaders = 1 // the lane is held
	var res []chan txResult
	for i := range 3 {
		res = append(res, f.startSized(1<<20))
		f.waitPending(i + 1)
	}
	f.handOn() // the first leads, and takes the second: 2 MiB; the third waits
	if ws := <-f.ran; len(ws) != 2 {
		t.Fatalf("the first transaction carried %d runs, want 2 (its 2 MiB)", len(ws))
	}
	if ws := <-f.ran; len(ws) != 1 {
		t.Fatalf("the second transaction carried %d runs, want 1", len(ws))
	}
	f.committed(res...)
}

// A transaction that carries the run of a partition likely to meet marks
// (worker.mayMeetMarks) looks for every run's marks; once committed, each
// run counts toward its own worker's window. One that met marks opens
// every window it carried again.
func TestASharedTransactionLooksForTheMarksIfOneOfItsPartitionsMayMeetThem(t *testing.T) {
	f := newSchedFixture(t)
	f.r.cfg.BatchSize = 1 // a window of 2 messages
	type ran struct {
		mode txMode
		n    int
	}
	modes := make(chan ran, 2)
	var met bool // what the next transaction reports
	f.s.tx = func(_ *worker, items []*item, mode txMode) txResult {
		modes <- ran{mode, len(items)}
		return txResult{committed: true, metMarks: met}
	}

	settled, resA, fresh, resB := f.twoWaiting()
	settled.committed.Store(2)
	f.handOn()
	<-resA
	<-resB
	if got := <-modes; got.n != 2 || !got.mode.findMarks {
		t.Fatalf("the shared transaction ran %d runs with findMarks %v, want 2 runs, true (one partition is fresh)", got.n, got.mode.findMarks)
	}
	if a, b := settled.committed.Load(), fresh.committed.Load(); a != 3 || b != 1 {
		t.Fatalf("committed counts %d and %d, want 3 and 1", a, b)
	}

	c, resC, d, resD := f.twoWaiting()
	c.committed.Store(2)
	d.committed.Store(5)
	met = true
	f.handOn()
	<-resC
	<-resD
	if got := <-modes; got.n != 2 || got.mode.findMarks {
		t.Fatalf("the shared transaction ran %d runs with findMarks %v, want 2 runs, false (both partitions settled)", got.n, got.mode.findMarks)
	}
	if a, b := c.committed.Load(), d.committed.Load(); a != 0 || b != 0 {
		t.Fatalf("committed counts %d and %d after a transaction that met marks, want 0 and 0", a, b)
	}
}

// A lane beyond the first opens for a backlog only: while one lane is
// busy, runs wait for it until the messages waiting, with the asking
// run's, reach the backlog; the run that makes it one opens the second
// lane and takes the waiting runs along.
func TestASecondLaneOpensForABacklogOnly(t *testing.T) {
	f := newSchedFixture(t)
	f.s.lanes, f.s.backlog = 2, 3
	f.s.leaders = 1 // the first lane is busy
	a, resA := f.start(false)
	f.waitPending(1)
	b, resB := f.start(false)
	f.waitPending(2) // 2 messages waiting: no backlog, no second lane
	f.noneRan()
	f.wantLanes(1, "with 2 messages waiting (backlog 3)")
	c, resC := f.start(false) // the third message: a backlog
	ws := f.nextRan()
	if len(ws) != 3 || ws[0] != c || ws[1] != a || ws[2] != b {
		t.Fatalf("the second lane's transaction ran %d runs, want c's leading a's and b's", len(ws))
	}
	f.committed(resA, resB, resC)
	f.waitPending(0)
	f.wantLanes(1, "after the second lane's transaction (the busy one)")
	if f.s.waiting != 0 {
		t.Fatalf("%d messages counted waiting with none pending", f.s.waiting)
	}
}

// A lane that ends while another is open closes unless a backlog waits;
// the runs waiting then go with the last lane open, when it ends.
func TestALaneClosesWhenWhatWaitsIsNoBacklog(t *testing.T) {
	f := newSchedFixture(t)
	f.s.lanes, f.s.backlog = 2, 3
	f.s.leaders = 2 // both lanes busy
	a, resA := f.start(false)
	f.waitPending(1)
	f.handOn() // one lane ends: 1 message waits, no backlog
	f.noneRan()
	f.wantLanes(1, "the ended lane closes for 1 message waiting")
	f.waitPending(1)
	f.handOn() // the last lane ends: it goes to a
	f.ranAlone(a)
	f.committed(resA)
	f.waitPending(0)
	f.wantLanes(0, "at the end")

	// With a backlog waiting, the ending lane goes on to it.
	f.s.leaders = 2
	var results []chan txResult
	for i := range 3 {
		_, res := f.start(false)
		f.waitPending(i + 1)
		results = append(results, res)
	}
	f.handOn()
	if ws := f.nextRan(); len(ws) != 3 {
		t.Fatalf("the lane handed on ran %d runs, want the 3 waiting", len(ws))
	}
	f.committed(results...)
	f.waitPending(0)
	f.wantLanes(1, "after the handed-on transaction (the other, still busy)")
}

// A batch cut at the transaction's byte budget is a backlog too: the
// bytes waiting open a lane when the messages do not (large records).
func TestASecondLaneOpensForABacklogOfBytes(t *testing.T) {
	f := newSchedFixture(t)
	f.s.lanes, f.s.backlog, f.s.backlogBytes = 2, 100, 10
	f.s.leaders = 1 // the first lane is busy
	resA := f.startSized(6)
	f.waitPending(1)
	f.noneRan()
	resB := f.startSized(6) // 12 bytes waiting: a backlog
	if ws := f.nextRan(); len(ws) != 2 {
		t.Fatalf("the second lane's transaction ran %d runs, want both", len(ws))
	}
	f.committed(resA, resB)
	f.waitPending(0)
	if f.s.waiting != 0 || f.s.waitingBytes != 0 {
		t.Fatalf("%d messages, %d bytes counted waiting with none pending", f.s.waiting, f.s.waitingBytes)
	}
}

// A run that waited its stall for a lane opens a free one without a
// backlog: a transaction held up does not hold the other partitions.
func TestAWaitingRunOpensAFreeLaneAfterItsStall(t *testing.T) {
	f := newSchedFixture(t)
	f.s.lanes, f.s.backlog, f.s.stall = 2, 100, 20*time.Millisecond
	f.s.leaders = 1 // the first lane is held, and stays so
	a, resA := f.start(false)
	f.ranAlone(a)
	f.committed(resA)
	f.waitPending(0)
	f.wantLanes(1, "the held one")

	// With every lane busy the stall opens nothing; the first lane to end
	// then goes to the run that has waited its stall, backlog or not.
	f.s.leaders = 2
	b, resB := f.start(false)
	f.waitPending(1)
	time.Sleep(3 * f.s.stall)
	f.noneRan()
	f.handOn() // one lane ends: b's 1 message is no backlog, but b has waited
	f.ranAlone(b)
	f.committed(resB)
	f.waitPending(0)
	f.wantLanes(1, "after b's transaction (the other, still busy)")
}
