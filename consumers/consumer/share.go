package consumer

import (
	"slices"
	"sync"
)

// Shared transactions (CONSUMER_SHARED_TRANSACTIONS = lanes).
//
// Each partition's worker gathers its own batch. Without sharing, every
// ready partition then runs its own transaction: at partial load the
// batches are small, and the fixed cost of a transaction (its BEGIN,
// Prepare's reads, the set-based writes, the marks, the commit's flush) is
// paid per partition.
//
// With sharing, at most `lanes` transactions run at once, and the routable
// runs of the partitions that become ready while they run wait, then go
// together into the next one: its leader (a waiting worker promoted when a
// lane frees) runs them as one batch — Prepare over all of them, each
// partition's handlers in its offset order, one insert of the marks, one
// commit. Rows touched from several partitions are locked in key order by
// Prepare, as for one partition's batch.
//
// The guarantees are a batch's: a shared transaction commits all of its
// runs or none. When it commits, each worker settles its own run (its
// messages' after-commit hooks, outcome lines, and the offset of its
// partition, stored only now). When a handler fails (or a BeforeCommit
// blames a message through FailMessage), the failure goes to that
// message's run, which goes on as after a failure in its own batch: the
// failure is the message's first attempt. Every other run, and every run
// after any other failure, runs again on its own (runOwn), where failures
// are told apart and treated as without sharing. A worker still waiting
// when its drain budget is spent leaves the queue; one whose run a leader
// took waits for that transaction's end. A waiting worker holds no
// CONSUMER_MAX_TRANSACTIONS turn: a leader takes one in batchTx, and must
// not wait for a turn that a run waiting for its lane holds.
//
// One lane pays the fixed part least often, but the handlers of a shared
// transaction run one after the other on its leader's goroutine while
// PostgreSQL waits, and PostgreSQL's work overlaps no handler's: two lanes
// (the default) overlap them (bench/README.md, "Shared transactions").

// sharedLimit × CONSUMER_BATCH_SIZE is how many messages a shared
// transaction takes at most.
const sharedLimit = 4

type sharer struct {
	lanes int // shared transactions at once
	limit int // messages per shared transaction (the leader's own run always goes)
	// commit runs a shared transaction on the leader's worker:
	// (*worker).commitBatch (a stand-in in the queue's unit tests).
	commit func(w *worker, items []*item) (ok bool, failed int, err error)

	mu      sync.Mutex
	leaders int         // lanes taken: leaders running, or promoted to run, a transaction
	pending []*shareReq // runs waiting for a lane, in arrival order
}

// shareReq is one worker's routable run offered to a shared transaction.
type shareReq struct {
	w     *worker
	items []*item
	done  chan shared   // how the transaction that took the run ended
	lead  chan struct{} // promoted: the worker leads the next transaction
}

// shared is how a shared transaction ended for one run: committed, or
// not, and then failed/err as processBatch reports them, failed being an
// index into the run (-1: the failure was of another run, or of none).
type shared struct {
	ok     bool
	failed int
	err    error
}

func newSharer(lanes, limit int) *sharer {
	return &sharer{lanes: lanes, limit: limit, commit: (*worker).commitBatch}
}

// run has w's run committed in a transaction it may share with the runs of
// other partitions, and reports how it ended. Committed: the caller then
// settles the run. Not: nothing of it was committed.
func (s *sharer) run(w *worker, items []*item) shared {
	req := &shareReq{w: w, items: items, done: make(chan shared, 1), lead: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.leaders < s.lanes {
		s.leaders++
		s.mu.Unlock()
		return s.lead(req)
	}
	s.pending = append(s.pending, req)
	s.mu.Unlock()
	w.giveTurn() // waiting: the turn goes to a transaction that runs
	select {
	case res := <-req.done:
		return res
	case <-req.lead:
		return s.lead(req)
	case <-w.ctx.Done():
	}
	// The drain budget is spent. Promotion and taking both remove a run
	// from pending under mu, so under mu the run is either still waiting,
	// promoted, or in a leader's transaction.
	s.mu.Lock()
	if i := slices.Index(s.pending, req); i >= 0 {
		s.pending = slices.Delete(s.pending, i, i+1)
		s.mu.Unlock()
		return shared{failed: -1}
	}
	s.mu.Unlock()
	select {
	case <-req.lead: // promoted meanwhile: lead hands the lane on, as w is stopping
		return s.lead(req)
	default:
		return <-req.done // taken: its transaction ends with its leader's
	}
}

// lead runs own's run, with the runs waiting now (up to limit messages), in
// one transaction on own's worker, tells the others how it ended, and
// hands the lane on. A handler's failure (or a BeforeCommit's, through
// FailMessage) is reported to the run of its message only, so that it
// counts as that message's first attempt, as in a batch of its own.
func (s *sharer) lead(own *shareReq) (res shared) {
	s.mu.Lock()
	if own.w.ctx.Err() != nil { // stopping: its transaction would fail; the lane goes on
		s.handOnLocked()
		s.mu.Unlock()
		return shared{failed: -1}
	}
	group := []*shareReq{own}
	n := len(own.items)
	rest := s.pending[:0]
	for _, q := range s.pending {
		if n+len(q.items) <= s.limit {
			group = append(group, q)
			n += len(q.items)
		} else {
			rest = append(rest, q)
		}
	}
	clear(s.pending[len(rest):]) // no references kept to the runs taken
	s.pending = rest
	s.mu.Unlock()

	ok, failed, err := false, -1, error(nil) // failed: an index into items
	defer func() {
		// Each run's result: committed, or the failure's index in its run.
		base := 0
		for i, q := range group {
			r := shared{ok: ok, failed: -1}
			if failed >= base && failed < base+len(q.items) {
				r.failed, r.err = failed-base, err
			}
			base += len(q.items)
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
	m.sharedRuns.Observe(float64(len(group)))
	if ok, failed, err = s.commit(own.w, items); !ok && len(group) > 1 {
		m.batchReruns.WithLabelValues("shared-failed").Inc()
	}
	if !ok && own.w.ctx.Err() != nil {
		// The leader's drain budget was spent: the transaction was
		// cancelled, and what failed in it is no message's attempt.
		failed = -1
	}
	return res // set by the deferred function
}

// handOnLocked gives the lane of a leader that is done to the first waiting
// run, or frees it. s.mu is held.
func (s *sharer) handOnLocked() {
	if len(s.pending) == 0 {
		s.leaders--
		return
	}
	next := s.pending[0]
	s.pending[0] = nil
	s.pending = s.pending[1:]
	next.lead <- struct{}{}
}
