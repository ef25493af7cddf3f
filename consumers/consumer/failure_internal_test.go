package consumer

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// TestInfraCauseTellsTheWorldsFailuresFromTheMessages is the classification
// table: every failure that any message would meet has a cause (retried
// until it is gone, never dead-lettered); the others have none.
func TestInfraCauseTellsTheWorldsFailuresFromTheMessages(t *testing.T) {
	pqe := func(code, msg string) error {
		return fmt.Errorf("insert lead event: %w", &pq.Error{Code: pqerror.Code(code), Message: msg})
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"read-only transaction (a standby, a demoted primary)", pqe("25006", "cannot execute INSERT in a read-only transaction"), "25"},
		{"BEGIN READ WRITE on a hot standby", pqe("0A000", "cannot set transaction read-write mode during recovery"), "0A"},
		{"cached plan's result type changed", &pq.Error{Code: "0A000", Routine: "RevalidateCachedQuery", Message: "cached plan must not change result type"}, "0A"},
		{"missing privilege", pqe("42501", "permission denied for table lead_events"), "42"},
		{"missing table (binary ahead of the schema)", pqe("42P01", `relation "x" does not exist`), "42"},
		{"missing column", pqe("42703", `column "x" does not exist`), "42"},
		{"missing function", pqe("42883", "function x() does not exist"), "42"},
		{"missing type", pqe("42704", `type "x" does not exist`), "42"},
		{"NOTIFY queue full", pqe("54000", "too many notifications in the NOTIFY queue"), "54"},
		{"lock_timeout", pqe("55P03", "canceling statement due to lock timeout"), "55"},
		{"too many connections", pqe("53300", "sorry, too many clients already"), "53"},
		{"admin shutdown", pqe("57P01", "terminating connection due to administrator command"), "57"},
		{"statement_timeout", pqe("57014", "canceling statement due to statement timeout"), "57"},
		{"I/O error", pqe("58030", "could not write to file"), "58"},
		{"internal error", pqe("XX000", "unexpected"), "XX"},
		{"connection failure", pqe("08006", "connection failure"), "08"},
		{"a prepared statement missing (a pooler in transaction mode)", pqe("26000", `prepared statement "-9223372036854775807" does not exist`), "pooler"},
		{"a prepared statement's name taken (a pooler in transaction mode)", pqe("42P05", `prepared statement "-9223372036854775807" already exists`), "pooler"},
		{"a Bind refused for its parameter count (a pooler in transaction mode)", pqe("08P01", `bind message supplies 3 parameters, but prepared statement "-9223372036854775807" requires 2`), "pooler"},
		{"password authentication failed", pqe("28P01", "password authentication failed"), "28"},
		{"database does not exist", pqe("3D000", `database "x" does not exist`), "3D"},
		{"schema does not exist", pqe("3F000", `schema "x" does not exist`), "3F"},
		{"deadlock (after its immediate re-runs)", pqe("40P01", "deadlock detected"), "40"},
		{"driver: bad connection", fmt.Errorf("commit: %w", driver.ErrBadConn), "connection"},
		{"connection done", sql.ErrConnDone, "connection"},
		{"EOF", fmt.Errorf("read: %w", io.EOF), "connection"},
		{"unexpected EOF", io.ErrUnexpectedEOF, "connection"},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, "connection"},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "connection"},
		{"deadline", context.DeadlineExceeded, "connection"},
		{"lib/pq's broken protocol stream", fmt.Errorf("query: %w", errors.New(`pq: unexpected message 'Z' in simple query execution`)), "connection"},

		{"a value the column cannot hold: the message's", pqe("22001", "value too long"), ""},
		{"an index row too big for this message's data: its own", pqe("54000", "index row size 3000 exceeds btree version 4 maximum 2704 for index \"x\""), ""},
		{"a NUL in text: the message's", pqe("22021", "invalid byte sequence"), ""},
		{"a constraint: the message's", pqe("23505", "duplicate key"), ""},
		{"syntax error: a bug, maybe every message's (evidence decides)", pqe("42601", "syntax error"), ""},
		{"in failed transaction: follows another failure", pqe("25P02", "current transaction is aborted"), ""},
		{"a raise from a trigger", pqe("P0001", "boom"), ""},
		{"other feature not supported", pqe("0A000", "FOR UPDATE is not allowed with aggregate functions"), ""},
		{"too many parameters: this batch's", errors.New("pq: got 70000 parameters but PostgreSQL only supports 65535 parameters"), ""},
		{"a failed transaction in lib/pq", pq.ErrInFailedTransaction, ""},
		{"a handler's bug", errors.New("unexpected action"), ""},
		{"tx done", sql.ErrTxDone, ""},
		{"other protocol violation: the connection's", pqe("08P01", "invalid frontend message type 0"), "08"},
		{"the unnamed statement's parameter count: this statement's", pqe("08P01", `bind message supplies 3 parameters, but prepared statement "" requires 0`), "08"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := infraCause(c.err); got != c.want {
				t.Fatalf("infraCause(%v) = %q, want %q", c.err, got, c.want)
			}
			if c.want == "" {
				return
			}
			for _, cause := range InfrastructureCauses {
				if cause == c.want {
					return
				}
			}
			t.Fatalf("cause %q is not one of InfrastructureCauses (the metric's label set)", c.want)
		})
	}
}

