package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/processedmessage"
)

// The one attempt loop (DESIGN.md, "One attempt loop"): a message whose
// transaction failed is attempted alone until it reaches a final state,
// held by its partition or by its parked row.

// processOne takes one message of w's partition to a final state:
// committed, skipped, dead-lettered or parked. It reports false when the
// worker is stopping and the message was abandoned (it will be
// redelivered). firstErr, when set, is the failure of the message's first
// attempt, made in a transaction that was rolled back.
func (w *worker) processOne(it *item, firstErr error) bool {
	r := w.r
	if it.decodeErr != nil {
		return w.deadLetter(it, EnvelopeInvalid, it.decodeErr, 1)
	}
	if !it.routed {
		r.m.unknownType.WithLabelValues(UnknownEventType).Inc()
		it.outcome = SkippedUnknownEventType
		w.r.finish(it, nil)
		w.ack(it.km.TopicPartition.Offset)
		return true
	}
	if p := it.msg.Problem(); p != nil {
		return w.deadLetter(it, r.svc.InvalidCode, r.svc.InvalidCode.Wrap(p), 1)
	}
	defer w.release() // the partition waits on nothing once the message is final (or abandoned)
	return r.settle(inPartition{w}, it, newTally(), firstErr)
}

// holder is what holds a failing message between its attempts.
type holder interface {
	attempt(it *item) error           // one attempt alone: nil, or its failure (*handlerFailure: its own)
	processed(it *item) (bool, error) // its mark exists: it failed on what a redelivered copy left
	parks(it *item) bool              // a retry-later may park it (else it waits in line)
	probe(it *item) bool              // a message behind it, of its route, would commit
	stopped() bool                    // it is abandoned (redelivered, or re-driven later)

	// The ends; each reports false when the message was abandoned.
	done(it *item) bool // committed (recorded for the evidence), or a duplicate
	park(it *item, v verdict, step int, cause error) (ok, again bool)
	deadLetter(it *item, code Code, cause error) bool
	// wait waits out a failure not (yet) the message's own: again, or the
	// holder keeps the message for later.
	wait(it *item, v verdict, cause error, t *tally) (again, ok bool)
}

// settle attempts it until a final state, its first attempt's failure
// first when set (a failure in a shared transaction counts as one), with
// the failures before tallied in t. An unexpected failure counts as the
// message's own only on evidence (DESIGN.md, "Whose failure is it"):
// another message of its route committed since its first unexpected
// failure, or a message queued behind it succeeds as a probe.
func (r *Runtime) settle(h holder, it *item, t *tally, first error) bool {
	for {
		it.attempts++
		if t.unexpected > 0 && r.lastCommitOf(it.route) > t.since {
			t.evidence = true
		}
		err := first
		first = nil
		if err == nil {
			if err = h.attempt(it); err == nil {
				return h.done(it)
			}
		}
		if h.stopped() {
			return false
		}
		var hf *handlerFailure
		if errors.As(err, &hf) {
			// The marks go in after the routes: a redelivered message's route runs on
			// the state it left itself, and may fail on it. Its mark says
			// whether it was processed (or is being so right now); until
			// that can be read, its failure cannot count.
			processed, perr := h.processed(it)
			switch {
			case perr != nil:
				err = perr
			case processed:
				it.outcome, it.st = SkippedDuplicate, nil
				return h.done(it)
			default:
				err = hf.err
			}
		}
		v := r.decide(err, t, h.parks(it))
		log := r.logFor(it)
		switch v.act {
		case actRetry:
			r.m.retry(v.code.Class, v.code.Name)
			log.Info().Str("code", v.code.Name).Err(err).Int("attempts", it.attempts).Msg("retry-now")
			continue
		case actPark:
			ok, again := h.park(it, v, t.step, err)
			if ok && again {
				continue // waited its delay; from now on it waits in line
			}
			return ok
		case actDeadLetter:
			return h.deadLetter(it, v.code, err)
		case actCheck:
			if t.evidence {
				log.Error().Err(err).Int("attempts", it.attempts).
					Msg("the failure is the message's own (other messages of its event type succeed): dead-lettering it")
				return h.deadLetter(it, v.code, err)
			}
			if h.probe(it) {
				t.evidence = true
				log.Warn().Err(err).Int("attempts", it.attempts).Msg("a message behind it succeeds as a probe: one more attempt decides")
				continue
			}
			// Every message of the route meets it, as far as can be told:
			// it waits, as for an outage.
			v.cause, v.code = "systemic", Code{Class: Infrastructure}
		}
		r.m.retry(v.code.Class, v.code.Name)
		ev := log.Info()
		switch {
		case v.cause == "systemic":
			ev = log.Error().Str("cause", v.cause) // a bug every message meets, or an outage not known to the runtime
		case v.cause != "":
			ev = log.Warn().Str("cause", v.cause)
		case v.code.Class == Infrastructure: // unexpected: may be a bug of this message
			ev = log.Error()
		}
		if v.cause != "" {
			r.m.infra(v.cause)
		}
		ev.Str("code", v.code.Name).Err(err).Dur("retry_in", v.delay).Int("attempts", it.attempts).Msg("retry-" + v.code.Class.String())
		if again, ok := h.wait(it, v, err, t); !again {
			return ok
		}
	}
}

