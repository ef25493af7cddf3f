package consumer

import (
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/lib/pq"
)

// Failure handling: the one table from a failure to what happens next
// (DESIGN.md, "Failure classes"). A failure is the message's own (a spec
// code, a value PostgreSQL refuses, a bug only this message triggers) or
// the world's (the database read-only, a privilege or a column missing, a
// connection lost): the first may end in the DLQ, the second never does —
// the partition waits until the cause is gone.

// unexpectedLimit is how many times a failure the runtime cannot classify
// is retried (with the infrastructure backoff) before the runtime asks
// whether it is the message's own (processOne).
const unexpectedLimit = 5

// probeLimit is how many of the messages behind an unexpectedly failing one
// may be probed for evidence that the failure is its own.
const probeLimit = 3

// ProcessingFailed is the code of a message whose handling failed
// unexpectedly unexpectedLimit times while other messages of its route
// succeeded: a bug that only this message triggers, most likely. Replay it
// from the DLQ after the fix.
var ProcessingFailed = Code{Name: "EVENT_PROCESSING_FAILED", Class: Invalid}

type action int

const (
	actRetry      action = iota + 1 // run again now
	actWait                         // run again after the delay, the partition held
	actPark                         // park for a retry-later
	actDeadLetter                   // publish to the DLQ
	actCheck                        // an unexpected failure repeated: the DLQ if it is the message's own, else wait
)

// verdict is what happens after a failed attempt.
type verdict struct {
	act   action
	code  Code          // the failure's code: the DLQ's, the park's, the metrics'
	delay time.Duration // before the next attempt
	// cause is set when the failure is the world's: one of
	// InfrastructureCauses. The partition is held until it is gone.
	cause string
}

// tally is what one message's failures so far add up to.
type tally struct {
	races      int // immediate re-runs after a deadlock or serialization failure
	retryNow   int // retry-now re-runs used
	step       int // retry-later retries used (index into the code's schedule)
	unexpected int // failures the runtime could not classify
	infra      *backoff.ExponentialBackOff
}

func newTally() *tally { return &tally{infra: newInfraBackoff()} }

// decide maps a failed attempt to what happens next. parking says whether
// a retry-later may be parked (else it waits in line).
func (r *Runtime) decide(err error, t *tally, parking bool) verdict {
	if c := lostRace(err); c != "" && t.races < lostRaceRetries {
		// A deadlock or serialization failure between concurrent
		// transactions (batches of two partitions touching the same rows):
		// the other transaction has gone on, so running again at once
		// usually succeeds. Backing off a second would stall the partition.
		t.races++
		return verdict{act: actRetry, code: Code{Name: c, Class: Infrastructure}}
	}
	code, known := classify(err, r.svc.InvalidCode)
	if known && code.Class != Infrastructure {
		switch code.Class {
		case RetryNow:
			if t.retryNow < r.svc.retryNow() {
				t.retryNow++
				return verdict{act: actRetry, code: code}
			}
		case RetryLater:
			if t.step < len(code.Backoff) {
				d := r.cfg.scale(code.Backoff[t.step])
				t.step++
				if parking {
					return verdict{act: actPark, code: code, delay: d}
				}
				return verdict{act: actWait, code: code, delay: d}
			}
		}
		return verdict{act: actDeadLetter, code: code}
	}
	d := r.cfg.scale(t.infra.NextBackOff())
	infra := Code{Name: code.Name, Class: Infrastructure}
	if cause := infraCause(err); cause != "" {
		return verdict{act: actWait, code: infra, delay: d, cause: cause}
	}
	if known { // a handler's own Infrastructure code: the world, by its word
		return verdict{act: actWait, code: infra, delay: d, cause: "systemic"}
	}
	t.unexpected++
	if t.unexpected >= unexpectedLimit {
		return verdict{act: actCheck, code: ProcessingFailed, delay: d}
	}
	return verdict{act: actWait, code: infra, delay: d}
}

// lostRaceRetries is how many deadlocks or serialization failures in a
// row are re-run at once before the infrastructure backoff applies.
const lostRaceRetries = 3

// lostRace returns the SQLSTATE of a deadlock (40P01) or serialization
// failure (40001), or "".
func lostRace(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && (pqErr.Code == "40001" || pqErr.Code == "40P01") {
		return string(pqErr.Code)
	}
	return ""
}

