package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/localpg"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// The faults production brings most often, on real PostgreSQL, one test
// each. Each proves: no dead letter, the partitions paused
// (pin_consumer_paused_partitions) with the cause counted, /readyz 503
// naming it, nothing lost, every effect applied exactly once after the fault
// is cleared, and the consumer never restarted.

// wave produces perPartition probe events on every partition, each for a
// lead of its own, and returns the leads.
func (e *env) wave(perPartition int) []uuid.UUID {
	e.t.Helper()
	var leads []uuid.UUID
	for p := int32(0); p < 3; p++ {
		for i := 0; i < perPartition; i++ {
			l := e.lead()
			leads = append(leads, l)
			_, v := envelope(l, "")
			e.produce(p, v)
		}
	}
	return leads
}

// appliedOnce fails the test unless every lead has exactly one lead event
// and the DLQ is empty.
func (e *env) appliedOnce(leads []uuid.UUID) {
	e.t.Helper()
	for _, l := range leads {
		if n := e.events(l); n != 1 {
			e.t.Fatalf("lead %s: %d lead_events, want exactly 1", l, n)
		}
	}
	if n := e.cluster.Count(e.t, probeDLQ); n != 0 {
		e.t.Fatalf("DLQ holds %d, want 0", n)
	}
}

// heldWithoutDeadLetters checks the DLQ stays empty while the fault holds.
func (e *env) heldWithoutDeadLetters(f faultWatch, cause string) {
	e.t.Helper()
	f.held(3, cause)
	if n := e.cluster.Count(e.t, probeDLQ); n != 0 {
		e.t.Fatalf("DLQ holds %d while the fault holds, want 0", n)
	}
}

// A failover: the consumer's database is a hot standby (made with
// pg_basebackup -R, so every write fails with 25006, and BEGIN READ WRITE
// with 0A000), which is then promoted. The same DATABASE_URL works once it
// is a primary, as after a DNS or VIP switch to the new primary.
func TestAFailoverToAPromotedStandbyWaitsThenAppliesEverythingOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, err := localpg.MkdirTemp("pin-failover-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	primary, err := localpg.Start(ctx, filepath.Join(dir, "primary"), localpg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	if _, err := migrate.Apply(ctx, primary.URL("postgres"), mustEmbedded(t)); err != nil {
		t.Fatal(err)
	}
	standby, err := primary.Standby(ctx, filepath.Join(dir, "standby"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })

	e := &env{t: t, cluster: kafkatest.NewCluster(t, map[string]int{probeTopic: 3, probeDLQ: 3}), url: standby.URL("postgres")}
	e.db = openDB(t, primary.URL("postgres")) // the leads are created on the primary
	leads := e.wave(2)
	standbyDB := openDB(t, e.url)
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		var n int
		_ = standbyDB.QueryRow(`SELECT count(*) FROM leads`).Scan(&n)
		return n == len(leads)
	}, "the standby to replay the leads")
	if _, err := standbyDB.Exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Active')`); !isSQLState(err, "25006") {
		t.Fatalf("a write on the standby: %v, want 25006 (read-only)", err)
	}

	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{HTTP: true, StuckAfter: faultStuckAfter})
	f := faultWatch{t: t, run: run}
	// database/sql begins READ WRITE: the standby refuses the BEGIN itself
	// with 0A000 ("cannot set transaction read-write mode during recovery").
	e.heldWithoutDeadLetters(f, "0A")

	_ = primary.Stop() // the old primary is gone; the standby takes over
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	e.db = standbyDB
	e.waitCommitted(int64(len(leads)))
	f.recovered()
	e.appliedOnce(leads)
}