// attemptError is what a transaction of it alone reports as its failure:
// nil when it committed.
func attemptError(ctx context.Context, it *item, res txResult) error {
	switch {
	case res.committed:
		return nil
	case res.err == nil: // the drain budget spent while it waited
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("the transaction neither committed nor said why") // never acknowledged as done
	case res.failed == it:
		return &handlerFailure{res.err}
	}
	return res.err
}

// handlerFailure is a failure of a message's route (or of a Read or Write
// naming it), as opposed to its transaction's.
type handlerFailure struct{ err error }

func (e *handlerFailure) Error() string { return e.err.Error() }
func (e *handlerFailure) Unwrap() error { return e.err }

// ended is the one epilogue of a message that leaves its attempts for the
// DLQ or a parked row: its attempt rolled back, so its log fields stay and
// its hooks go; its failure carries the code it ends with.
func (r *Runtime) ended(it *item, outcome Outcome, code Code, cause error) {
	it.outcome = outcome
	it.dropHooks()
	if c, ok := CodeOf(cause); !ok || c.Name != code.Name {
		cause = &Error{Code: code, Err: cause}
	}
	r.finish(it, cause)
}

// The partition as holder: the worker retries the message in line, its
// partition waiting (paused when the failure is the world's).
type inPartition struct{ w *worker }

func (p inPartition) attempt(it *item) error {
	return attemptError(p.w.ctx, it, p.w.r.sched.do(p.w, []*item{it}, true, txMode{}))
}

func (p inPartition) processed(it *item) (bool, error) {
	return p.w.r.processedElsewhere(p.w.ctx, it)
}

func (p inPartition) parks(it *item) bool { return !p.w.r.svc.Blocking && !it.inLine }
func (p inPartition) stopped() bool       { return p.w.ctx.Err() != nil }

// probe runs up to probeLimit messages queued behind it on its partition,
// of its route, each as a copy in a transaction that is rolled back, and
// reports whether one would have committed. One whose mark exists (its
// route does not run) or that fails with a code of its own proves nothing.
func (p inPartition) probe(it *item) bool {
	for _, c := range p.w.upcoming(it, probeLimit) {
		cp := *c
		cp.attempt, cp.st, cp.log = nil, nil, nil
		res := p.w.r.sched.do(p.w, []*item{&cp}, true, txMode{dryRun: true})
		p.w.r.logFor(c).Debug().Err(res.err).Bool("would_commit", res.committed).Bool("duplicate", cp.marked).Msg("probe")
		if res.committed && !cp.marked {
			return true
		}
	}
	return false
}

func (p inPartition) done(it *item) bool {
	p.w.r.committed(it)
	p.w.r.finish(it, nil)
	p.w.ack(it.km.TopicPartition.Offset)
	return true
}

func (p inPartition) park(it *item, v verdict, step int, cause error) (ok, again bool) {
	return p.w.park(it, v.code, cause, step, v.delay)
}

func (p inPartition) deadLetter(it *item, code Code, cause error) bool {
	return p.w.deadLetter(it, code, cause, it.attempts)
}

func (p inPartition) wait(_ *item, v verdict, cause error, _ *tally) (again, ok bool) {
	if v.cause != "" {
		p.w.hold(v.cause, cause)
	}
	ok = p.w.sleep(v.delay)
	return ok, ok
}

// The parked row as holder: the re-driver attempts the message under a
// savepoint of the transaction that holds its row locked, so that its
// effect and the row's removal commit together; a failure it must wait
// out pushes the row back instead.
type inRow struct {
	r   *Runtime
	ctx context.Context
	tx  *ent.Tx
	row *ent.ParkedMessage
	// err is the failure the row was pushed back for: the re-driver
	// backs off on it.
	err error
}

func (p *inRow) attempt(it *item) error {
	return attemptError(p.ctx, it, p.r.runTx(p.ctx, []*item{it}, txMode{outer: p.tx}))
}

// processed reads the mark in the re-driver's transaction (waiting for an
// uncommitted holder in another while this one holds the row could deadlock
// unseen); a holder that commits later is found by the next attempt.
func (p *inRow) processed(it *item) (bool, error) {
	return p.tx.ProcessedMessage.Query().Where(processedmessage.ID(it.key)).Exist(p.ctx)
}

func (p *inRow) parks(*item) bool { return true }
func (p *inRow) probe(*item) bool { return false } // nothing is queued behind a parked row
func (p *inRow) stopped() bool    { return p.ctx.Err() != nil }