// A lost race reaches decide only once runTx ran its transaction again
// lostRaceRetries times: it is the world's at once (class 40), with the
// backoff, not re-run again (which would multiply runTx's re-runs).
func TestDecideWaitsOnALostRaceThatOutlastedItsReruns(t *testing.T) {
	r := &Runtime{cfg: Config{RetryTimeScale: 1}, svc: Service{InvalidCode: Code{Name: "X_INVALID", Class: Invalid}}}
	deadlock := &pq.Error{Code: "40P01", Message: "deadlock detected"}
	tl := newTally()
	for i := 0; i < 2; i++ {
		if v := r.decide(deadlock, tl, true); v.act != actWait || v.delay <= 0 || v.cause != "40" {
			t.Fatalf("decision %d: %+v, want the infrastructure backoff with cause 40", i, v)
		}
	}
}

func TestDecideFollowsTheClassTable(t *testing.T) {
	r := &Runtime{cfg: Config{RetryTimeScale: 1}, svc: Service{InvalidCode: Code{Name: "X_INVALID", Class: Invalid}}}
	later := Code{Name: "X_LATER", Class: RetryLater, Backoff: []time.Duration{time.Second, 2 * time.Second}}
	now := Code{Name: "X_NOW", Class: RetryNow}
	waits := func(n int) []action {
		a := make([]action, n)
		for i := range a {
			a[i] = actWait
		}
		return a
	}
	cases := []struct {
		name    string
		err     error
		parking bool
		want    []action
	}{
		{"invalid: DLQ at once", Code{Name: "X_BAD", Class: Invalid}.Errorf("x"), true, []action{actDeadLetter}},
		{"data error: invalid", &pq.Error{Code: "22001"}, true, []action{actDeadLetter}},
		{"data error in a set-based Write, the message alone: invalid", &writeError{fmt.Errorf("insert: %w", &pq.Error{Code: "22009"})}, true, []action{actDeadLetter}},
		{"a constraint in a set-based Write: no evidence, the evidence decides",
			&writeError{&pq.Error{Code: "23505"}}, true, append(waits(unexpectedLimit-1), actCheck)},
		{"retry-now: 3 re-runs, then DLQ", now.Errorf("x"), true, []action{actRetry, actRetry, actRetry, actDeadLetter}},
		{"retry-later parks on the schedule, then DLQ", later.Errorf("x"), true, []action{actPark, actPark, actDeadLetter}},
		{"retry-later blocking waits in line", later.Errorf("x"), false, []action{actWait, actWait, actDeadLetter}},
		{"connection lost: wait forever", &pq.Error{Code: "08006"}, true, waits(20)},
		{"read-only: wait forever", &pq.Error{Code: "25006"}, true, waits(20)},
		{"missing grant: wait forever", &pq.Error{Code: "42501"}, true, waits(20)},
		{"unexpected: 4 waits, then the evidence decides, again after each wait",
			errors.New("boom"), true, append(waits(unexpectedLimit-1), actCheck, actCheck, actCheck)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := newTally()
			for i, want := range c.want {
				v := r.decide(c.err, tl, c.parking)
				if v.act != want {
					t.Fatalf("step %d: %v, want %v", i, v.act, want)
				}
				if (v.act == actWait || v.act == actCheck) && v.code.Class == Infrastructure && v.delay <= 0 {
					t.Fatalf("step %d: a wait of %v", i, v.delay)
				}
			}
		})
	}
}
