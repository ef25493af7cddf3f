package consumer

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/lib/pq"

	"github.com/pin-platform/pin/ent"
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
	var we *writeError
	if errors.As(err, &pqErr) {
		switch pqErr.Code.Class() {
		case "22": // data exception: a value its column cannot hold, the data's wherever it was written
			return invalid, true
		case "23": // integrity constraint violation
			// The set-based Write's is no evidence against the data: a
			// row of another processor's, written since Read.
			if !errors.As(err, &we) {
				return invalid, true
			}
		}
	}
	return Code{}, false
}

// Causes of a failure that is the world's, not the message's: the values of
// the cause label of pin_consumer_infrastructure_errors_total, a closed set.
// Where PostgreSQL reported the failure, the cause is its SQLSTATE class.
var InfrastructureCauses = []string{
	"08",         // connection exception
	"0A",         // read-write refused during recovery (a hot standby), a cached plan's result type changed
	"25",         // read-only transaction (a demoted primary, a standby), but not 25P02
	"28",         // authentication
	"3D",         // the database does not exist
	"3F",         // a schema does not exist
	"40",         // deadlock or serialization failure, after the immediate re-runs
	"42",         // a missing privilege, table, column, function or type (42501, 42P01, 42703, 42883, 42704)
	"53",         // insufficient resources: too many connections, disk full, out of memory
	"54",         // 54000: the NOTIFY queue is full
	"55",         // 55P03: lock_timeout
	"57",         // operator intervention: admin shutdown, statement_timeout, cannot connect now
	"58",         // system error: I/O
	"XX",         // internal error
	"connection", // the driver lost or could not open its connection (not a *pq.Error)
	"kafka",      // the DLQ could not be published
	"pooler",     // a prepared statement missing or taken on the server (26000, 42P05, a Bind refused): a pooler in transaction mode (stmtcache.go)
	"systemic",   // an unexpected failure that the other messages meet too (see processOne)
}

// infraCause returns the cause of an error that says the database or the
// network is unavailable or not as the binary expects — a failure any
// message would meet — or "" when it may be the message's own. The
// message behind such a failure is retried until the cause is gone, never
// dead-lettered (see decide).
func infraCause(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return sqlstateCause(pqErr)
	}
	if connectionLost(err) {
		return "connection"
	}
	return ""
}

// sqlstateCause is infraCause for an error PostgreSQL reported.
func sqlstateCause(e *pq.Error) string {
	if statementLost(e) {
		return "pooler"
	}
	class := string(e.Code.Class())
	switch class {
	case "08", "28", "3D", "3F", "40", "53", "57", "58", "XX":
		return class
	case "25":
		// 25P02 follows an earlier failure of the same transaction: its
		// cause is that failure, which may be the message's own.
		if e.Code != "25P02" {
			return class
		}
	case "42":
		switch e.Code {
		case "42501", "42P01", "42703", "42883", "42704": // privilege, table, column, function, type
			return class
		}
	case "54":
		// 54000 is any program limit: only the NOTIFY queue's is the world's;
		// an index row or a row too big for this message's data is its own.
		if e.Code == "54000" && strings.Contains(e.Message, "notifications in the NOTIFY queue") {
			return class
		}
	case "55":
		if e.Code == "55P03" { // lock_timeout
			return class
		}
	case "0A":
		// A hot standby refuses BEGIN READ WRITE with 0A000 "cannot set
		// transaction read-write mode during recovery"; a prepared
		// statement whose result type changed fails once (stmtcache.go).
		if resultTypeChanged(e) || strings.Contains(e.Message, "during recovery") {
			return class
		}
	}
	return ""
}

// connectionLost reports an error of the driver or the network that is not
// a *pq.Error: a connection refused, reset or closed, a timeout, or lib/pq
// finding the protocol stream broken (its plain "pq: …" errors, but for the
// few that a statement or the code itself causes).
func connectionLost(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, pq.ErrInFailedTransaction) || errors.Is(err, pq.ErrNotSupported) {
		return false
	}
	leaf := err
	for u := errors.Unwrap(leaf); u != nil; u = errors.Unwrap(leaf) {
		leaf = u
	}
	msg := leaf.Error()
	if !strings.HasPrefix(msg, "pq: ") {
		return false
	}
	for _, own := range []string{"parameters but PostgreSQL only supports", "there is already a query being processed"} {
		if strings.Contains(msg, own) {
			return false
		}
	}
	return true
}
