package consumertest

import (
	"context"
	"database/sql"
)

// LockWaiters counts the sessions of db's database that wait for a lock
// while running a statement whose text matches like (SQL LIKE; "%" for
// any): for a test that a writer waits for a lock it holds, before it lets
// go. Other databases' sessions (other tests on the shared server) are not
// counted.
func LockWaiters(ctx context.Context, db *sql.DB, like string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, like).Scan(&n)
	return n, err
}

// BlockedBy counts the sessions of db's database running a statement
// whose text matches like that wait for the session of backend pid
// (pg_blocking_pids): for a test that holds a lock in a transaction of its
// own and lets go only once that statement waits for it, not for another
// session's.
func BlockedBy(ctx context.Context, db *sql.DB, like string, pid int) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE $1 AND $2 = ANY(pg_blocking_pids(pid))`, like, pid).Scan(&n)
	return n, err
}
