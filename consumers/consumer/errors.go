package consumer

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/lib/pq"

	"github.com/pin-platform/consumers/ent"
)

// Class says how the runtime treats a failed message. One table (policy in
// this file) maps each class to its behaviour; handlers only pick the class
// through the Code they return.
type Class int

const (
	// Invalid: the message violates the contract. Dead-lettered at once,
	// never retried.
	Invalid Class = iota + 1
	// RetryNow: a race lost (optimistic lock, a row not visible yet). The
	// message is re-run in a fresh transaction right away, Policy.RetryNow
	// times, then dead-lettered.
	RetryNow
	// RetryLater: a precondition that another component will satisfy later
	// (the chat or lead does not exist yet). The message is parked in
	// PostgreSQL and re-driven on the code's backoff schedule without holding
	// its partition; dead-lettered when the schedule is spent.
	RetryLater
	// Infrastructure: PostgreSQL or Kafka unavailable. Retried forever with
	// exponential backoff while the partition is paused; never dead-lettered.
	Infrastructure
)

func (c Class) String() string {
	switch c {
	case Invalid:
		return "invalid"
	case RetryNow:
		return "retry-now"
	case RetryLater:
		return "retry-later"
	case Infrastructure:
		return "infrastructure"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Code is an error code of a spec together with its class. Codes are values:
// each service declares its own as package variables.
type Code struct {
	Name  string // e.g. "REWARDS_BOND_EVENT_INVALID"
	Class Class
	// Backoff is the RetryLater schedule: the delay before each retry, the
	// first attempt not counted. len(Backoff) retries, then the DLQ.
	Backoff []time.Duration
}

// EnvelopeInvalid is the code of a message whose envelope cannot be read.
var EnvelopeInvalid = Code{Name: "EVENT_ENVELOPE_INVALID", Class: Invalid}

// Errorf returns an *Error of code c.
func (c Code) Errorf(format string, args ...any) error {
	return &Error{Code: c, Err: fmt.Errorf(format, args...)}
}

// Wrap returns an *Error of code c around err.
func (c Code) Wrap(err error) error { return &Error{Code: c, Err: err} }

// Error is a failure with a spec code; its class decides what the runtime
// does with the message.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string { return e.Code.Name + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Is matches another *Error of the same code name, so that
// errors.Is(err, code.Errorf("")) style checks work in tests.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code.Name == e.Code.Name
}

// CodeOf returns the code of err, if it carries one.
func CodeOf(err error) (Code, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code, true
	}
	return Code{}, false
}

// classify decides the class of any error a handler or the runtime's own
// database work returned. invalid is the service's own invalid code, used for
// data errors PostgreSQL reports (a value the column cannot hold): retrying
// such a message cannot succeed, so it goes to the DLQ instead of stalling
// its partition.
func classify(err error, invalid Code) (Code, bool) {
	if c, ok := CodeOf(err); ok {
		return c, true
	}
	if ent.IsValidationError(err) { // a value ent's validators refuse
		return invalid, true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code.Class() {
		case "22", "23": // data exception, integrity constraint violation
			return invalid, true
		}
	}
	return Code{}, false
}

// isInfrastructure reports errors that say the database or the network is
// unavailable. Everything the runtime cannot classify is treated the same
// way (retry with backoff, never drop), but these are expected and logged at
// a lower level.
func isInfrastructure(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if resultTypeChanged(err) { // a column's type altered: the retry prepares anew (stmtcache.go)
		return true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code.Class() {
		case "08", "57", "53", "40": // connection, operator intervention, resources, tx rollback
			return true
		}
	}
	return false
}
