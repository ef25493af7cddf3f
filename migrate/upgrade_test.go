package migrate_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/demo/demotest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// TestUpgradeKeepsDataAndConsumersWork upgrades a database holding data
// from every version to the newest: for each migration file k ≥ 2, a
// database migrated up to file k−1 and holding the demo scenario's rows is
// migrated forward, must still hold every row, and the three consumers
// must then bring the scenario to its expected outcome on it. A migration
// that fails on existing rows, changes them, or leaves them in a state the
// consumers cannot work with fails here.
//
// The consumers of this binary only run on the newest schema, so the data
// is made once, generically: the first half of the scenario runs on a
// database at the newest version, whose rows are copied table by table
// into each old database, column by column where the column exists there
// (the others are left to the migrations: their defaults, their
// backfills). Nothing here names a table, a column or a migration: a new
// migration is covered as soon as it is in the directory. The one limit: a
// row an old schema refuses (a value only a later migration allows, once
// the scenario uses it) fails the copy into that version, naming its table.
//
// After the upgrade the whole scenario is produced again on a fresh
// broker: what the first half processed is skipped as duplicates by its
// idempotency marks, the rest is applied over the upgraded rows, and the
// messages parked before the upgrade are re-driven from their upgraded
// parked_messages rows.
func TestUpgradeKeepsDataAndConsumersWork(t *testing.T) {
	files, err := embedded(t).Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("%d migration file(s): nothing to upgrade from", len(files))
	}
	sc := demo.NewScenario(time.Now())
	first := splitScenario(sc)
	snap, processed := firstHalf(t, sc, pick(sc.Events(), first, true))

	for k := 2; k <= len(files); k++ {
		from := files[k-2]
		t.Run("from "+from.Name(), func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewEmptyDB(t)
			if _, err := migrate.Apply(ctx, url, prefixDir(t, k-1)); err != nil {
				t.Fatalf("migrate up to %s: %v", from.Name(), err)
			}
			db := openDB(t, url)
			copied := snap.restore(t, db)
			applied, err := migrate.Apply(ctx, url, embedded(t))
			if err != nil {
				t.Fatalf("migrate from %s with the scenario's rows: %v", from.Name(), err)
			}
			t.Logf("applied %v over %s", applied, snap.summary())
			snap.verify(t, db, copied)
			if t.Failed() {
				return
			}
			secondHalf(t, sc, db, url, first, processed)
		})
	}
}

// splitScenario marks the scenario's events (sc.Events(), in order) that
// make its first half: the first half (rounded up) of each key's events.
// Per key, and so per partition, the first half precedes the second: the
// first half produced again on a fresh broker lands on the same partitions
// and offsets as it first did, which parked messages refer to.
func splitScenario(sc *demo.Scenario) []bool {
	key := func(e demo.Event) string { return e.Topic + "\x00" + string(e.Key) }
	events := sc.Events()
	total := map[string]int{}
	for _, e := range events {
		total[key(e)]++
	}
	seen := map[string]int{}
	first := make([]bool, len(events))
	for i, e := range events {
		k := key(e)
		seen[k]++
		first[i] = seen[k] <= (total[k]+1)/2
	}
	return first
}

// pick returns the events whose mark is want.
func pick(events []demo.Event, marks []bool, want bool) []demo.Event {
	var out []demo.Event
	for i, e := range events {
		if marks[i] == want {
			out = append(out, e)
		}
	}
	return out
}

// The consumers run at demotest.RetryTimeScale, as in `make run`: a
// message parked in the first half must still be waiting, within its
// retry-later schedule, when the second half provisions what it waits for
// (messenger's 10 retries span 30 s at this scale).

