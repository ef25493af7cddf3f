package consumer

import (
	"slices"
	"sync"
	"time"
)

// The scheduler: at most CONSUMER_TRANSACTIONS transactions of messages at
// once, the one knob of the runtime's concurrency (DESIGN.md, "Scheduling"
// for why). The routable runs of the partitions that become ready while
// the lanes are busy wait, then go together into the next transaction: its
// leader (a waiting worker promoted when a lane frees) runs them as one
// batch. A run that must be alone (a retry, a probe) takes none along. A
// shared transaction commits all of its runs or none; each worker then
// settles its own run, and a message's failure goes to its run alone (its
// first attempt) while every other run goes again alone. A worker still
// waiting when its drain budget is spent leaves the queue; one whose run a
// leader took waits for that transaction's end.
//
// The first lane is always open; the others open for a backlog only: when
// the runs waiting, with the one asking, hold a partition's full batch or
// more (CONSUMER_BATCH_SIZE messages, or half of
// CONSUMER_TRANSACTION_BYTES: a batch cut at the budget holds more) —
// unless the service's EagerLanes, or a far database, opens them for any
// run (distance.go). A lane that ends hands on to a waiting run while it
// is the last one open or such a backlog waits, and closes otherwise.
// Under a backlog every lane runs; at a partial load the runs that arrive
// while a transaction runs wait for it and go together in the next one,
// instead of a second, smaller transaction that contends with the first
// for the same rows and wakes the database's backend more often
// (DESIGN.md, "Scheduling"). A run that has waited stallWait opens a
// free lane all the same: a transaction held up (a row lock, a slow
// commit) does not hold every other partition for as long.
//
// stallWait is 25 ms: three times the p99 of a run's wait for a lane at
// half load (bench/README.md, session 25), so that it opens a lane in
// the database's hiccups and not in a steady partial load.

// sharedLimit × CONSUMER_BATCH_SIZE is how many messages a shared
// transaction takes at most, and CONSUMER_TRANSACTION_BYTES how many bytes
// of them (a partition's batch is cut at it too; one larger message still
// goes, alone).
const sharedLimit = 4

const stallWait = 25 * time.Millisecond

type scheduler struct {
	lanes int // transactions at once
	// backlog is how many messages waiting (the asking run's with them)
	// open a lane beyond the first, backlogBytes how many of their bytes;
	// backlog 0 opens them for any run. stall: a run waiting that long
	// opens a free lane.
	backlog      int
	backlogBytes int64
	stall        time.Duration
	limit        int   // messages per shared transaction (the leader's own run always goes)
	bytes        int64 // and their bytes (CONSUMER_TRANSACTION_BYTES)
	// tx runs a transaction on the leader's worker: (*worker).tx (a
	// stand-in in the scheduler's unit tests).
	tx func(w *worker, items []*item, mode txMode) txResult

	mu           sync.Mutex
	leaders      int        // lanes taken: leaders running, or promoted to run, a transaction
	pending      []*request // runs waiting for a lane, in arrival order
	waiting      int        // the pending runs' messages
	waitingBytes int64      // and their bytes
}

// request is one worker's run offered to the scheduler.
type request struct {
	w     *worker
	items []*item
	bytes int64 // the items' messages' (messageBytes)
	alone bool  // runs in a transaction of its own, shared with no one
	mode  txMode
	asked time.Time     // when the run asked for a lane
	done  chan txResult // how the transaction that took the run ended (for this run)
	lead  chan struct{} // promoted: the worker leads the next transaction
}

// newScheduler is a scheduler of lanes transactions at once, each of up
// to limit messages and bytes bytes (0: no bound), whose lanes beyond the
// first open for backlog messages waiting (0: for any run), or half of
// bytes.
func newScheduler(lanes, limit int, bytes int64, backlog int) *scheduler {
	s := &scheduler{lanes: max(lanes, 1), limit: limit, bytes: bytes, backlog: max(backlog, 0), tx: (*worker).tx}
	if s.backlog > 0 {
		s.backlogBytes = bytes / 2
		s.stall = stallWait
	}
	return s
}

// opensLocked says whether a run of n messages and b bytes may take a
// lane now: a lane is free, and it is the first, a backlog waits, or the
// first run waiting has waited its stall (its timer may have fired while
// every lane was taken). s.mu is held.
func (s *scheduler) opensLocked(n int, b int64) bool {
	if s.leaders >= s.lanes {
		return false
	}
	return s.leaders == 0 || s.waiting+n >= s.backlog || (s.backlogBytes > 0 && s.waitingBytes+b >= s.backlogBytes) ||
		(s.stall > 0 && len(s.pending) > 0 && time.Since(s.pending[0].asked) >= s.stall)
}

// dequeueLocked takes req out of pending, if it is there. s.mu is held.
func (s *scheduler) dequeueLocked(req *request) bool {
	i := slices.Index(s.pending, req)
	if i < 0 {
		return false
	}
	s.pending = slices.Delete(s.pending, i, i+1)
	s.unwaitLocked(req)
	return true
}

// unwaitLocked takes req's messages and bytes out of what waits, as req
// leaves pending (dequeued, promoted, or taken by a leader). s.mu is
// held.
func (s *scheduler) unwaitLocked(req *request) {
	s.waiting -= len(req.items)
	s.waitingBytes -= req.bytes
}