// done removes the row with the message's effect (or, for a duplicate,
// alone).
func (p *inRow) done(it *item) bool {
	if err := p.tx.ParkedMessage.DeleteOne(p.row).Exec(p.ctx); err != nil {
		return p.pushBack(it, p.row.UnexpectedFailures, err)
	}
	if err := p.tx.Commit(); err != nil {
		return p.pushBack(it, p.row.UnexpectedFailures, err)
	}
	p.r.committed(it)
	p.r.finish(it, nil)
	return true
}

// unroutedRecheck is how long a parked row of an EventType this release
// does not route waits before any member looks at it again (times
// RETRY_TIME_SCALE).
const unroutedRecheck = time.Minute

// leaveForAnotherRelease puts back the row of a message whose EventType no
// route of this release takes: a release that routes it parked it (a new
// one during a rolling update, or one rolled back), and only such a
// release can finish it. Deleting it would lose it (its offset was
// committed when it was parked); dead-lettering it would send a valid
// message to the DLQ. Its attempts and schedule are not touched: this was
// not an attempt.
func (p *inRow) leaveForAnotherRelease(it *item) {
	_ = p.tx.Rollback()
	r := p.r
	next := time.Now().Add(r.cfg.scale(unroutedRecheck))
	r.logFor(it).Warn().Time("next_attempt_at", next).
		Msg("parked message of an EventType this release does not route: left for a release that does")
	if err := r.client.ParkedMessage.UpdateOneID(p.row.ID).
		SetNextAttemptAt(next).
		SetUpdatedAt(time.Now()).
		Exec(p.ctx); err != nil {
		p.err = err
	}
}

// park moves the row to its next retry-later step.
func (p *inRow) park(it *item, v verdict, step int, cause error) (ok, again bool) {
	next := time.Now().Add(v.delay)
	if err := p.tx.ParkedMessage.UpdateOne(p.row).
		SetAttempts(it.attempts).
		SetScheduleStep(step).
		SetNextAttemptAt(next).
		SetErrorCode(v.code.Name).
		SetReason(cleanText(cause.Error())).
		SetUpdatedAt(time.Now()).
		Exec(p.ctx); err != nil {
		return p.pushBack(it, p.row.UnexpectedFailures, err), false
	}
	if err := p.tx.Commit(); err != nil {
		return p.pushBack(it, p.row.UnexpectedFailures, err), false
	}
	p.r.m.retry(RetryLater, v.code.Name)
	p.r.logFor(it).Info().Str("code", v.code.Name).Str("reason", cause.Error()).
		Int("attempts", it.attempts).Time("next_attempt_at", next).Msg("retry-later")
	return true, false
}

// deadLetter publishes the parked message to the DLQ, then deletes its
// row; a failed delete dead-letters it again later (DLQ records are at
// least once).
func (p *inRow) deadLetter(it *item, code Code, cause error) bool {
	r := p.r
	if it.attempts < p.row.Attempts {
		it.attempts = p.row.Attempts
	}
	if err := r.dlq.send(p.ctx, it.km, code, r.redact(cause.Error()), it.attempts); err != nil {
		r.m.infra("kafka")
		return p.pushBack(it, p.row.UnexpectedFailures, err)
	}
	if err := p.tx.ParkedMessage.DeleteOne(p.row).Exec(p.ctx); err != nil {
		p.err = err
		return false
	}
	if err := p.tx.Commit(); err != nil {
		p.err = err
		return false
	}
	r.m.deadLettered(code.Name)
	r.ended(it, DeadLettered, code, cause)
	return true
}

// wait pushes the row back: the world's failure, or one not known yet to
// be the message's own, counted on the row.
func (p *inRow) wait(it *item, _ verdict, cause error, t *tally) (again, ok bool) {
	return false, p.pushBack(it, t.unexpected, cause)
}

// pushBack rolls the attempt back and pushes the row back (postpone),
// with unexpected, its count of unexpected failures.
func (p *inRow) pushBack(it *item, unexpected int, cause error) bool {
	_ = p.tx.Rollback()
	p.r.postpone(p.ctx, p.row, it.attempts, unexpected, cause)
	p.err = cause
	return true
}

// lastCommitOf is when a message of route last committed with its
// route's effect (unix nanos; 0: not since the process started):
// duplicates and dead letters do not count. It is settle's evidence.
func (r *Runtime) lastCommitOf(route RouteInfo) int64 {
	if c := r.commits[route.EventType]; c != nil {
		return c.Load()
	}
	return 0
}

// committed records a message whose route ran in a transaction that
// committed.
func (r *Runtime) committed(it *item) {
	if it.st == nil || !it.routed { // a duplicate: its route did not run
		return
	}
	if c := r.commits[it.route.EventType]; c != nil {
		c.Store(time.Now().UnixNano())
	}
}
