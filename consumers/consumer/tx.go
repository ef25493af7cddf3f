package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/lib/pq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pin-platform/pin/ent"
)

// One transaction of messages (DESIGN.md, "One transaction path"): the
// only way the runtime applies a message's effects and writes its mark —
// Read, each route's Decide, the marks (one that is there already is a
// redelivery's: found, taken out, the rest runs again; marks.go) in
// Write's first statement or on their own before it, Write, the commit.

// txResult is how a transaction of messages ended.
type txResult struct {
	committed bool
	// failed is the message whose route failed (or that Read or Write
	// blamed, through FailMessage); nil when the failure belongs to none
	// (Read, Write, the marks, the commit) or nothing failed.
	failed *item
	err    error // the failure
	// metMarks: marks of its messages were found existing (redeliveries,
	// a message sent twice): its partitions may meet more (worker.mayMeetMarks).
	metMarks bool
}

// txMode says how a transaction ends, or where it runs.
type txMode struct {
	dryRun bool    // roll back instead of committing: a probe
	outer  *ent.Tx // run under a savepoint of this transaction (the re-driver's), which its owner commits
	// findMarks: a mark may exist (worker.mayMeetMarks, or a plain insert
	// of the marks met one): the marks are inserted with findMarks, not
	// insertMarks (marks.go).
	findMarks bool
}

// errRolledBack is the span status of a message whose transaction rolled
// back for another's failure.
var errRolledBack = errors.New("rolled back with its transaction")

// writeError is a Write failure that names no message: a
// constraint the prepared view could not see (another processor's row,
// written meanwhile) is a lost race, not the data's fault. A data
// exception (class 22) is the data's all the same: in a shared run the
// messages then go one at a time (runRouted), where the one whose value
// its column cannot hold fails alone and is invalid (classify).
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// rerun says why a transaction rolled back to be run again at once.
type rerun int

const (
	noRerun               rerun = iota
	rerunWithoutProcessed       // messages found processed: flagged (item.marked), left out
	rerunLostRace               // a deadlock, a serialization failure or a unique key taken meanwhile
	rerunFindingMarks           // the plain insert of the marks met one that exists: find which
)

// runTx runs items in one transaction (see above) under ctx, which its
// caller cancels when its drain budget is spent. Messages found processed
// already end as SkippedDuplicate: a plain insert of the marks that met
// one runs again once with findMarks, which finds them, and again without
// them; neither counts as a lost race. A transaction that lost a race (a
// deadlock, a serialization failure, a unique key another processor took
// meanwhile) runs again at once, lostRaceRetries times.
func (r *Runtime) runTx(ctx context.Context, items []*item, mode txMode) txResult {
	var shared trace.SpanContext
	if len(items) > 1 && !r.tracingOff { // shared by several messages: a span of its own, linked both ways
		var span trace.Span
		ctx, span = r.tracer.Start(ctx, "db.batch", trace.WithAttributes(attribute.Int("pin.batch_size", len(items))))
		defer span.End()
		for _, it := range items {
			span.AddLink(trace.LinkFromContext(it.ctx))
		}
		shared = span.SpanContext()
	}
	races, met := 0, false
	for {
		res, again := r.txOnce(ctx, items, mode, shared, races < lostRaceRetries)
		switch again {
		case noRerun:
			res.metMarks = met
			return res
		case rerunLostRace:
			races++
		case rerunFindingMarks:
			mode.findMarks, met = true, true
		case rerunWithoutProcessed:
			met = true
		}
	}
}

