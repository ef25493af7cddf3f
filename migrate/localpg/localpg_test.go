package localpg

import (
	"context"
	"database/sql"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pin-platform/pin/internal/freeport"
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

// A port Start picked that another process takes before the server binds
// it (a test binary beside this one) costs a retry on another port, not
// the start: here the first pick is a port a listener holds.
func TestStartMovesOffATakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	if _, err := BinDir(); err != nil {
		t.Skip(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	picks := 0
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return taken, nil
		}
		return freeport.Loopback()
	}
	defer func() { pickPort = freeport.Loopback }()

	work, err := MkdirTemp("localpg-test-*")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	ctx := context.Background()
	srv, err := Start(ctx, filepath.Join(work, "pg"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if srv.Port() == taken || picks != 2 {
		t.Fatalf("server on port %d after %d picks, want another than the taken %d after 2", srv.Port(), picks, taken)
	}
	ping(t, srv.URL("postgres"))

}

func ping(t *testing.T, url string) {
	t.Helper()
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}