// firstHalf runs the scenario's setup and first half on a database at the
// newest version and returns its rows, and the MessageIds the consumers
// processed (not parked, not dead-lettered): those the second half must
// skip as duplicates.
func firstHalf(t *testing.T, sc *demo.Scenario, events []demo.Event) (*snapshot, map[string]bool) {
	t.Helper()
	url := pgtest.NewDB(t)
	db := openDB(t, url)
	demotest.Setup(t, sc, db)
	c := demotest.Start(t, demotest.NewCluster(t), url, demotest.Options{})
	c.Produce(events)
	demotest.Poll(t, "the consumers did not process the first half of the scenario", c.CaughtUp)
	c.Stop()
	processed := map[string]bool{}
	for id, outs := range c.Outcomes() {
		if slices.ContainsFunc(outs, func(o string) bool { return o != "parked" && o != "dead-lettered" }) {
			processed[id] = true
		}
	}
	return takeSnapshot(t, db), processed
}

// secondHalf runs the whole scenario on the upgraded database, on a fresh
// broker: the first half's events again, then the steps in order, each
// step's provisioning once the consumers caught up with what came before
// it (what the scenario's pauses are for) and its second-half events. It
// checks the scenario's outcome, its dead letters, and that every message
// processed before the upgrade was skipped as a duplicate.
func secondHalf(t *testing.T, sc *demo.Scenario, db *sql.DB, url string, first []bool, processed map[string]bool) {
	kc := demotest.NewCluster(t)
	c := demotest.Start(t, kc, url, demotest.Options{})
	c.Produce(pick(sc.Events(), first, true))
	c.Play(sc, db, func(i int) bool { return !first[i] })
	c.WaitDone(db)
	for _, bad := range sc.Check(ctx, db) {
		t.Errorf("scenario: %s", bad)
	}
	for topic, want := range sc.DLQ {
		n := 0
		for _, w := range want {
			n += w
		}
		got := map[string]int{}
		for _, m := range kc.ReadAll(t, topic, max(n, kc.Count(t, topic)), 10*time.Second) {
			got[kafkatest.Header(m, "x-dlq-error-code")]++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: dead letters %v, want %v", topic, got, want)
		}
	}
	outs := c.Outcomes()
	for id := range processed {
		if o := outs[id]; len(o) == 0 || slices.ContainsFunc(o, func(o string) bool { return o != "skipped-duplicate" }) {
			t.Errorf("message %s, processed before the upgrade: outcomes %v after it, want skipped-duplicate", id, o)
		}
	}
}

// snapshot is every row of every table of the public schema, as jsonb
// objects (column → value).
type snapshot struct {
	rows map[string][]map[string]json.RawMessage // by table
}

