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
	w.items = items // the messages behind a failing one may be probed (probeUpcoming)
	defer func() { w.items = nil }()
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

// runRouted processes a run of routable messages: first in a transaction
// that other partitions' runs may share. If the transaction does not
// commit, a handler's failure (or a Write's, through FailMessage)
// is its message's first attempt (failedAt) and the rest runs on; after
// any other failure (another run's, or none's) the run goes on alone.
func (w *worker) runRouted(items []*item) bool {
	res := w.r.sched.do(w, items, false, txMode{})
	switch {
	case res.committed:
		w.settle(items)
		return true
	case res.failed != nil:
		k := slices.Index(items, res.failed)
		return w.failedAt(items, k, res.err) && w.runAlone(items[k+1:])
	}
	return w.runAlone(items)
}

// runAlone is runRouted in transactions of w's partition alone. When a
// handler fails, the transaction is rolled back; the messages before it
// run again (they did not fail), the failing one continues on its own with
// that failure as its first attempt, and the rest go on as a new batch. A
// failure that belongs to no message (Read, a write, the marks, the
// commit) runs the messages one at a time, where each failure is told
// apart; a lone message is processOne's.
func (w *worker) runAlone(items []*item) bool {
	for len(items) > 0 {
		if len(items) == 1 {
			return w.processOne(items[0], nil)
		}
		res := w.r.sched.do(w, items, true, txMode{})
		switch {
		case res.committed:
			w.settle(items)
			return true
		case res.failed == nil:
			for _, it := range items {
				if !w.processOne(it, nil) {
					return false
				}
			}
			return true
		}
		k := slices.Index(items, res.failed)
		if !w.failedAt(items, k, res.err) {
			return false
		}
		items = items[k+1:]
	}
	return true
}

// failedAt goes on after the handler of items[k] failed with err in a
// transaction that was rolled back: the messages before it run again (they
// did not fail), then items[k] on its own, with that failure as its first
// attempt.
func (w *worker) failedAt(items []*item, k int, err error) bool {
	return w.runAlone(items[:k]) && w.processOne(items[k], w.firstAttempt(items[k], err))
}

// firstAttempt is what a handler's failure in a batch counts as for its
// message: its first attempt — unless the message was processed already
// (marks are inserted last, so the handler of a redelivered message ran on
// the state it had itself left) or is being processed by another
// transaction right now. Then, and when that cannot be told, nil: the
// message runs again on its own, where its mark decides.
func (w *worker) firstAttempt(it *item, err error) error {
	if processed, perr := w.r.processedElsewhere(w.ctx, it); perr != nil || processed {
		return nil
	}
	return err
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
	inserted, err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, []mark{{it.key, it.msg.Partition, it.msg.Offset, pendingOutcome}})
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
		w.finish(it, nil)
	}
	w.ack(items[len(items)-1].km.TopicPartition.Offset)
}

// tx runs a transaction on w's behalf: the scheduler's leader.
func (w *worker) tx(items []*item, mode txMode) txResult {
	return w.r.runTx(w.ctx, items, mode)
}