// A privilege revoked under a running consumer (a DBA's mistake, a role
// migration half done) and granted back. The consumer connects as a role
// that is neither the tables' owner nor a superuser: only such a role gets
// 42501.
func TestARevokedPrivilegeWaitsUntilGrantedBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := "probe_" + uuid.NewString()[:8]
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ` + role,
		`GRANT USAGE ON SCHEMA atlas_schema_revisions TO ` + role,
		`GRANT SELECT ON atlas_schema_revisions.atlas_schema_revisions TO ` + role,
		// The marks and parked rows have row-level security: the probe's.
		`CREATE POLICY ` + role + ` ON processed_messages TO ` + role + ` USING (topic = '` + probeTopic + `') WITH CHECK (topic = '` + probeTopic + `')`,
		`CREATE POLICY ` + role + ` ON parked_messages TO ` + role + ` USING (topic = '` + probeTopic + `') WITH CHECK (topic = '` + probeTopic + `')`,
	} {
		if _, err := e.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = e.db.Exec(`DROP OWNED BY ` + role)
		_, _ = e.db.Exec(`DROP ROLE ` + role)
	})
	u, _ := url.Parse(e.url)
	u.User = url.User(role)
	run := consumertest.Start(t, e.cluster.Bootstrap, u.String(), probeService(long...), consumertest.Options{HTTP: true, StuckAfter: faultStuckAfter})
	first := e.wave(1)
	e.waitCommitted(int64(len(first)))

	if _, err := e.db.Exec(`REVOKE INSERT ON lead_events FROM ` + role); err != nil {
		t.Fatal(err)
	}
	second := e.wave(2)
	f := faultWatch{t: t, run: run}
	e.heldWithoutDeadLetters(f, "42")
	if _, err := e.db.Exec(`GRANT INSERT ON lead_events TO ` + role); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(int64(len(first) + len(second)))
	f.recovered()
	e.appliedOnce(append(first, second...))
}

// A column renamed under a running consumer (a migration applied ahead of
// the binaries that need it, or by hand) and renamed back.
func TestAColumnRenamedUnderARunningConsumerWaitsUntilRenamedBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{HTTP: true, StuckAfter: faultStuckAfter})
	first := e.wave(1)
	e.waitCommitted(int64(len(first)))

	if _, err := e.db.Exec(`ALTER TABLE lead_events RENAME COLUMN occurred_at TO occurred_at_renamed`); err != nil {
		t.Fatal(err)
	}
	second := e.wave(2)
	f := faultWatch{t: t, run: run}
	e.heldWithoutDeadLetters(f, "42")
	if _, err := e.db.Exec(`ALTER TABLE lead_events RENAME COLUMN occurred_at_renamed TO occurred_at`); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(int64(len(first) + len(second)))
	f.recovered()
	e.appliedOnce(append(first, second...))
}

// A consumer rolled out before its migration: the database is one
// migration behind the binary. It does not join its group (nothing is
// consumed), /readyz is 503 naming the missing version, the gate's gauge is
// 1; once `pinctl migrate apply` ran, it joins and applies everything.
func TestAConsumerStartedOneMigrationBehindJoinsOnceMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.url = pgtest.NewEmptyDB(t)
	e.db = openDB(t, e.url)
	full := mustEmbedded(t)
	files, err := full.Files()
	if err != nil || len(files) < 2 {
		t.Fatalf("migration files: %d, %v", len(files), err)
	}
	latest, previous := files[len(files)-1].Version(), files[len(files)-2].Version()
	behind, err := migrate.Upto(full, previous)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Apply(ctx, e.url, behind); err != nil {
		t.Fatal(err)
	}
	leads := e.wave(2)
	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{HTTP: true, StuckAfter: faultStuckAfter})
	f := faultWatch{t: t, run: run}
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		return run.Counter("pin_consumer_schema_behind", nil) == 1
	}, "the schema gate's gauge at 1")
	if code, body := f.get("/readyz"); code != 503 || !containsAll(body, latest, "pinctl migrate apply") {
		t.Fatalf("/readyz: %d %q, want 503 naming %s and pinctl migrate apply", code, body, latest)
	}
	if n := e.count(`SELECT count(*) FROM lead_events`); n != 0 {
		t.Fatalf("%d lead events applied behind the gate, want 0", n)
	}
	if c := e.committed(); c != 0 {
		t.Fatalf("committed offsets %d behind the gate: the consumer joined its group", c)
	}
	f.running()

	if _, err := migrate.Apply(ctx, e.url, full); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(int64(len(leads)))
	f.recovered()
	if n := run.Counter("pin_consumer_schema_behind", nil); n != 0 {
		t.Fatalf("schema gate gauge %v after the migration, want 0", n)
	}
	e.appliedOnce(leads)
}

func mustEmbedded(t *testing.T) atlasmigrate.Dir {
	t.Helper()
	d, err := migrate.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func openDB(t *testing.T, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func isSQLState(err error, code string) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && string(pqErr.Code) == code
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// `pinctl migrate apply` with a URL bound to a schema (search_path) keeps
// the migration history in that schema; a consumer given the same URL
// finds it there, joins its group and consumes.
func TestAConsumerFindsTheHistoryInTheSchemaOfItsURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	base := pgtest.NewEmptyDB(t)
	if _, err := openDB(t, base).Exec(`CREATE SCHEMA pin`); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", "pin")
	u.RawQuery = q.Encode()
	e.url = u.String()
	e.db = openDB(t, e.url)
	if _, err := migrate.Apply(ctx, e.url, mustEmbedded(t)); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM pg_tables WHERE schemaname = 'pin' AND tablename = 'atlas_schema_revisions'`); n != 1 {
		t.Fatalf("the history is not in schema pin (%d tables)", n)
	}
	leads := e.wave(2)
	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{HTTP: true})
	e.waitCommitted(int64(len(leads)))
	if n := run.Counter("pin_consumer_schema_behind", nil); n != 0 {
		t.Fatalf("schema gate gauge %v, want 0", n)
	}
	e.appliedOnce(leads)
}
