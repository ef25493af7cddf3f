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
	retryNow   int   // retry-now re-runs used
	step       int   // retry-later retries used (index into the code's schedule)
	unexpected int   // failures the runtime could not classify
	since      int64 // unix nanos of the first of them (settle's evidence)
	evidence   bool  // the failure is the message's own (settle)
	infra      *backoff.ExponentialBackOff
}

func newTally() *tally { return &tally{infra: newInfraBackoff()} }

// decide maps a failed attempt to what happens next. parking says whether
// a retry-later may be parked (else it waits in line).
func (r *Runtime) decide(err error, t *tally, parking bool) verdict {
	// A deadlock or serialization failure reaches here only after runTx
	// ran its transaction again lostRaceRetries times: from here on it is
	// the world's (class 40), with its backoff.
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
	if t.unexpected == 1 {
		t.since = time.Now().UnixNano()
	}
	if t.unexpected >= unexpectedLimit {
		return verdict{act: actCheck, code: ProcessingFailed, delay: d}
	}
	return verdict{act: actWait, code: infra, delay: d}
}

// lostRaceRetries is how many times runTx runs a transaction again at once
// after it lost a race (a deadlock, a serialization failure, a unique key
// taken meanwhile) before the failure is the world's, with its backoff.
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