// do has w's run committed, alone or in a transaction it may share with
// the runs of other partitions, and reports how it ended for the run: its
// failed message is one of items.
func (s *scheduler) do(w *worker, items []*item, alone bool, mode txMode) txResult {
	req := &request{w: w, items: items, alone: alone, mode: mode, asked: time.Now(), done: make(chan txResult, 1), lead: make(chan struct{}, 1)}
	for _, it := range items {
		req.bytes += it.size
	}
	s.mu.Lock()
	if s.opensLocked(len(items), req.bytes) {
		s.leaders++
		s.mu.Unlock()
		return s.run(req)
	}
	s.pending = append(s.pending, req)
	s.waiting += len(items)
	s.waitingBytes += req.bytes
	stall := s.stallLocked()
	s.mu.Unlock()
	if stall != nil {
		defer stall.Stop()
	}
	if res, ok := s.wait(req, stall); ok {
		return res
	}
	// The drain budget is spent. Promotion and taking both remove a run
	// from pending under mu, so under mu the run is either still waiting,
	// promoted, or in a leader's transaction.
	s.mu.Lock()
	if s.dequeueLocked(req) {
		s.mu.Unlock()
		return txResult{}
	}
	s.mu.Unlock()
	select {
	case <-req.lead: // promoted meanwhile: run hands the lane on, as w is stopping
		return s.run(req)
	default:
		return <-req.done // taken: its transaction ends with its leader's
	}
}

// stallLocked is the timer after which a run queued now may open a free
// lane, nil when that cannot happen (lanes open for any run, or one
// lane). s.mu is held.
func (s *scheduler) stallLocked() *time.Timer {
	if s.stall <= 0 || s.lanes < 2 {
		return nil
	}
	return time.NewTimer(s.stall)
}

// wait waits for req's run to be taken or promoted, or for its stall
// timer (nil: none) to open a free lane for it; false when w's drain
// budget is spent first.
func (s *scheduler) wait(req *request, stall *time.Timer) (txResult, bool) {
	var stalled <-chan time.Time
	if stall != nil {
		stalled = stall.C
	}
	for {
		select {
		case res := <-req.done:
			return res, true
		case <-req.lead:
			return s.run(req), true
		case <-stalled:
			stalled = nil
			s.mu.Lock()
			if s.leaders < s.lanes && s.dequeueLocked(req) {
				s.leaders++
				s.mu.Unlock()
				return s.run(req), true
			}
			s.mu.Unlock()
		case <-req.w.ctx.Done():
			return txResult{}, false
		}
	}
}

// run leads own's transaction: own's run, with the runs waiting now (up to
// limit messages) unless own is alone, on own's worker; it tells the
// others how it ended, and hands the lane on. A handler's failure (or a
// Write's, through FailMessage) is reported to the run of its
// message only, so that it counts as that message's first attempt, as in a
// batch of its own.
func (s *scheduler) run(own *request) (res txResult) {
	s.mu.Lock()
	if own.w.ctx.Err() != nil { // stopping: its transaction would fail; the lane goes on
		s.handOnLocked()
		s.mu.Unlock()
		return txResult{}
	}
	group := []*request{own}
	n, b := len(own.items), own.bytes
	if !own.alone {
		rest := s.pending[:0]
		for _, q := range s.pending {
			if !q.alone && n+len(q.items) <= s.limit && (s.bytes <= 0 || b+q.bytes <= s.bytes) {
				group = append(group, q)
				n += len(q.items)
				b += q.bytes
				s.unwaitLocked(q)
			} else {
				rest = append(rest, q)
			}
		}
		clear(s.pending[len(rest):]) // no references kept to the runs taken
		s.pending = rest
	}
	s.mu.Unlock()

	var all txResult
	defer func() {
		// Each run's result: committed, or the failure if it is its.
		for i, q := range group {
			r := txResult{committed: all.committed}
			if all.failed != nil && slices.Contains(q.items, all.failed) {
				r.failed, r.err = all.failed, all.err
			} else if len(group) == 1 {
				r.err = all.err // alone: the failure is the run's, whoever's
			}
			if i == 0 {
				res = r
			} else {
				q.done <- r
			}
		}
		s.mu.Lock()
		s.handOnLocked()
		s.mu.Unlock()
	}()
	items := own.items
	if len(group) > 1 {
		items = make([]*item, 0, n)
		for _, q := range group {
			items = append(items, q.items...)
		}
	}
	m := own.w.r.m
	if !own.alone {
		m.sharedRuns.Observe(float64(len(group)))
	}
	if !own.mode.dryRun {
		started := time.Now()
		for _, q := range group {
			m.waited(q.items, q.asked, started)
		}
	}
	mode := own.mode
	for _, q := range group {
		mode.findMarks = mode.findMarks || q.w.mayMeetMarks()
	}
	if all = s.tx(own.w, items, mode); !all.committed && len(group) > 1 {
		m.batchReruns.WithLabelValues("shared-failed").Inc()
	}
	// Counted before the runs learn how the transaction ended (the
	// deferred function) and so before their offsets are stored: once a
	// run's offset is committed, its worker's count includes it.
	if !mode.dryRun {
		for _, q := range group {
			switch {
			case all.metMarks: // redeliveries, perhaps more of them: look again
				q.w.committed.Store(0)
			case all.committed:
				q.w.committed.Add(int64(len(q.items)))
			}
		}
	}
	if !all.committed && own.w.ctx.Err() != nil {
		// The leader's drain budget was spent: the transaction was
		// cancelled, and what failed in it is no message's attempt.
		all.failed = nil
	}
	return res // set by the deferred function
}

// handOnLocked gives the lane of a leader that is done to the first waiting
// run, or closes it: when none waits, or when other lanes are open and
// what waits is no backlog and has not waited its stall. s.mu is held.
func (s *scheduler) handOnLocked() {
	s.leaders--
	if len(s.pending) == 0 || !s.opensLocked(0, 0) {
		return
	}
	s.leaders++
	next := s.pending[0]
	s.pending[0] = nil
	s.pending = s.pending[1:]
	s.unwaitLocked(next)
	next.lead <- struct{}{}
}