// txOnce is one transaction of runTx; again says why it rolled back to be
// run again.
func (r *Runtime) txOnce(ctx context.Context, items []*item, mode txMode, shared trace.SpanContext, rerace bool) (res txResult, again rerun) {
	run := make([]bool, len(items))
	seen := make(map[string]bool, len(items))
	var msgs []*Message
	for i, it := range items {
		it.outcome, it.st = "", nil
		if it.marked || seen[it.key] { // the same MessageId twice in one transaction: run once
			seen[it.key] = true
			it.outcome = SkippedDuplicate
			continue
		}
		seen[it.key] = true
		run[i] = true
		msgs = append(msgs, it.msg)
	}
	// Each message's attempt spans, linked to the transaction's, end with
	// it: committed, or rolled back with the failure of the message it
	// belongs to (the others: rolled back with it).
	for i, it := range items {
		if run[i] && !mode.dryRun { // a probe leaves no trace in its message's
			r.startAttempt(it, shared, len(msgs))
		}
	}
	defer func() {
		for _, it := range items {
			var cause error
			switch {
			case res.committed:
			case it == res.failed:
				cause = res.err
			default:
				cause = errRolledBack
			}
			r.endAttempt(it, cause)
		}
	}()
	if len(msgs) == 0 { // every message a duplicate: nothing to write
		return txResult{committed: true}, noRerun
	}
	clock := r.m.stageClock(!mode.dryRun)
	tx, err := r.beginTx(ctx, mode)
	if err != nil {
		return txResult{err: err}, noRerun
	}
	clock.done(stageBegin)
	fail := func(res txResult) (txResult, rerun) {
		r.rollbackTx(ctx, tx, mode)
		return res, noRerun
	}

	// hookFailed ends the transaction after its Read or Write failed: with
	// the message the failure names, as a lost race (race, its SQLSTATE)
	// to run again, or as the transaction's failure (own).
	hookFailed := func(err error, race string, own error) (txResult, rerun) {
		r.rollbackTx(ctx, tx, mode)
		if it, err := blamed(items, run, err); it != nil {
			return txResult{failed: it, err: err}, noRerun
		}
		if race != "" && rerace {
			return r.lostTheRace(race, err, len(items))
		}
		return txResult{err: own}, noRerun
	}
	var op opened
	if err := r.guarded("read", func() (err error) {
		op, err = r.svc.Handlers.open(ctx, tx, msgs)
		return err
	}); err != nil { // a lost race: Read's locks deadlocked with another transaction's
		return hookFailed(err, lostRace(err), fmt.Errorf("read: %w", err))
	}
	clock.done(stageRead)
	marks := make([]mark, 0, len(msgs))
	for i, it := range items {
		if !run[i] {
			continue
		}
		out, err := r.call(ctx, op, it)
		if err != nil {
			return fail(txResult{failed: it, err: err})
		}
		it.outcome = out
		marks = append(marks, mark{it.key, it.msg.Partition, it.msg.Offset, out})
	}
	clock.done(stageDecide)
	find := mode.findMarks || mode.dryRun || mode.outer != nil // a probe or a re-drive: rare, and likely to meet one
	// The marks, for Write's first statement (marks.go); nil: inserted.
	var toWrite *Marks
	if find {
		inserted, err := findMarks(ctx, tx, r.svc.Group, r.svc.Topic, marks)
		if err != nil {
			return r.marksFailed(ctx, tx, mode, err, false, rerace, len(items))
		}
		if len(inserted) < len(marks) {
			r.rollbackTx(ctx, tx, mode)
			for i, it := range items {
				if run[i] && !inserted[it.key] {
					it.marked = true
				}
			}
			r.m.batchReruns.WithLabelValues("processed-already").Inc()
			return txResult{}, rerunWithoutProcessed
		}
		clock.done(stageMarks)
	} else {
		toWrite = &Marks{group: r.svc.Group, topic: r.svc.Topic, marks: marks}
	}
	// Write last: the locks a service takes only there (crm's leads) are
	// held for its statements and the commit alone.
	if err := r.guarded("write", func() error { return op.write(ctx, toWrite) }); err != nil {
		if toWrite != nil && toWrite.inserted && onMarks(err) { // the marks' insert failed, not Write's own
			return r.marksFailed(ctx, tx, mode, fmt.Errorf("insert idempotency marks (in Write's first statement): %w", err), true, rerace, len(items))
		}
		// a lost race: a deadlock, or another processor's row written since Read
		return hookFailed(err, raceCode(err), &writeError{err})
	}
	if toWrite != nil && toWrite.unsent() { // a bug in Write: never commit its rows without their marks
		r.rollbackTx(ctx, tx, mode)
		r.log.Error().Err(errMarksUnsent).Int("batch", len(items)).Msg("write did not send its marks")
		return txResult{err: errMarksUnsent}, noRerun
	}
	clock.done(stageWrite)
	if toWrite != nil && !toWrite.inserted { // Write wrote nothing
		if err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, marks); err != nil {
			return r.marksFailed(ctx, tx, mode, err, true, rerace, len(items))
		}
		clock.done(stageMarks)
	}
	if mode.dryRun {
		r.rollbackTx(ctx, tx, mode)
		return txResult{committed: true}, noRerun // would have: the probe's answer
	}
	if err := r.commitTx(ctx, tx, mode); err != nil {
		return txResult{err: fmt.Errorf("commit: %w", err)}, noRerun
	}
	clock.done(stageCommit)
	r.m.batchSize.Observe(float64(len(items)))
	return txResult{committed: true}, noRerun
}

