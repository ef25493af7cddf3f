// Package pgtest gives every test its own PostgreSQL database, migrated
// like production, in a few milliseconds.
//
// One server serves the whole test run: the one DATABASE_URL names (`make
// test` runs `pinctl pg exec -- go test ./...`), or else one that Main starts
// for the test process. The first NewDB of a run creates a template database
// holding the migrated schema, named after the migration files' hash
// (pin_tpl_<8 hex>); every test then gets a clone of it, dropped when the
// test ends. Test packages run as parallel processes against the same
// server: template creation is serialised by an advisory lock.
//
// Use:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		client, db, url := pgtest.NewClient(t)
//		…
//	}
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/localpg"
)

// EnvURL is the variable naming the server to use (any database on it; the
// tests' databases are created beside it).
const EnvURL = "DATABASE_URL"

// templateLock is the advisory lock key that serialises template creation
// among the test processes sharing a server.
const templateLock int64 = 0x70696e5f74706c // "pin_tpl"

// Main runs the tests of a package: it starts a private server in a
// temporary directory when DATABASE_URL is unset (and sets DATABASE_URL to
// it), runs m, stops and removes the server, and exits with m's code. Call
// it from TestMain.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit: it returns m's code, for a TestMain that
// has more to clean up.
func Run(m *testing.M) int {
	if os.Getenv(EnvURL) != "" {
		return m.Run()
	}
	dir, err := localpg.MkdirTemp("pgtest-*")
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := localpg.Start(context.Background(), dir, localpg.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: start PostgreSQL (or set %s): %v\n", EnvURL, err)
		return 1
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}()
	os.Setenv(EnvURL, srv.URL("postgres"))
	defer os.Unsetenv(EnvURL)
	return m.Run()
}

// NewDB returns the URL of a new database holding the migrated schema and
// no rows, dropped when the test ends.
func NewDB(t testing.TB) string {
	t.Helper()
	s, err := shared()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	tpl, err := s.template()
	if err != nil {
		t.Fatalf("pgtest: template database: %v", err)
	}
	return s.create(t, tpl)
}

// NewEmptyDB returns the URL of a new empty database (created from
// template0, no migrations applied), dropped when the test ends.
func NewEmptyDB(t testing.TB) string {
	t.Helper()
	s, err := shared()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s.create(t, "template0")
}

// NewClient is NewDB plus an ent client and the *sql.DB under it, both
// closed when the test ends.
func NewClient(t testing.TB) (*ent.Client, *sql.DB, string) {
	t.Helper()
	u := NewDB(t)
	db, err := sql.Open("postgres", u)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	t.Cleanup(func() { client.Close() }) // closes db too
	return client, db, u
}

// server is the shared server of this test process.
type server struct {
	base  *url.URL // DATABASE_URL
	admin *sql.DB  // to base's database: CREATE/DROP DATABASE, the lock

	mu  sync.Mutex
	tpl string // the template's name, once it exists
}

var (
	sharedOnce sync.Once
	sharedSrv  *server
	sharedErr  error
)

func shared() (*server, error) {
	sharedOnce.Do(func() {
		raw := os.Getenv(EnvURL)
		if raw == "" {
			sharedErr = fmt.Errorf("%s is unset: call pgtest.Main from the package's TestMain", EnvURL)
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			sharedErr = fmt.Errorf("%s: %w", EnvURL, err)
			return
		}
		db, err := sql.Open("postgres", raw)
		if err != nil {
			sharedErr = err
			return
		}
		db.SetMaxIdleConns(2)
		sharedSrv = &server{base: u, admin: db}
	})
	return sharedSrv, sharedErr
}

// dbURL is the URL of database name on the server.
func (s *server) dbURL(name string) string {
	u := *s.base
	u.Path = "/" + name
	return u.String()
}

// userURL is the URL of database name for user (the test server trusts
// local connections: no password).
func (s *server) userURL(name, user string) string {
	u := *s.base
	u.Path = "/" + name
	u.User = url.User(user)
	return u.String()
}

