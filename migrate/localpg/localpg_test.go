package localpg

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Settings reach the server's command line; one that the shell of pg_ctl
// would split is refused before anything starts.
func TestStartSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	if _, err := BinDir(); err != nil {
		t.Skip(err)
	}
	if _, err := Start(context.Background(), filepath.Join(t.TempDir(), "never"), Options{Settings: []string{"work_mem=7 MB"}}); err == nil || !strings.Contains(err.Error(), "work_mem=7 MB") {
		t.Fatalf("a setting with a space: %v, want an error naming it", err)
	}
	work, err := MkdirTemp("localpg-test-*")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	srv, err := Start(context.Background(), filepath.Join(work, "pg"), Options{Settings: []string{"work_mem=7MB", "application_name=localpg-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	}()
	db, err := sql.Open("postgres", srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var workMem string
	if err := db.QueryRow(`SELECT current_setting('work_mem')`).Scan(&workMem); err != nil {
		t.Fatal(err)
	}
	if workMem != "7MB" {
		t.Fatalf("work_mem %q, want 7MB", workMem)
	}
}

func TestLibDir(t *testing.T) {
	if _, err := BinDir(); err != nil {
		t.Skip(err)
	}
	d, err := LibDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "plpgsql.so")); err != nil {
		t.Fatalf("LibDir %s has no plpgsql.so: %v", d, err)
	}
}
