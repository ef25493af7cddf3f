package migrate_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"

	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestApply(t *testing.T) {
	t.Run("applies every file to an empty database, then nothing", func(t *testing.T) {
		url, dir := pgtest.NewEmptyDB(t), embedded(t)
		applied, err := migrate.Apply(ctx, url, dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := fileNames(t, dir); !slices.Equal(applied, want) {
			t.Fatalf("applied %v, want %v", applied, want)
		}
		again, err := migrate.Apply(ctx, url, dir)
		if err != nil || len(again) != 0 {
			t.Fatalf("re-apply: applied %v, err %v; want nothing, no error", again, err)
		}
		st, err := migrate.Status(ctx, url, dir)
		if err != nil {
			t.Fatal(err)
		}
		files, _ := dir.Files()
		if len(st.Pending) != 0 || st.Current() == nil || st.Current().Version != files[len(files)-1].Version() {
			t.Fatalf("status after apply: current %+v, pending %d", st.Current(), len(st.Pending))
		}
	})

	t.Run("records revisions in the Atlas CLI's table and format", func(t *testing.T) {
		url, dir := pgtest.NewEmptyDB(t), embedded(t)
		if _, err := migrate.Apply(ctx, url, dir); err != nil {
			t.Fatal(err)
		}
		db := openDB(t, url)
		// The CLI's ent schema (cmd/atlas/internal/migrate/ent/schema/revision.go) on PostgreSQL.
		want := []string{
			"version character varying NO ",
			"description character varying NO ",
			"type bigint NO 2",
			"applied bigint NO 0",
			"total bigint NO 0",
			"executed_at timestamp with time zone NO ",
			"execution_time bigint NO ",
			"error text YES ",
			"error_stmt text YES ",
			"hash character varying NO ",
			"partial_hashes jsonb YES ",
			"operator_version character varying NO ",
		}
		rows, err := db.Query(`SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
			FROM information_schema.columns
			WHERE table_schema = 'atlas_schema_revisions' AND table_name = 'atlas_schema_revisions'
			ORDER BY ordinal_position`)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("revision table columns:\n got %q\nwant %q", got, want)
		}
		sum, err := dir.Checksum()
		if err != nil {
			t.Fatal(err)
		}
		files, _ := dir.Files()
		for _, f := range files {
			var (
				typ, applied, total int
				hash, partial, op   string
			)
			err := db.QueryRow(`SELECT type, applied, total, hash, partial_hashes::text, operator_version
				FROM atlas_schema_revisions.atlas_schema_revisions WHERE version = $1`, f.Version()).
				Scan(&typ, &applied, &total, &hash, &partial, &op)
			if err != nil {
				t.Fatalf("revision of %s: %v", f.Name(), err)
			}
			wantHash, _ := sum.SumByName(f.Name())
			if typ != int(atlasmigrate.RevisionTypeExecute) || applied != total || total == 0 ||
				hash != wantHash || partial != "null" || !strings.HasPrefix(op, "pinctl") {
				t.Fatalf("revision of %s: type %d applied %d/%d hash %q (want %q) partial %s operator %q",
					f.Name(), typ, applied, total, hash, wantHash, partial, op)
			}
		}
	})

	t.Run("runs a txmode none file outside a transaction", func(t *testing.T) {
		path := sampleDir(t, map[string]string{
			"20990101000000_concurrent_index.sql": "-- atlas:txmode none\n\n" +
				`CREATE INDEX CONCURRENTLY "ix_leads_tenant" ON "leads" ("tenant_id");` + "\n",
		})
		url := pgtest.NewEmptyDB(t)
		applied, err := migrate.Apply(ctx, url, openDir(t, path))
		if err != nil {
			t.Fatal(err)
		}
		if applied[len(applied)-1] != "20990101000000_concurrent_index.sql" {
			t.Fatalf("applied %v", applied)
		}
	})

	t.Run("rolls back a failing file with its revision", func(t *testing.T) {
		path := sampleDir(t, map[string]string{
			"20990101000000_broken.sql": "CREATE TABLE \"t1\" (\"id\" bigint);\nINSERT INTO \"no_such_table\" VALUES (1);\n",
		})
		url := pgtest.NewEmptyDB(t)
		applied, err := migrate.Apply(ctx, url, openDir(t, path))
		if err == nil {
			t.Fatal("apply succeeded")
		}
		for _, want := range []string{"20990101000000_broken.sql", "line 2", "no_such_table", "rolled back"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if len(applied) != len(fileNames(t, embedded(t))) {
			t.Errorf("applied %v: the files before the broken one should be applied", applied)
		}
		db := openDB(t, url)
		var t1, rev bool
		if err := db.QueryRow(`SELECT to_regclass('t1') IS NOT NULL,
			EXISTS (SELECT 1 FROM atlas_schema_revisions.atlas_schema_revisions WHERE version = '20990101000000')`).Scan(&t1, &rev); err != nil {
			t.Fatal(err)
		}
		if t1 || rev {
			t.Fatalf("after the failed file: table t1 exists %v, its revision exists %v; want neither", t1, rev)
		}
	})

	t.Run("reports an unreachable database at once", func(t *testing.T) {
		start := time.Now()
		_, err := migrate.Apply(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable", embedded(t))
		var ce *migrate.ConnError
		if !errors.As(err, &ce) {
			t.Fatalf("error %v (%T), want a *migrate.ConnError", err, err)
		}
		if d := time.Since(start); d > migrate.DefaultConnectTimeout {
			t.Fatalf("took %s", d)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("error is not one line: %q", err)
		}
	})
}

func TestApplyRefusesTamperedDirectory(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, path string)
		want   []string // the error says all of these
	}{
		{
			name:   "edited file",
			tamper: func(t *testing.T, path string) { appendFile(t, firstSQLFile(t, path), "DROP TABLE chats;\n") },
			want:   []string{"_initial.sql", "was edited", "atlas.sum"},
		},
		{
			name: "file added without atlas.sum",
			tamper: func(t *testing.T, path string) {
				if err := os.WriteFile(filepath.Join(path, "20990101000000_sneaky.sql"), []byte("DROP TABLE chats;\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"20990101000000_sneaky.sql", "was added"},
		},
		{
			name: "broken atlas.sum",
			tamper: func(t *testing.T, path string) {
				sum := filepath.Join(path, "atlas.sum")
				b, err := os.ReadFile(sum)
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.SplitN(string(b), "\n", 3)
				lines[1] = strings.Replace(lines[1], "h1:", "h1:AAAA", 1)
				if err := os.WriteFile(sum, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"atlas.sum", "corrupt"},
		},
		{
			name:   "missing atlas.sum",
			tamper: func(t *testing.T, path string) { os.Remove(filepath.Join(path, "atlas.sum")) },
			want:   []string{"no atlas.sum"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := sampleDir(t, nil)
			tt.tamper(t, path)
			url := pgtest.NewEmptyDB(t)
			_, err := migrate.Apply(ctx, url, openDir(t, path))
			if err == nil {
				t.Fatal("apply accepted a tampered directory")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			var n int
			if err := openDB(t, url).QueryRow(`SELECT count(*) FROM pg_namespace WHERE nspname = 'atlas_schema_revisions'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Error("apply touched the database before refusing")
			}
		})
	}

	t.Run("file changed after it was applied, atlas.sum re-hashed", func(t *testing.T) {
		path := sampleDir(t, nil)
		url := pgtest.NewEmptyDB(t)
		if _, err := migrate.Apply(ctx, url, openDir(t, path)); err != nil {
			t.Fatal(err)
		}
		file := firstSQLFile(t, path)
		appendFile(t, file, "-- an innocent comment\n")
		rehash(t, path)
		for _, op := range []string{"apply", "status"} {
			var err error
			if op == "apply" {
				_, err = migrate.Apply(ctx, url, openDir(t, path))
			} else {
				_, err = migrate.Status(ctx, url, openDir(t, path))
			}
			if err == nil || !strings.Contains(err.Error(), filepath.Base(file)) || !strings.Contains(err.Error(), "changed after it was applied") {
				t.Fatalf("%s: error %v, want one naming %s as changed after it was applied", op, err, filepath.Base(file))
			}
		}
	})
}

func TestStatus(t *testing.T) {
	t.Run("an empty database has every file pending and is left untouched", func(t *testing.T) {
		url, dir := pgtest.NewEmptyDB(t), embedded(t)
		st, err := migrate.Status(ctx, url, dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Current() != nil || len(st.Pending) != len(fileNames(t, dir)) || st.NotClean != "" {
			t.Fatalf("status %+v", st)
		}
		var n int
		if err := openDB(t, url).QueryRow(`SELECT count(*) FROM pg_namespace WHERE nspname = 'atlas_schema_revisions'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatal("status created the revision schema")
		}
	})
	t.Run("a database with tables but no history is reported not clean", func(t *testing.T) {
		url := pgtest.NewEmptyDB(t)
		if _, err := openDB(t, url).Exec(`CREATE TABLE stray (id int)`); err != nil {
			t.Fatal(err)
		}
		st, err := migrate.Status(ctx, url, embedded(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.NotClean == "" {
			t.Fatalf("status %+v, want NotClean", st)
		}
		if _, err := migrate.Apply(ctx, url, embedded(t)); err == nil || !strings.Contains(err.Error(), "no migration history") {
			t.Fatalf("apply on a non-empty database without history: %v", err)
		}
	})
}