// ServiceURL is dbURL (a database of the test server) for the login user
// the service runs as (migrate.ServiceLogin, a member of its group role
// with the role's settings), created the first time it is asked for.
func ServiceURL(t testing.TB, dbURL, service string) string {
	t.Helper()
	s, err := shared()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	login := migrate.ServiceLogin(service)
	if err := migrate.EnsureLogin(ctx, s.admin, login, "", migrate.ServiceRole(service)); err != nil {
		t.Fatalf("pgtest: login for %s: %v", service, err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.User = url.User(login)
	return u.String()
}

// template returns the name of the migrated template database, creating it
// the first time (once per server and migration set).
func (s *server) template() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tpl != "" {
		return s.tpl, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := migrate.Embedded()
	if err != nil {
		return "", err
	}
	name, err := templateName(dir)
	if err != nil {
		return "", err
	}
	conn, err := s.admin.Conn(ctx)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", migrate.Redact(s.base.String()), err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", templateLock); err != nil {
		return "", err
	}
	defer func() {
		// Best effort: the lock also ends with the session.
		_, _ = conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", templateLock)
	}()

	// A template that no longer accepts connections is complete; one that
	// does is the leftover of a build that died half-way.
	var allowConn bool
	switch err := conn.QueryRowContext(ctx, "SELECT datallowconn FROM pg_database WHERE datname = $1", name).Scan(&allowConn); {
	case err == nil && !allowConn:
		s.tpl = name
		return name, nil
	case err == nil:
		if _, err := conn.ExecContext(ctx, "ALTER DATABASE "+pq.QuoteIdentifier(name)+" IS_TEMPLATE false"); err != nil {
			return "", err
		}
		if _, err := conn.ExecContext(ctx, "DROP DATABASE "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
			return "", err
		}
	case !errors.Is(err, sql.ErrNoRows):
		return "", err
	}
	// The migrations run as the schema's owner, as in production: a
	// login with CREATEROLE, not a superuser.
	if err := migrate.EnsureOwner(ctx, s.admin, ""); err != nil {
		return "", err
	}
	if _, err := conn.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)+" TEMPLATE template0 OWNER "+pq.QuoteIdentifier(migrate.OwnerRole)); err != nil {
		return "", err
	}
	if _, err := migrate.Apply(ctx, s.userURL(name, migrate.OwnerRole), dir); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	// Apply closed its connections; refuse new ones, then wait for the
	// closing backends to leave so that the first clones do not fail.
	if _, err := conn.ExecContext(ctx, "ALTER DATABASE "+pq.QuoteIdentifier(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", err
	}
	if err := waitIdle(ctx, conn, name); err != nil {
		return "", err
	}
	s.tpl = name
	return name, nil
}

// templateName derives the template's name from atlas.sum, whose first line
// hashes every migration file.
func templateName(dir atlasmigrate.Dir) (string, error) {
	sum, err := fs.ReadFile(dir, atlasmigrate.HashFileName)
	if err != nil {
		return "", fmt.Errorf("read atlas.sum: %w", err)
	}
	h := sha256.Sum256(sum)
	return "pin_tpl_" + hex.EncodeToString(h[:4]), nil
}

// waitIdle polls until no session is connected to database name.
func waitIdle(ctx context.Context, conn *sql.Conn, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("database %s still has %d session(s) after 30s", name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// create makes a new database from template tpl and drops it at cleanup.
func (s *server) create(t testing.TB, tpl string) string {
	t.Helper()
	name := "pin_test_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stmt := "CREATE DATABASE " + pq.QuoteIdentifier(name) + " TEMPLATE " + pq.QuoteIdentifier(tpl)
	for attempt := 1; ; attempt++ {
		_, err := s.admin.ExecContext(ctx, stmt)
		if err == nil {
			break
		}
		// 55006 object_in_use: "source database … is being accessed by
		// other users" — a session on the template is still ending.
		var pe *pq.Error
		if !errors.As(err, &pe) || pe.Code != "55006" || ctx.Err() != nil {
			t.Fatalf("pgtest: %s: %v", stmt, err)
		}
		time.Sleep(time.Duration(min(attempt, 20)) * 10 * time.Millisecond)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.dbURL(name)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Bouncer starts a PgBouncer (localpg.StartBouncer: by default in
// transaction mode with four server connections per database and user) in
// front of the server of dbURL, and returns dbURL through it; o.Users may
// log in through it too. It stops when the test ends. Migrations and setup go to the server
// directly. Without pgbouncer installed the test is skipped, or fails when
// CI is true (.ci/run installs it).
func Bouncer(t testing.TB, dbURL string, o localpg.BouncerOptions) string {
	t.Helper()
	if _, err := localpg.PgBouncerPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: %v", err)
		}
		t.Skipf("pgtest: %v", err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost") {
		t.Fatalf("pgtest: a bouncer needs a server on 127.0.0.1 with a port, not %s", u.Host)
	}
	dir, err := localpg.MkdirTemp("pgtest-bouncer-*")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	db := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o.Users = append([]string{u.User.Username()}, o.Users...)
	b, err := localpg.StartBouncer(ctx, dir, port, db, o)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	u.Host = "127.0.0.1:" + strconv.Itoa(b.Port())
	return u.String()
}
