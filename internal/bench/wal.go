package bench

import (
	"context"
	"fmt"
)

// benchMinWALSize is the run's min_wal_size unless --pg gives one: the
// WAL a busy server keeps for reuse, as docs/operations.md advises
// ("PostgreSQL's WAL"), and what readyWAL makes ready before the first
// consumer.
const benchMinWALSize = "min_wal_size=1GB"

// readyWAL gives the run's server the WAL segments a server that has run
// keeps: min_wal_size of them, made and then recycled before the first
// consumer. A fresh server has a few. A commit whose WAL crosses into a
// segment the server has to make waits while 16 MB are filled with zeros
// (about 120 ms on the benchmark's machine), and crm's other lanes wait
// on that commit's lead locks: in session 17 every partition stopped for
// 120–250 ms now and then, a stall a deployed server's reused segments
// do not have (bench/README.md, "Issue 28, session 17"). Each record and
// pg_switch_wal makes the next segment; the CHECKPOINT then keeps the
// finished ones for reuse, up to min_wal_size. It returns the segments
// ready ahead of the insert position and min_wal_size as the server
// shows it.
func (b *benchmark) readyWAL(ctx context.Context) (ahead int, minWAL string, err error) {
	var want int
	if err := b.db.QueryRowContext(ctx, `SELECT current_setting('min_wal_size'),
		pg_size_bytes(current_setting('min_wal_size')) / pg_size_bytes(current_setting('wal_segment_size'))`).Scan(&minWAL, &want); err != nil {
		return 0, "", fmt.Errorf("ready the WAL: %w", err)
	}
	for range want {
		// A record first: a switch with nothing written since the last one
		// does nothing. Both in one round trip (no arguments: one simple
		// query, run in order).
		if _, err := b.db.ExecContext(ctx, `SELECT pg_logical_emit_message(false, 'pin-bench', ''); SELECT pg_switch_wal()`); err != nil {
			return 0, "", fmt.Errorf("ready the WAL: %w", err)
		}
	}
	if _, err := b.db.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return 0, "", fmt.Errorf("ready the WAL: CHECKPOINT: %w", err)
	}
	if err := b.db.QueryRowContext(ctx, walAheadSQL).Scan(&ahead); err != nil {
		return 0, "", fmt.Errorf("ready the WAL: %w", err)
	}
	return ahead, minWAL, nil
}

// walAheadSQL counts the WAL segments ahead of the insert position: made,
// and waiting to be written into.
const walAheadSQL = `SELECT count(*) FROM pg_ls_waldir()
	WHERE name ~ '^[0-9A-F]{24}$' AND name > pg_walfile_name(pg_current_wal_insert_lsn())`
