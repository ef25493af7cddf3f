package pgtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	_ "github.com/lib/pq"

	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNewDB(t *testing.T) {
	t.Run("databases are migrated and isolated from each other", func(t *testing.T) {
		a, b := open(t, pgtest.NewDB(t)), open(t, pgtest.NewDB(t))
		exec(t, a, `INSERT INTO chats (id, kind, lead_id) VALUES (gen_random_uuid(), 'Lead', NULL)`)
		if n := count(t, a, "chats"); n != 1 {
			t.Fatalf("chats in a: %d, want 1", n)
		}
		if n := count(t, b, "chats"); n != 0 {
			t.Fatalf("chats in b: %d, want 0 (clones share rows)", n)
		}
	})
	t.Run("the template refuses connections and is marked as a template", func(t *testing.T) {
		db := open(t, pgtest.NewDB(t))
		var name string
		var allow, isTemplate bool
		err := db.QueryRow(`SELECT datname, datallowconn, datistemplate FROM pg_database WHERE datname LIKE 'pin_tpl_%'`).Scan(&name, &allow, &isTemplate)
		if err != nil {
			t.Fatal(err)
		}
		if allow || !isTemplate {
			t.Fatalf("%s: datallowconn=%v datistemplate=%v, want false, true", name, allow, isTemplate)
		}
	})
	t.Run("the database is dropped when the test ends", func(t *testing.T) {
		var u string
		t.Run("inner", func(t *testing.T) { u = pgtest.NewDB(t) })
		name := u[strings.LastIndex(u, "/")+1 : strings.Index(u, "?")]
		admin := open(t, pgtest.NewEmptyDB(t))
		var n int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("database %s still exists after its test", name)
		}
	})
	t.Run("parallel tests get their own databases", func(t *testing.T) {
		seen := make(chan string, 8)
		t.Run("group", func(t *testing.T) {
			for i := range 8 {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					t.Parallel()
					seen <- pgtest.NewDB(t)
				})
			}
		})
		close(seen)
		urls := map[string]bool{}
		for u := range seen {
			urls[u] = true
		}
		if len(urls) != 8 {
			t.Fatalf("%d distinct databases for 8 tests", len(urls))
		}
	})
}

func TestNewEmptyDB(t *testing.T) {
	db := open(t, pgtest.NewEmptyDB(t))
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d tables in an empty database", n)
	}
}

func TestNewClient(t *testing.T) {
	client, db, u := pgtest.NewClient(t)
	if u == "" {
		t.Fatal("empty URL")
	}
	exec(t, db, `INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status)
		VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Active')`)
	n, err := client.Lead.Query().Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("ent sees %d leads, want 1", n)
	}
}

func open(t *testing.T, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
