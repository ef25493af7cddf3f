package consumer

import (
	"context"
	"slices"
)

// A worker's batch: the messages of its partition that were queued when it
// took the last one, in offset order.

// handle processes a batch of one partition's messages in order. Each run
// of routable messages goes into one transaction, shared with other
// partitions' runs when it can; a run that fails is split as below. It
// reports false when the worker is stopping and the rest of the batch was
// abandoned.
func (w *worker) handle(batch []queued) bool {
	r := w.r
	items := make([]*item, len(batch))
	for i, q := range batch {
		items[i] = r.prepare(q.m, q.at)
		items[i].size = q.size
		if it := items[i]; it.msg != nil && r.svc.ContractVersion != 0 && it.msg.ContractVersion != r.svc.ContractVersion {
			r.m.mismatch()
			r.logFor(it).Warn().Int("ContractVersion", it.msg.ContractVersion).
				Int("expected", r.svc.ContractVersion).Msg("contract-version-mismatch")
		}
	}
	w.items = items // the messages behind a failing one may be probed (inPartition.probe)
	defer func() { w.items = nil }()
	defer r.flushLog() // the batch's outcome lines, in one write (loglines.go)
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].routed && items[j].msg.Problem() == nil {
			j++
		}
		var ok bool
		if j == i { // a message that cannot be routed: on its own, no transaction
			j = i + 1
			ok = w.processOne(items[i], nil)
		} else {
			ok = w.runRouted(items[i:j])
		}
		if !ok {
			for _, rest := range items[i:] {
				rest.span.End()
			}
			return false
		}
		i = j
	}
	return true
}

// runRouted processes a run of routable messages of w's partition, in
// offset order: first in one transaction that other partitions' runs may
// share. A transaction that does not commit is split, with no recursion:
//   - after a failure of another partition's run, or of none (Read,
//     Write, the marks, the commit), the run goes again alone;
//   - after a failure that belongs to no message in a transaction of the
//     partition alone, its messages go one at a time, where each failure
//     is told apart;
//   - after a message's own failure (its route's, or a Read or Write
//     naming it), the messages before it go again (they did not fail), the
//     failing one goes on its own with that failure as its first attempt
//     (processOne), and the rest go on as a new run.
//
// It reports false when the worker is stopping and the rest was abandoned.
func (w *worker) runRouted(items []*item) bool {
	type step struct {
		run   []*item // a run for one transaction
		alone bool    // of w's partition alone
		one   *item   // or a message on its own (processOne)
		first error   // and its first attempt's failure
	}
	todo := []step{{run: items}}
	for len(todo) > 0 {
		s := todo[0]
		todo = todo[1:]
		switch {
		case s.one != nil:
			if !w.processOne(s.one, s.first) {
				return false
			}
			continue
		case len(s.run) == 0:
			continue
		case len(s.run) == 1 && s.alone:
			if !w.processOne(s.run[0], nil) {
				return false
			}
			continue
		}
		res := w.r.sched.do(w, s.run, s.alone, txMode{})
		var next []step
		switch {
		case res.committed:
			w.settle(s.run)
		case res.failed == nil && !s.alone:
			next = []step{{run: s.run, alone: true}}
		case res.failed == nil:
			for _, it := range s.run {
				next = append(next, step{one: it})
			}
		default:
			k := slices.Index(s.run, res.failed)
			first := &handlerFailure{res.err} // settle reads its mark before it counts
			next = []step{{run: s.run[:k], alone: true}, {one: s.run[k], first: first}, {run: s.run[k+1:], alone: true}}
		}
		todo = append(next, todo...)
	}
	return true
}

// processedElsewhere reports whether the message's mark exists, waiting
// for a transaction that holds the key uncommitted (a parked re-drive, a
// member that lost its assignment) to end: it inserts the mark in a
// transaction that it rolls back.
func (r *Runtime) processedElsewhere(ctx context.Context, it *item) (bool, error) {
	tx, err := r.client.Tx(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	inserted, err := findMarks(ctx, tx, r.svc.Group, r.svc.Topic, []mark{{it.key, it.msg.Partition, it.msg.Offset, pendingOutcome}})
	if err != nil {
		return false, err
	}
	return !inserted[it.key], nil
}

// settle finishes the messages of a committed run (after-commit hooks,
// outcome line, metrics) and stores the offset after the last: all of them
// are of w's partition, in offset order.
func (w *worker) settle(items []*item) {
	for _, it := range items {
		it.attempts = 1
		w.r.committed(it)
		w.r.finish(it, nil)
	}
	w.ack(items[len(items)-1].km.TopicPartition.Offset)
}

// tx runs a transaction on w's behalf: the scheduler's leader.
func (w *worker) tx(items []*item, mode txMode) txResult {
	return w.r.runTx(w.ctx, items, mode)
}