// marksFailed ends a transaction whose marks' insert failed (plain: not
// findMarks): a mark that exists runs it again with findMarks, which finds
// which; a lost race runs it again as it is.
func (r *Runtime) marksFailed(ctx context.Context, tx *ent.Tx, mode txMode, err error, plain, rerace bool, n int) (txResult, rerun) {
	r.rollbackTx(ctx, tx, mode)
	if plain && markTaken(err) {
		r.m.batchReruns.WithLabelValues("mark-exists").Inc()
		return txResult{}, rerunFindingMarks
	}
	if c := lostRace(err); c != "" && rerace {
		return r.lostTheRace(c, err, n)
	}
	return txResult{err: err}, noRerun
}

// blamed is the message of the transaction that a Read's or Write's
// failure names (FailMessage), with the failure; nil when it names none.
func blamed(items []*item, run []bool, err error) (*item, error) {
	var mf *messageFailure
	if !errors.As(err, &mf) {
		return nil, nil
	}
	for i, it := range items {
		if run[i] && it.msg == mf.msg {
			return it, mf.err
		}
	}
	return nil, nil
}

// savepoint is the savepoint a transaction runs under in another's.
const savepoint = "pin_messages"

func (r *Runtime) beginTx(ctx context.Context, mode txMode) (*ent.Tx, error) {
	if mode.outer == nil {
		return r.client.Tx(ctx)
	}
	if _, err := mode.outer.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
		return nil, err
	}
	return mode.outer, nil
}

func (r *Runtime) rollbackTx(ctx context.Context, tx *ent.Tx, mode txMode) {
	if mode.outer == nil {
		_ = tx.Rollback()
		return
	}
	_, _ = tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepoint)
}

func (r *Runtime) commitTx(ctx context.Context, tx *ent.Tx, mode txMode) error {
	if mode.outer == nil {
		return tx.Commit()
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+savepoint)
	return err
}

// raceCode is the SQLSTATE of a write that lost a race to another
// transaction (a deadlock, a serialization failure, a unique key taken
// since Read), "" for any other error.
func raceCode(err error) string {
	if c := lostRace(err); c != "" {
		return c
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && uniqueTaken(err) {
		return string(pqErr.Code)
	}
	return ""
}

// lostTheRace counts a transaction that lost a race (its rollback done)
// and asks for it to run again at once.
func (r *Runtime) lostTheRace(code string, err error, n int) (txResult, rerun) {
	r.m.retry(Infrastructure, code)
	r.m.batchReruns.WithLabelValues("lost-race").Inc()
	r.log.Info().Err(err).Int("batch", n).Str("code", code).Msg("transaction lost a race: again")
	return txResult{}, rerunLostRace
}

// markTaken reports a mark's key taken: a unique violation (23505) in
// processed_messages, whose only unique key is its primary key.
func markTaken(err error) bool {
	var pqErr *pq.Error
	return onMarks(err) && errors.As(err, &pqErr) && pqErr.Code == "23505"
}

// onMarks reports an error PostgreSQL raised on processed_messages.
func onMarks(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Table == "processed_messages"
}

// uniqueTaken reports a unique or exclusion constraint violated (23505,
// 23P01).
func uniqueTaken(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && (pqErr.Code == "23505" || pqErr.Code == "23P01")
}

// guarded runs a service's Read or Write. A panic becomes an error, logged with its stack: the
// transaction fails as on any hook's error (its messages run again in
// smaller transactions, where every failure is judged on its own) instead
// of the process crashing on the same batch after every restart.
func (r *Runtime) guarded(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg(what + " panicked")
			err = fmt.Errorf("%s panicked: %v", what, p)
		}
	}()
	return fn()
}

// call runs the message's route for one attempt, with a fresh
// per-attempt state on its message. A panic is turned into an error of the
// service's invalid code: the message goes to the DLQ (where it can be
// replayed after a fix) instead of crashing the process or stalling the
// partition.
func (r *Runtime) call(ctx context.Context, op opened, it *item) (out Outcome, err error) {
	it.st = &state{}
	it.msg.attempt = it.st
	defer func() {
		if p := recover(); p != nil {
			r.logFor(it).Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("handler panicked")
			err = r.svc.InvalidCode.Errorf("handler panicked: %v", p)
		}
	}()
	ctx = handlerContext(ctx, it)
	ctx = r.logFor(it).WithContext(ctx)
	return op.decide(ctx, it.routeIdx, it.msg)
}
