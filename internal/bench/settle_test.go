package bench

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Before each of a consumer's runs the bench settles the database: a table
// with rows is vacuumed and analyzed (autovacuum owes it nothing during
// the run), a table that never had any is left never analyzed (its
// statements are not planned for an empty table).
func TestSettleVacuumsTablesWithRowsOnly(t *testing.T) {
	db, err := sql.Open("postgres", pgtest.NewEmptyDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, st := range []string{
		`CREATE TABLE filled (x int)`,
		`INSERT INTO filled SELECT generate_series(1, 1000)`,
		`CREATE TABLE fresh (x int)`,
	} {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	took, err := (&benchmark{db: db}).settle(context.Background(), "max run")
	if err != nil {
		t.Fatal(err)
	}
	if took <= 0 {
		t.Errorf("settle reported %v s, want its time", took)
	}
	for table, settled := range map[string]bool{"filled": true, "fresh": false} {
		var vacuumed, analyzed bool
		var tuples float64
		if err := db.QueryRow(`SELECT s.last_vacuum IS NOT NULL, s.last_analyze IS NOT NULL, c.reltuples
			FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.relname = $1`, table).
			Scan(&vacuumed, &analyzed, &tuples); err != nil {
			t.Fatal(err)
		}
		if vacuumed != settled || analyzed != settled {
			t.Errorf("%s: vacuumed %v, analyzed %v, want %v", table, vacuumed, analyzed, settled)
		}
		if !settled && tuples != -1 {
			t.Errorf("%s: reltuples %v, want -1 (never analyzed)", table, tuples)
		}
	}
}

// Before the first consumer the bench readies min_wal_size of WAL
// segments, as a server that has run keeps them: it writes that many
// segments (the insert position moves past them) and leaves them,
// recycled, ahead of the insert position.
func TestReadyWALLeavesMinWALSizeOfSegmentsAhead(t *testing.T) {
	db, err := sql.Open("postgres", pgtest.NewEmptyDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var want, segment, before int64
	if err := db.QueryRow(`SELECT pg_size_bytes(current_setting('min_wal_size')) / pg_size_bytes(current_setting('wal_segment_size')),
		pg_size_bytes(current_setting('wal_segment_size')), pg_current_wal_insert_lsn() - '0/0'`).Scan(&want, &segment, &before); err != nil {
		t.Fatal(err)
	}
	ahead, minWAL, err := (&benchmark{db: db}).readyWAL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	var counted int
	if err := db.QueryRow(`SELECT pg_current_wal_insert_lsn() - '0/0', (`+walAheadSQL+`)`).Scan(&after, &counted); err != nil {
		t.Fatal(err)
	}
	if moved := (after - before) / segment; moved < want-1 {
		t.Errorf("the insert position moved %d segments, want ≥ %d (min_wal_size %s)", moved, want-1, minWAL)
	}
	// The segment being written is one of min_wal_size's.
	if int64(ahead) < want-1 || counted < ahead {
		t.Errorf("%d segments ahead (%d counted after), want ≥ %d (min_wal_size %s)", ahead, counted, want-1, minWAL)
	}
}