// processOne takes one message to a final state: committed, skipped,
// dead-lettered or parked. It reports false when the worker is stopping and
// the message was abandoned (it will be redelivered).
//
// firstErr, when set, is the failure of the message's first attempt, made
// in a batch that was rolled back.
func (w *worker) processOne(it *item, firstErr error) bool {
	r := w.r
	if it.decodeErr != nil {
		return w.deadLetter(it, EnvelopeInvalid, it.decodeErr, 1)
	}
	if !it.routed {
		r.m.unknownType.WithLabelValues(UnknownEventType).Inc()
		it.outcome = SkippedUnknownEventType
		w.finish(it, nil)
		w.ack(it.km.TopicPartition.Offset)
		return true
	}
	if p := it.msg.Problem(); p != nil {
		return w.deadLetter(it, r.svc.InvalidCode, r.svc.InvalidCode.Wrap(p), 1)
	}
	defer w.release() // the partition waits on nothing once the message is final (or abandoned)
	t := newTally()
	// Evidence that an unexpected failure is the message's own: another
	// message of its route committed after its first unexpected failure
	// (since) and before an attempt that failed again, or a message queued
	// behind it succeeded as a probe before such an attempt. An attempt that fails after the world
	// recovered is not evidence: it must fail again after the success.
	var since int64 // unix nanos
	evidence := false
	for {
		it.attempts++
		if t.unexpected > 0 && r.lastCommitOf(it.route) > since {
			evidence = true
		}
		err := firstErr
		if firstErr != nil {
			firstErr = nil
		} else {
			err = w.attempt(it)
		}
		if err == nil {
			r.committed(it)
			w.finish(it, nil)
			w.ack(it.km.TopicPartition.Offset)
			return true
		}
		if w.ctx.Err() != nil {
			return false
		}
		var he *handlerFailure
		if errors.As(err, &he) {
			// Marks go in last: a redelivered message's handler runs on
			// the state it left itself, and may fail on it. Its mark says
			// whether it was processed (or is being so right now).
			processed, perr := r.processedElsewhere(w.ctx, it)
			switch {
			case perr != nil:
				// Unknown whether it was processed: the handler's
				// failure cannot count yet; the mark's read failing
				// (the database, a pooler) decides the wait.
				err = perr
			case processed:
				it.outcome, it.st = SkippedDuplicate, nil
				w.finish(it, nil)
				w.ack(it.km.TopicPartition.Offset)
				return true
			default:
				err = he.err
			}
		}
		before := t.unexpected
		v := r.decide(err, t, !r.svc.Blocking && !it.inLine)
		if before == 0 && t.unexpected == 1 {
			since = time.Now().UnixNano()
		}
		log := r.logFor(it)
		switch v.act {
		case actRetry:
			r.m.retry(v.code.Class, v.code.Name)
			log.Info().Str("code", v.code.Name).Err(err).Int("attempts", it.attempts).Msg("retry-now")
			continue
		case actPark:
			ok, inLine := w.park(it, v.code, err, t.step, v.delay)
			if !inLine || !ok {
				return ok
			}
			continue // waited its delay; from now on it waits in line
		case actDeadLetter:
			return w.deadLetter(it, v.code, err, it.attempts)
		case actCheck:
			if evidence {
				log.Error().Err(err).Int("attempts", it.attempts).
					Msg("the failure is the message's own (other messages of its event type succeed): dead-lettering it")
				return w.deadLetter(it, v.code, err, it.attempts)
			}
			if w.probeUpcoming(it) {
				evidence = true
				log.Warn().Err(err).Int("attempts", it.attempts).Msg("a message behind it succeeds as a probe: one more attempt decides")
				continue
			}
			// Every message of the route meets it, as far as can be told:
			// the partition waits, as for an outage.
			v.cause, v.code = "systemic", Code{Class: Infrastructure}
		}
		r.m.retry(v.code.Class, v.code.Name)
		var ev = log.Info()
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
			w.hold(v.cause, err)
		}
		ev.Str("code", v.code.Name).Err(err).Dur("retry_in", v.delay).Int("attempts", it.attempts).Msg("retry-" + v.code.Class.String())
		if !w.sleep(v.delay) {
			return false
		}
	}
}

// probeUpcoming probes the messages queued behind it on its partition, of
// its route (up to probeLimit), and reports whether one succeeded: then
// the failure of it may be its own, which its next attempt decides. A
// bug that every message meets, or an outage the runtime does not know,
// must not dead-letter the stream, so without such evidence it waits.
func (w *worker) probeUpcoming(it *item) bool {
	for _, p := range w.upcoming(it, probeLimit) {
		if w.probe(p) {
			return true
		}
	}
	return false
}

// attempt runs it in a transaction of its own (a batch of one, taking a
// lane) and reports its failure, nil when it committed (it.outcome is
// then its outcome, SkippedDuplicate when its mark was there already).
func (w *worker) attempt(it *item) error {
	res := w.r.sched.do(w, []*item{it}, true, txMode{})
	switch {
	case res.committed:
		return nil
	case res.err == nil: // the drain budget spent while it waited
		if err := w.ctx.Err(); err != nil {
			return err
		}
		return errors.New("the transaction neither committed nor said why") // never acknowledged as done
	case res.failed == it:
		return &handlerFailure{res.err}
	}
	return res.err
}

// handlerFailure is a failure of a message's handler (or a Write
// blaming it), as opposed to its transaction's.
type handlerFailure struct{ err error }

func (e *handlerFailure) Error() string { return e.err.Error() }
func (e *handlerFailure) Unwrap() error { return e.err }

// probe runs a copy of a message in a transaction that is rolled back,
// and reports whether its handler succeeded and its transaction would
// have committed. A message whose mark exists (its handler does not run)
// or that ends with a code of its own proves nothing.
func (w *worker) probe(it *item) bool {
	cp := *it
	cp.attempt, cp.st, cp.log = nil, nil, nil
	res := w.r.sched.do(w, []*item{&cp}, true, txMode{dryRun: true})
	w.r.logFor(it).Debug().Err(res.err).Bool("would_commit", res.committed).Bool("duplicate", cp.marked).Msg("probe")
	return res.committed && !cp.marked
}

// lastCommitOf is when a message of route last committed with its
// handler's effect (unix nanos; 0: not since the process started):
// duplicates and dead letters do not count. It is the evidence processOne
// and the re-driver look for.
func (r *Runtime) lastCommitOf(route RouteInfo) int64 {
	if c := r.commits[route.EventType]; c != nil {
		return c.Load()
	}
	return 0
}

// committed records a message whose handler ran in a transaction that
// committed.
func (r *Runtime) committed(it *item) {
	if it.st == nil || !it.routed { // a duplicate: its handler did not run
		return
	}
	if c := r.commits[it.route.EventType]; c != nil {
		c.Store(time.Now().UnixNano())
	}
}
