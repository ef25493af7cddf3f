package migrate_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	_ "github.com/lib/pq"

	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sampleDir writes the committed migration files plus extra (name →
// content) into a temporary directory with a matching atlas.sum, and
// returns its path.
func sampleDir(t *testing.T, extra map[string]string) string {
	t.Helper()
	path := t.TempDir()
	src, err := migrate.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	files, err := src.Files()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := atlasmigrate.NewLocalDir(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := dir.WriteFile(f.Name(), f.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range extra {
		if err := dir.WriteFile(name, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	rehash(t, path)
	return path
}

// rehash rewrites atlas.sum of the directory at path to match its files.
func rehash(t *testing.T, path string) {
	t.Helper()
	if err := migrate.Hash(path); err != nil {
		t.Fatal(err)
	}
}

func openDir(t *testing.T, path string) atlasmigrate.Dir {
	t.Helper()
	dir, err := migrate.OpenDir(path)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func embedded(t *testing.T) atlasmigrate.Dir {
	t.Helper()
	dir, err := migrate.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func fileNames(t *testing.T, dir atlasmigrate.Dir) []string {
	t.Helper()
	files, err := dir.Files()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name()
	}
	return names
}

func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func firstSQLFile(t *testing.T, path string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(path, "*.sql"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no .sql file in %s", path)
	}
	return m[0]
}

var ctx = context.Background()

// prefixDir is a directory of the first n committed migration files, with
// a matching atlas.sum: the migrations as they were when file n was the
// newest. Its files' hashes are the committed directory's (atlas.sum chains
// each file's hash over the files before it), so a database migrated with
// it can then be migrated with the whole directory.
func prefixDir(t *testing.T, n int) atlasmigrate.Dir {
	t.Helper()
	files, err := embedded(t).Files()
	if err != nil {
		t.Fatal(err)
	}
	if n > len(files) {
		t.Fatalf("prefixDir(%d): only %d migration files", n, len(files))
	}
	path := t.TempDir()
	dir, err := atlasmigrate.NewLocalDir(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files[:n] {
		if err := dir.WriteFile(f.Name(), f.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	rehash(t, path)
	return openDir(t, path)
}