func takeSnapshot(t *testing.T, db *sql.DB) *snapshot {
	t.Helper()
	s := &snapshot{rows: map[string][]map[string]json.RawMessage{}}
	for _, table := range queryStrings(t, db, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`) {
		s.rows[table] = tableRows(t, db, table)
	}
	return s
}

func (s *snapshot) summary() string {
	var parts []string
	for _, table := range sortedKeys(s.rows) {
		if n := len(s.rows[table]); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", table, n))
		}
	}
	return "rows: " + strings.Join(parts, ", ")
}

func tableRows(t *testing.T, db *sql.DB, table string) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	for _, r := range queryStrings(t, db, `SELECT to_jsonb(r)::text FROM public.`+pq.QuoteIdentifier(table)+` r`) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(r), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// restore inserts the snapshot into db, an older schema, in one
// transaction: tables in foreign-key order, each row with the columns the
// table has there (generated ones left out). It returns the columns
// copied, by table. A table the old schema lacks is left out.
func (s *snapshot) restore(t *testing.T, db *sql.DB) map[string][]string {
	t.Helper()
	have := map[string]map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = 'public' AND is_generated = 'NEVER'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var table, col string
		if err := rows.Scan(&table, &col); err != nil {
			t.Fatal(err)
		}
		if have[table] == nil {
			have[table] = map[string]bool{}
		}
		have[table][col] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	copied := map[string][]string{}
	for _, table := range fkOrder(t, db) {
		rs := s.rows[table]
		if len(rs) == 0 || have[table] == nil {
			continue
		}
		var cols []string
		for col := range rs[0] {
			if have[table][col] {
				cols = append(cols, col)
			}
		}
		sort.Strings(cols)
		quoted := make([]string, len(cols))
		for i, c := range cols {
			quoted[i] = pq.QuoteIdentifier(c)
		}
		list := strings.Join(quoted, ", ")
		b, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		qt := "public." + pq.QuoteIdentifier(table)
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+qt+` (`+list+`) OVERRIDING SYSTEM VALUE
			SELECT `+list+` FROM jsonb_populate_recordset(NULL::`+qt+`, $1::jsonb)`, string(b)); err != nil {
			t.Fatalf("insert the scenario's %d %s rows into the old schema: %v", len(rs), table, err)
		}
		copied[table] = cols
	}
	// Sequences behind serial or identity columns continue after the
	// copied values.
	seqs, err := tx.QueryContext(ctx, `SELECT c.relname, a.attname, pg_get_serial_sequence(quote_ident(n.nspname) || '.' || quote_ident(c.relname), a.attname)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
		AND pg_get_serial_sequence(quote_ident(n.nspname) || '.' || quote_ident(c.relname), a.attname) IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	var setvals []string
	for seqs.Next() {
		var table, col, seq string
		if err := seqs.Scan(&table, &col, &seq); err != nil {
			t.Fatal(err)
		}
		if copied[table] != nil {
			setvals = append(setvals, fmt.Sprintf(`SELECT setval(%s, max(%s)) FROM public.%s HAVING max(%[2]s) IS NOT NULL`,
				pq.QuoteLiteral(seq), pq.QuoteIdentifier(col), pq.QuoteIdentifier(table)))
		}
	}
	if err := seqs.Err(); err != nil {
		t.Fatal(err)
	}
	for _, q := range setvals {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return copied
}

// fkOrder returns the tables of the public schema, each after the tables
// its foreign keys refer to.
func fkOrder(t *testing.T, db *sql.DB) []string {
	t.Helper()
	tables := queryStrings(t, db, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	deps := map[string][]string{}
	for _, e := range queryStrings(t, db, `SELECT c.relname || ' ' || r.relname FROM pg_constraint k
		JOIN pg_class c ON c.oid = k.conrelid JOIN pg_class r ON r.oid = k.confrelid
		WHERE k.contype = 'f' AND k.connamespace = 'public'::regnamespace AND k.conrelid <> k.confrelid`) {
		from, to, _ := strings.Cut(e, " ")
		deps[from] = append(deps[from], to)
	}
	var order []string
	done := map[string]bool{}
	var visit func(string, int)
	visit = func(table string, depth int) {
		if done[table] || depth > len(tables) {
			return
		}
		for _, d := range deps[table] {
			visit(d, depth+1)
		}
		if !done[table] {
			done[table] = true
			order = append(order, table)
		}
	}
	for _, table := range tables {
		visit(table, 0)
	}
	return order
}

// verify checks that every copied row is in db, upgraded, with the values
// it was copied with.
func (s *snapshot) verify(t *testing.T, db *sql.DB, copied map[string][]string) {
	t.Helper()
	for _, table := range sortedKeys(copied) {
		cols := copied[table]
		count := map[string]int{}
		for _, r := range tableRows(t, db, table) {
			count[project(t, r, cols)]++
		}
		missing := 0
		for _, r := range s.rows[table] {
			p := project(t, r, cols)
			if count[p] > 0 {
				count[p]--
				continue
			}
			if missing++; missing <= 3 {
				t.Errorf("%s: row %s is missing or changed after the upgrade", table, p)
			}
		}
		if missing > 3 {
			t.Errorf("%s: %d rows missing or changed after the upgrade", table, missing)
		}
	}
}

// project is the canonical JSON of row's cols.
func project(t *testing.T, row map[string]json.RawMessage, cols []string) string {
	t.Helper()
	m := map[string]any{}
	for _, c := range cols {
		d := json.NewDecoder(bytes.NewReader(row[c]))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("column %s: %v", c, err)
		}
		m[c] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func queryStrings(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
