package migrate_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// statusWithDrift runs Status with a drift check on dev and returns the
// state and its printed form.
func statusWithDrift(t *testing.T, url, dev string, path string) (*migrate.State, string) {
	t.Helper()
	dir := embedded(t)
	if path != "" {
		dir = openDir(t, path)
	}
	st, err := migrate.Status(ctx, url, dir, migrate.WithDriftCheck(dev))
	if err != nil {
		t.Fatal(err)
	}
	if st.Drift == nil {
		t.Fatal("Status with WithDriftCheck returned no Drift")
	}
	var b bytes.Buffer
	migrate.WriteStatus(&b, st)
	t.Log("\n" + b.String())
	return st, b.String()
}

func TestDrift(t *testing.T) {
	// The drift check leaves the dev database empty: one serves every case.
	dev := pgtest.NewEmptyDB(t)

	t.Run("a column added by hand is reported with its name and type", func(t *testing.T) {
		url := pgtest.NewDB(t)
		if _, err := openDB(t, url).Exec(`ALTER TABLE leads ADD COLUMN note character varying(200) NULL`); err != nil {
			t.Fatal(err)
		}
		st, out := statusWithDrift(t, url, dev, "")
		if !st.Drift.Drifted() {
			t.Fatal("no drift reported")
		}
		for _, want := range []string{"drift: the live schema differs from the migrations", `"leads"`, `ADD COLUMN "note" character varying(200) NULL`} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})

	t.Run("a clean database has no drift", func(t *testing.T) {
		st, out := statusWithDrift(t, pgtest.NewDB(t), dev, "")
		if st.Drift.Drifted() || !strings.Contains(out, "no drift") {
			t.Fatalf("drift on a freshly migrated database: %q", st.Drift.Statements)
		}
		if want := fileNames(t, embedded(t)); len(st.Drift.Replayed) != len(want) {
			t.Fatalf("replayed %v, want every file %v", st.Drift.Replayed, want)
		}
	})

	t.Run("an index dropped by hand is reported", func(t *testing.T) {
		url := pgtest.NewDB(t)
		if _, err := openDB(t, url).Exec(`DROP INDEX ix_chat_events_chat_occurred`); err != nil {
			t.Fatal(err)
		}
		st, out := statusWithDrift(t, url, dev, "")
		if !st.Drift.Drifted() || !strings.Contains(out, `DROP INDEX "ix_chat_events_chat_occurred"`) {
			t.Fatalf("drift %q, want the dropped index", st.Drift.Statements)
		}
	})

	t.Run("pending files are compared against the applied files only", func(t *testing.T) {
		url := pgtest.NewEmptyDB(t)
		if _, err := migrate.Apply(ctx, url, prefixDir(t, 1)); err != nil {
			t.Fatal(err)
		}
		st, out := statusWithDrift(t, url, dev, "")
		if len(st.Pending) == 0 {
			t.Fatal("no pending file")
		}
		if st.Drift.Drifted() || !strings.Contains(out, "no drift") {
			t.Fatalf("the pending files' changes reported as drift: %q", st.Drift.Statements)
		}
		if len(st.Drift.Replayed) != 1 {
			t.Fatalf("replayed %v, want the one applied file", st.Drift.Replayed)
		}

		// A pending file's change made by hand is drift until the file
		// is applied.
		second := embedded(t)
		files, err := second.Files()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := openDB(t, url).Exec(string(files[1].Bytes())); err != nil {
			t.Fatal(err)
		}
		st, out = statusWithDrift(t, url, dev, "")
		if !st.Drift.Drifted() || !strings.Contains(out, `"schedule_step" bigint`) {
			t.Fatalf("drift %q, want the column of the pending file applied by hand", st.Drift.Statements)
		}
	})

	t.Run("a partially applied file is replayed up to its applied statements", func(t *testing.T) {
		path := sampleDir(t, map[string]string{
			"20990101000000_half.sql": "-- atlas:txmode none\n\nCREATE TABLE \"t1\" (\"id\" bigint);\nINSERT INTO \"no_such_table\" VALUES (1);\n",
		})
		url := pgtest.NewEmptyDB(t)
		if _, err := migrate.Apply(ctx, url, openDir(t, path)); err == nil {
			t.Fatal("apply of a failing file succeeded")
		}
		st, out := statusWithDrift(t, url, dev, path)
		if st.Drift.Partial != "20990101000000_half.sql" {
			t.Fatalf("partial %q, want the half-applied file", st.Drift.Partial)
		}
		if st.Drift.Drifted() || !strings.Contains(out, "no drift") {
			t.Fatalf("drift %q: the applied statement of the partial file should be replayed", st.Drift.Statements)
		}
	})

	t.Run("a database without history is compared with an empty schema, without a dev database", func(t *testing.T) {
		url := pgtest.NewEmptyDB(t)
		if _, err := openDB(t, url).Exec(`CREATE TABLE stray (id integer)`); err != nil {
			t.Fatal(err)
		}
		st, out := statusWithDrift(t, url, "", "")
		if st.DriftNeedsDev() || !st.Drift.Drifted() || !strings.Contains(out, `CREATE TABLE "stray" ("id" integer NULL);`) {
			t.Fatalf("drift %q, want the stray table", st.Drift.Statements)
		}
	})

	t.Run("a database migrated by a newer directory says so", func(t *testing.T) {
		path := sampleDir(t, map[string]string{"20990101000000_newer.sql": "CREATE TABLE \"newer\" (\"id\" bigint NOT NULL, PRIMARY KEY (\"id\"));\n"})
		url := pgtest.NewEmptyDB(t)
		if _, err := migrate.Apply(ctx, url, openDir(t, path)); err != nil {
			t.Fatal(err)
		}
		st, out := statusWithDrift(t, url, dev, "")
		if st.Drift.Ahead != "20990101000000" || !strings.Contains(out, "newer than this directory's newest file") || !strings.Contains(out, `CREATE TABLE "newer"`) {
			t.Fatalf("ahead %q, drift %q: want the newer version named and its table reported", st.Drift.Ahead, st.Drift.Statements)
		}
	})

	t.Run("a schema-bound URL's revision table is not drift", func(t *testing.T) {
		url := pgtest.NewEmptyDB(t) + "&search_path=public"
		if _, err := migrate.Apply(ctx, url, embedded(t)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := openDB(t, url).QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'atlas_schema_revisions'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("revision table in public: %d, %v", n, err)
		}
		st, _ := statusWithDrift(t, url, dev, "")
		if st.Drift.Drifted() {
			t.Fatalf("drift %q: the revision table was compared", st.Drift.Statements)
		}
	})
}
