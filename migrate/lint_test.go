package migrate_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestLint(t *testing.T) {
	// Lint restores the dev database to empty after each run: one serves
	// every case.
	dev := pgtest.NewEmptyDB(t)
	const newFile = "20990101000000_change.sql"
	tests := []struct {
		name    string
		sql     string
		want    []string // "check code @line" of every finding, in order
		wantErr bool     // a finding is an error
	}{
		{
			name:    "dropping a column is destructive",
			sql:     "-- Modify \"leads\" table\nALTER TABLE \"leads\" DROP COLUMN \"last_event_at\";\n",
			want:    []string{"destructive DS103 @2"},
			wantErr: true,
		},
		{
			name:    "dropping a table is destructive",
			sql:     "DROP TABLE \"processed_messages\";\n",
			want:    []string{"destructive DS102 @1"},
			wantErr: true,
		},
		{
			name:    "CREATE INDEX without CONCURRENTLY on an existing table",
			sql:     "CREATE INDEX \"ix_leads_tenant\" ON \"leads\" (\"tenant_id\");\n",
			want:    []string{"concurrent_index PG101 @1"},
			wantErr: true,
		},
		{
			name: "CREATE INDEX on a table of the same file",
			sql: "CREATE TABLE \"notes\" (\"id\" bigint NOT NULL, \"lead_id\" uuid NOT NULL, PRIMARY KEY (\"id\"));\n" +
				"CREATE INDEX \"ix_notes_lead\" ON \"notes\" (\"lead_id\");\n",
		},
		{
			name: "CREATE INDEX CONCURRENTLY in a txmode none file",
			sql:  "-- atlas:txmode none\n\nCREATE INDEX CONCURRENTLY \"ix_leads_tenant\" ON \"leads\" (\"tenant_id\");\n",
		},
		{
			name:    "CREATE INDEX CONCURRENTLY in a transactional file",
			sql:     "CREATE INDEX CONCURRENTLY \"ix_leads_tenant\" ON \"leads\" (\"tenant_id\");\n",
			want:    []string{"concurrent_index PG103 @1"},
			wantErr: true,
		},
		{
			name:    "renaming a column is backward incompatible",
			sql:     "ALTER TABLE \"chats\" RENAME COLUMN \"kind\" TO \"chat_kind\";\n",
			want:    []string{"incompatible BC102 @1"},
			wantErr: true,
		},
		{
			name:    "a NOT NULL column without default on an existing table depends on data",
			sql:     "ALTER TABLE \"leads\" ADD COLUMN \"source\" character varying(32) NOT NULL;\n",
			want:    []string{"data_depend MF103 @1"},
			wantErr: true,
		},
		{
			name: "dropping a foreign key is a warning",
			sql:  "ALTER TABLE \"lead_events\" DROP CONSTRAINT \"lead_events_leads_events\";\n",
			want: []string{"condrop CD101 @1"},
		},
		{
			name: "a nullable column is fine",
			sql:  "ALTER TABLE \"leads\" ADD COLUMN \"note\" text NULL;\n",
		},
		{
			name: "atlas:nolint exempts a reviewed statement",
			sql: "-- reviewed: the column was never written\n-- atlas:nolint destructive\n" +
				"ALTER TABLE \"leads\" DROP COLUMN \"last_event_at\";\n" +
				"-- atlas:nolint PG101\nCREATE INDEX \"ix_leads_tenant\" ON \"leads\" (\"tenant_id\");\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := openDir(t, sampleDir(t, map[string]string{newFile: tt.sql}))
			report, err := migrate.Lint(ctx, dev, dir, 1)
			if report == nil {
				t.Fatalf("no report: %v", err)
			}
			if gotErr := errors.Is(err, migrate.ErrLintFindings); gotErr != tt.wantErr || (err != nil && !gotErr) {
				t.Fatalf("error %v, want a lint failure: %v", err, tt.wantErr)
			}
			if len(report.Files) != 1 || report.Files[0].File.Name() != newFile {
				t.Fatalf("linted %d files, want only %s", len(report.Files), newFile)
			}
			var got []string
			for _, f := range report.Files[0].Findings {
				got = append(got, f.Check+" "+f.Code+" @"+strconv.Itoa(f.Line))
			}
			if !slices.Equal(got, tt.want) {
				var b strings.Builder
				report.Write(&b)
				t.Fatalf("findings %q, want %q\n%s", got, tt.want, b.String())
			}
		})
	}

	t.Run("the committed directory has no findings", func(t *testing.T) {
		report, err := migrate.Lint(ctx, dev, embedded(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range report.Files {
			if len(f.Findings) > 0 {
				var b strings.Builder
				f.Write(&b)
				t.Errorf("%s", b.String())
			}
		}
	})

	t.Run("a non-empty dev database is refused", func(t *testing.T) {
		db := pgtest.NewDB(t)
		if _, err := migrate.Lint(ctx, db, embedded(t), 1); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("lint on a migrated dev database: %v", err)
		}
	})
}

func TestPlan(t *testing.T) {
	t.Run("an empty database gets every file with its findings", func(t *testing.T) {
		url, dev := pgtest.NewEmptyDB(t), pgtest.NewEmptyDB(t)
		path := sampleDir(t, map[string]string{"20990101000000_drop.sql": "ALTER TABLE \"leads\" DROP COLUMN \"last_event_at\";\n"})
		dir := openDir(t, path)
		p, err := migrate.Plan(ctx, url, dev, dir)
		if err != nil {
			t.Fatal(err)
		}
		if names := fileNames(t, dir); len(p.Files) != len(names) {
			t.Fatalf("plan has %d files, want %d", len(p.Files), len(names))
		}
		if p.Errors() != 1 {
			t.Fatalf("plan has %d lint errors, want 1 (the drop)", p.Errors())
		}
		var b strings.Builder
		p.Write(&b)
		for _, want := range []string{"CREATE TABLE \"chats\"", "DROP COLUMN \"last_event_at\"", "DS103"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("plan output lacks %q", want)
			}
		}
		var n int
		if err := openDB(t, url).QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatal("plan changed the database")
		}
	})
	t.Run("an up-to-date database has nothing planned", func(t *testing.T) {
		url := pgtest.NewDB(t)
		p, err := migrate.Plan(ctx, url, "postgres://unused.invalid/none", embedded(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Files) != 0 || len(p.State.Pending) != 0 {
			t.Fatalf("plan of an up-to-date database: %d files", len(p.Files))
		}
	})
}

// TestDiffWritesNothing is the "migration diff would not change the tree"
// check: the ent schema and the committed migration directory agree.
func TestDiffWritesNothing(t *testing.T) {
	path := t.TempDir()
	src, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range src {
		b, err := os.ReadFile(filepath.Join("migrations", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wrote, err := migrate.Diff(ctx, pgtest.NewEmptyDB(t), path, "probe")
	if err != nil {
		t.Fatal(err)
	}
	if wrote {
		after, _ := os.ReadDir(path)
		for _, e := range after {
			if strings.HasSuffix(e.Name(), "_probe.sql") {
				b, _ := os.ReadFile(filepath.Join(path, e.Name()))
				t.Fatalf("the ent schema differs from migrate/migrations; run `make migrate-diff NAME=…`. Pending change:\n%s", b)
			}
		}
		t.Fatal("diff wrote a file")
	}
}
