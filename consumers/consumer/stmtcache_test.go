package consumer_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// cachePool opens a pool with a statement cache of n and its metrics.
func cachePool(t *testing.T, url string, n int) (*sql.DB, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	db, err := consumer.OpenDB(url, consumer.DBOptions{StatementCache: n, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, reg
}

// pinned is one connection of db, closed when the test ends: a test of
// one connection's cache runs every statement on it.
func pinned(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func cacheCount(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "pin_consumer_db_statement_cache_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// prepared lists the statements the connection has prepared, with how
// often each ran (a query without arguments, so not cached itself).
func prepared(t *testing.T, c *sql.Conn) map[string]int64 {
	t.Helper()
	rows, err := c.QueryContext(context.Background(), `SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A statement with arguments runs unprepared the first time its connection
// sees it, is prepared the second time and runs prepared after that; the
// least recently used one makes room.
func TestStatementCachePreparesOnSecondSightAndEvictsTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, reg := cachePool(t, pgtest.NewDB(t), 2)
	c := pinned(t, db)
	q1, q2, q3 := `SELECT $1::int + 1`, `SELECT $1::int + 2`, `SELECT $1::int + 3`
	run := func(q string, arg, want int) {
		t.Helper()
		var got int
		if err := c.QueryRowContext(ctx, q, arg).Scan(&got); err != nil || got != want {
			t.Fatalf("%s with %d: %d, %v; want %d", q, arg, got, err, want)
		}
	}
	counts := func(first, miss, hit, evicted float64) {
		t.Helper()
		got := []float64{cacheCount(t, reg, "first"), cacheCount(t, reg, "miss"), cacheCount(t, reg, "hit"), cacheCount(t, reg, "evicted")}
		if want := []float64{first, miss, hit, evicted}; !slices.Equal(got, want) {
			t.Fatalf("first, miss, hit, evicted: %v, want %v", got, want)
		}
	}

	run(q1, 0, 1)
	if p := prepared(t, c); len(p) != 0 {
		t.Fatalf("prepared on first sight: %v", p)
	}
	for i := 1; i < 4; i++ {
		run(q1, i, i+1)
	}
	if p := prepared(t, c); len(p) != 1 || p[q1] != 3 {
		t.Fatalf("after four runs of one statement, prepared: %v; want it once, run 3 times", p)
	}
	counts(1, 1, 2, 0)

	run(q2, 1, 3)
	run(q2, 1, 3)
	run(q1, 1, 2) // q1 is now the most recently used: q2 makes room for q3
	run(q3, 1, 4)
	run(q3, 1, 4)
	if p := prepared(t, c); len(p) != 2 || p[q1] != 4 || p[q3] != 1 {
		t.Fatalf("prepared: %v; want %q (4 runs) and %q (1), %q evicted", p, q1, q3, q2)
	}
	counts(3, 3, 3, 1)
	var n int64
	for range 2 {
		if _, err := c.ExecContext(ctx, `SELECT pg_sleep(0)`); err != nil { // no arguments: the simple protocol
			t.Fatal(err)
		}
	}
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%pg_sleep%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a statement without arguments was prepared (%d, %v)", n, err)
	}
}

// With DATABASE_STATEMENT_CACHE=0 nothing is prepared.
func TestStatementCacheOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := cachePool(t, pgtest.NewDB(t), 0)
	c := pinned(t, db)
	var got int
	for range 2 {
		if err := c.QueryRowContext(ctx, `SELECT $1::int`, 7).Scan(&got); err != nil || got != 7 {
			t.Fatalf("%d, %v", got, err)
		}
	}
	if p := prepared(t, c); len(p) != 0 {
		t.Fatalf("prepared with the cache off: %v", p)
	}
}

// A column's type altered under running connections: the statement fails
// once, as an infrastructure error (retried, never dead-lettered), and
// every connection prepares its statements anew.
func TestStatementCacheRecoversFromAResultTypeChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t)
	db, reg := cachePool(t, url, 8)
	admin, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(`CREATE TABLE stmt_probe (id int PRIMARY KEY, v int); INSERT INTO stmt_probe VALUES (1, 10)`); err != nil {
		t.Fatal(err)
	}
	a := pinned(t, db)
	b := pinned(t, db)
	const q = `SELECT v FROM stmt_probe WHERE id = $1`
	read := func(c *sql.Conn) error {
		var v string
		if err := c.QueryRowContext(ctx, q, 1).Scan(&v); err != nil {
			return err
		}
		if v != "10" {
			t.Fatalf("read %q, want 10", v)
		}
		return nil
	}
	for _, c := range []*sql.Conn{a, b, a, b} { // prepared on the second read
		if err := read(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(`ALTER TABLE stmt_probe ALTER COLUMN v TYPE text`); err != nil {
		t.Fatal(err)
	}

	err = read(a)
	if err == nil || !strings.Contains(err.Error(), "cached plan must not change result type") {
		t.Fatalf("first read after the change: %v; want PostgreSQL's refusal (has PostgreSQL stopped refusing? then the reset is unneeded)", err)
	}
	if consumer.InfraCause(err) == "" {
		t.Fatalf("%v is not an infrastructure error: a message would be dead-lettered for a migration", err)
	}
	if err := read(a); err != nil {
		t.Fatalf("the same connection, again: %v", err)
	}
	if err := read(b); err != nil {
		t.Fatalf("another connection of the pool: %v (it should have dropped its statements)", err)
	}
	for name, c := range map[string]*sql.Conn{"a": a, "b": b} { // dropped on the server too, not leaked
		if p := prepared(t, c); len(p) != 1 || p[q] != 1 {
			t.Fatalf("connection %s has prepared %v, want only %q, run once since", name, p, q)
		}
	}
	if r := cacheCount(t, reg, "reset"); r != 1 {
		t.Fatalf("resets %v, want 1", r)
	}
}

// A statement sent while the rows of another are open (a prepared one's,
// or a plain query's) gets lib/pq's error instead of reading those rows.
func TestStatementCacheRefusesAStatementWhileRowsAreOpen(t *testing.T) {
	t.Parallel()
	db, _ := cachePool(t, pgtest.NewDB(t), 8)
	c := pinned(t, db)
	for _, open := range []struct {
		q    string
		args []any
	}{
		{`SELECT generate_series(1, $1::int)`, []any{1000}}, // first sight: unprepared
		{`SELECT generate_series(1, $1::int)`, []any{1000}}, // prepared
		{`SELECT generate_series(1, 1000)`, nil},            // simple protocol
	} {
		refusesWhileOpen(t, c, open.q, open.args)
	}
}

func refusesWhileOpen(t *testing.T, c *sql.Conn, open string, openArgs []any) {
	t.Helper()
	ctx := context.Background()
	rows, err := c.QueryContext(ctx, open, openArgs...)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal("no rows")
	}
	for _, q := range []string{`SELECT $1::int`, `SELECT 1`} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, 1)
		}
		var n int
		if err := c.QueryRowContext(ctx, q, args...).Scan(&n); err == nil || !strings.Contains(err.Error(), "already a query being processed") {
			t.Fatalf("%s while rows of %s are open: %d, %v", q, open, n, err)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRowContext(ctx, `SELECT $1::int`, 5).Scan(&n); err != nil || n != 5 {
		t.Fatalf("after the rows closed: %d, %v", n, err)
	}
}

// A prepared statement's plan, made once while its table was empty, reads
// the table by its index as it fills: the sequential scan PostgreSQL
// would choose then (and keep for as long as no ANALYZE comes) would read
// the whole table on every transaction (a fresh replica replaying its
// topic).
func TestPreparedStatementsArePlannedForTheTableAsItIsNow(t *testing.T) {
	ctx := context.Background()
	db, reg := cachePool(t, pgtest.NewDB(t), 16)
	c := pinned(t, db)
	for _, q := range []string{
		`CREATE TABLE grows (id uuid PRIMARY KEY, pad text) WITH (autovacuum_enabled = false)`,
		`VACUUM ANALYZE grows`, // empty, and known to be: a scan is the cheapest plan
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	id := uuid.New()
	lookup := func() {
		t.Helper()
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		for setting, want := range map[string]string{"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"} {
			var got string
			if err := tx.QueryRowContext(ctx, `SHOW `+setting).Scan(&got); err != nil || got != want {
				t.Fatalf("%s in a transaction = %q (%v), want %s", setting, got, err, want)
			}
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM grows WHERE id = ANY($1::uuid[])`, consumer.UUIDArray([]uuid.UUID{id})).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 { // prepared from the second; past the five custom plans after which PostgreSQL would take its generic one
		lookup()
	}
	if cacheCount(t, reg, "hit") < 8 {
		t.Fatalf("the lookup ran prepared %v times, want 8", cacheCount(t, reg, "hit"))
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO grows SELECT gen_random_uuid(), repeat('x', 100) FROM generate_series(1, 50000)`); err != nil {
		t.Fatal(err)
	}
	scans := func() int64 {
		t.Helper()
		// This backend's counts reach the shared statistics at its
		// next transaction's end.
		if _, err := c.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := db.QueryRowContext(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'grows'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := scans()
	for range 5 {
		lookup()
	}
	if after := scans(); after != before {
		t.Fatalf("%d sequential scans of the grown table by 5 lookups of one key: a plan made for the empty table", after-before)
	}
	// Outside a transaction the session keeps the server's settings.
	for setting, want := range map[string]string{"plan_cache_mode": "auto", "enable_seqscan": "on"} {
		var got string
		if err := c.QueryRowContext(ctx, `SHOW `+setting).Scan(&got); err != nil || got != want {
			t.Fatalf("%s outside a transaction = %q (%v), want the server's %s", setting, got, err, want)
		}
	}
}
