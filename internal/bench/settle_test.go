package bench

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Before a consumer's max run the bench settles the database: a table
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
	if err := (&benchmark{db: db}).settle(context.Background()); err != nil {
		t.Fatal(err)
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
