//go:build linux

package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/pin-platform/pin/migrate/pgtest"
)

// pinctl dev writes into a $DATABASE_URL or $KAFKA_BOOTSTRAP_SERVERS of the
// shell only when the operator says so: without a terminal it needs --yes,
// on one it asks, and declined or refused nothing is written — no
// migration, no local server started, nothing produced.
func TestDevRefusesTheShellsDatabaseAndBrokersUnlessConfirmed(t *testing.T) {
	t.Parallel()
	tables := func(t *testing.T, u string) int {
		t.Helper()
		db, err := sql.Open("postgres", u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	empty := func(t *testing.T, dir string) {
		t.Helper()
		if es, err := os.ReadDir(dir); err != nil || len(es) > 0 {
			t.Errorf("the data directory holds %v (%v): a local server was started", es, err)
		}
	}
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

	for _, tc := range []struct {
		name  string
		vars  []string // DATABASE_URL (an empty database of the test server) and/or KAFKA_BOOTSTRAP_SERVERS
		stdin func(t *testing.T) io.Reader
		want  string // in the error
		code  int
	}{
		{"$DATABASE_URL, no terminal", []string{"DATABASE_URL"}, func(*testing.T) io.Reader { return strings.NewReader("y\n") },
			"DATABASE_URL set and stdin is not a terminal: pass --yes", 2},
		{"$KAFKA_BOOTSTRAP_SERVERS, no terminal", []string{"KAFKA_BOOTSTRAP_SERVERS"}, func(*testing.T) io.Reader { return strings.NewReader("") },
			"KAFKA_BOOTSTRAP_SERVERS set and stdin is not a terminal: pass --yes", 2},
		{"both, declined on a terminal", []string{"DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS"}, func(t *testing.T) io.Reader { return openTerminal(t, "n\n") },
			"not confirmed: nothing written", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := withPassword(pgtest.NewEmptyDB(t), "dev-"+tricky)
			vars := map[string]string{}
			for _, v := range tc.vars {
				vars[v] = map[string]string{"DATABASE_URL": u, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}[v]
			}
			data := t.TempDir()
			var out, errOut bytes.Buffer
			err := devCmd(context.Background(), []string{"--once", "--data", data}, env(vars), tc.stdin(t), &out)
			code := exitCode(&errOut, err)
			t.Logf("exit %d\n%s%s", code, out.String(), errOut.String())
			if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, %q; want %d and %q", code, errOut.String(), tc.code, tc.want)
			}
			for _, v := range tc.vars {
				if !strings.Contains(out.String(), "$"+v) {
					t.Errorf("the output does not say it would write into $%s:\n%s", v, out.String())
				}
			}
			if n := tables(t, u); n != 0 {
				t.Errorf("the database holds %d tables: the demo wrote into it", n)
			}
			empty(t, data)
			if l := leaks(out.String()+errOut.String(), "dev-"+tricky); len(l) > 0 {
				t.Errorf("the password is printed (%q)", l)
			}
		})
	}
}
