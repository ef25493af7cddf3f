package consumer_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/roster"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// Least privilege (migration 20261201120000_service_roles.sql): each
// service's role reads and writes its own tables and its own rows of
// processed_messages and parked_messages, runs no DDL and touches nothing of
// another service; what it is refused is a failure of the world (SQLSTATE
// class 42), which waits instead of dead-lettering.

// serviceTables are the tables each service writes, and a statement that
// writes one row of each.
var serviceTables = map[string][]string{
	"messenger": {
		`INSERT INTO chat_events (chat_id, type, user_id, role, occurred_at, source_message_id) VALUES (gen_random_uuid(), 'ParticipantJoined', gen_random_uuid(), 'CoAgent', now(), gen_random_uuid())`,
		`INSERT INTO chat_updates (chat_id, recipient_user_ids, revoked_user_ids) VALUES (gen_random_uuid(), '{}', '{}')`,
	},
	"rewards": {
		`INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at) VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Active', now(), 1, now())`,
	},
	"crm": {
		`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Active')`,
	},
}

// ownWrites write a row of a table of each service ($1: a chat, or a lead,
// that exists).
var ownWrites = map[string]string{
	"messenger": `INSERT INTO chat_events (chat_id, type, user_id, role, occurred_at, source_message_id) VALUES ($1, 'ParticipantJoined', gen_random_uuid(), 'CoAgent', now(), gen_random_uuid())`,
	"rewards":   `INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at) VALUES ($1, gen_random_uuid(), gen_random_uuid(), 'Active', now(), 1, now())`,
	"crm":       `INSERT INTO lead_events (lead_id, tenant_id, type, occurred_at, payload) SELECT id, tenant_id, 'SelectionAttached', now(), '{}' FROM leads WHERE id = $1`,
}

// topics are the services' source topics: their rows of the shared tables.
var topics = map[string]string{
	"messenger": "pin.crm.lead-participants-changed.v1",
	"rewards":   "pin.referral.bonds.v1",
	"crm":       "pin.selections.selection-shared.v1",
}

func TestEachServiceRoleWritesItsOwnAndNothingElse(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	admin := openDB(t, dbURL)
	for _, topic := range topics {
		if _, err := admin.Exec(`INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome)
			VALUES ($1, 'g', $2, 0, 0, 'applied')`, "other:"+topic, topic); err != nil {
			t.Fatal(err)
		}
	}
	// The chat and the lead other components provision.
	parent := uuid.New()
	if _, err := admin.Exec(`INSERT INTO chats (id, kind, lead_id) VALUES ($1, 'Lead', gen_random_uuid())`, parent); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Active')`, parent); err != nil {
		t.Fatal(err)
	}
	for _, s := range roster.All {
		svc := s.Name()
		t.Run(svc, func(t *testing.T) {
			if serviceTables[svc] == nil || ownWrites[svc] == "" || topics[svc] != s.Topic() {
				t.Fatalf("roster service %s: give it its tables, a write and its topic in serviceTables, ownWrites and topics", svc)
			}
			var hasRole bool
			if err := admin.QueryRow(`SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, migrate.ServiceRole(svc)).Scan(&hasRole); err != nil || !hasRole {
				t.Fatalf("roster service %s has no role %s (%v): add its role migration (README, \"Adding a consumer\")", svc, migrate.ServiceRole(svc), err)
			}
			db := openDB(t, pgtest.ServiceURL(t, dbURL, svc))
			prefix := s.New(prometheus.NewRegistry()).Routes()[0].KeyPrefix // a key of its own
			mark := func(topic string) error {
				_, err := db.Exec(`INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome) VALUES ($1, 'g', $2, 0, 0, 'applied')`,
					prefix+uuid.NewString(), topic)
				return err
			}
			refused := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: allowed, want refused", what)
				}
				if cause := consumer.InfraCause(err); cause != "42" {
					t.Fatalf("%s: %v is cause %q, want 42 (the world's failure: the partition waits, nothing is dead-lettered)", what, err, cause)
				}
			}
			// Its own: tables, marks.
			if _, err := db.Exec(ownWrites[svc], parent); err != nil {
				t.Fatalf("its own table: %v", err)
			}
			if err := mark(topics[svc]); err != nil {
				t.Fatalf("its own mark: %v", err)
			}
			var seen int
			if err := db.QueryRow(`SELECT count(*) FROM processed_messages WHERE topic <> $1`, topics[svc]).Scan(&seen); err != nil || seen != 0 {
				t.Fatalf("other services' marks visible: %d (%v), want 0", seen, err)
			}
			// Another service's tables and marks.
			for other, qs := range serviceTables {
				if other == svc {
					continue
				}
				for _, q := range qs {
					_, err := db.Exec(q)
					refused(other+"'s table", err)
				}
				refused(other+"'s marks", mark(topics[other]))
				_, err := db.Exec(`UPDATE parked_messages SET attempts = attempts WHERE topic = $1`, topics[other])
				if err != nil {
					t.Fatalf("an update of other rows should match none, not fail: %v", err)
				}
			}
			// No DDL.
			_, err := db.Exec(`CREATE TABLE intruder (id int)`)
			refused("CREATE TABLE", err)
			_, err = db.Exec(`ALTER TABLE processed_messages ADD COLUMN intruder int`)
			refused("ALTER TABLE", err)
			_, err = db.Exec(`DROP TABLE parked_messages`)
			refused("DROP TABLE", err)
			// The role's session defaults reach its login.
			for setting, want := range map[string]string{"statement_timeout": "30s", "lock_timeout": "10s", "idle_in_transaction_session_timeout": "1min"} {
				var got string
				if err := db.QueryRow("SHOW " + setting).Scan(&got); err != nil || got != want {
					t.Fatalf("%s = %q (%v), want %q", setting, got, err, want)
				}
			}
		})
	}
}

// A consumer deployed with another service's credentials: every write is
// refused (42501, a row-level policy), the partitions wait, nothing is
// dead-lettered.
func TestAConsumerRunningAsAnotherServicesRoleDeadLettersNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.wave(2)
	run := consumertest.Start(t, e.cluster.Bootstrap, pgtest.ServiceURL(t, e.url, "rewards"), probeService(long...), consumertest.Options{HTTP: true, StuckAfter: faultStuckAfter})
	e.heldWithoutDeadLetters(faultWatch{t: t, run: run}, "42")
}

// routePrefixes are the idempotency key prefixes of each roster service's
// routes: the keys its role may mark (migration
// 20261202160000_marks_bound_to_routes.sql). A route added without its
// prefix in that role's policy fails TestEachServiceRoleMarksOnlyItsOwnRoutesKeys.
func routePrefixes(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range roster.All {
		for _, r := range s.New(prometheus.NewRegistry()).Routes() {
			if r.KeyPrefix == "" {
				t.Fatalf("%s route %s has no key prefix", s.Name(), r.EventType)
			}
			out[s.Name()] = append(out[s.Name()], r.KeyPrefix)
		}
	}
	return out
}

// Marks are bound to their service: a role inserts and reads only keys of
// its own routes' prefixes, under its own topic. Another service's key is
// refused (42501) whatever the topic, before any unique conflict: the
// refusal is the same whether the key exists or not, and a SELECT of it
// sees nothing — a role can neither squat another service's mark nor
// learn that it exists.
func TestEachServiceRoleMarksOnlyItsOwnRoutesKeys(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	admin := openDB(t, dbURL)
	prefixes := routePrefixes(t)
	const insert = `INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome)
VALUES ($1, 'g', $2, 0, 0, 'applied') ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key`
	// Every route's mark of an existing message, written as the owner.
	existing := map[string][]string{} // service → keys
	for _, s := range roster.All {
		for _, p := range prefixes[s.Name()] {
			k := p + uuid.NewString()
			if _, err := admin.Exec(insert, k, s.Topic()); err != nil {
				t.Fatal(err)
			}
			existing[s.Name()] = append(existing[s.Name()], k)
		}
	}
	for _, s := range roster.All {
		t.Run(s.Name(), func(t *testing.T) {
			db := openDB(t, pgtest.ServiceURL(t, dbURL, s.Name()))
			inserted := func(key, topic string) (bool, error) {
				rows, err := db.Query(insert, key, topic)
				if err != nil {
					return false, err
				}
				defer rows.Close()
				n := rows.Next()
				return n, rows.Err()
			}
			refusal := func(key, topic string) string {
				t.Helper()
				ok, err := inserted(key, topic)
				if err == nil {
					t.Fatalf("mark %s under %s: allowed (inserted %v), want refused", key, topic, ok)
				}
				if !isSQLState(err, "42501") {
					t.Fatalf("mark %s under %s: %v, want 42501 (a row-level policy)", key, topic, err)
				}
				return err.Error()
			}
			// Its own routes: a new key is inserted, an existing one is a
			// conflict (the duplicate signal), and both are visible.
			for i, p := range prefixes[s.Name()] {
				k := p + uuid.NewString()
				if ok, err := inserted(k, s.Topic()); err != nil || !ok {
					t.Fatalf("its own route's mark %s: inserted %v, %v", k, ok, err)
				}
				if ok, err := inserted(existing[s.Name()][i], s.Topic()); err != nil || ok {
					t.Fatalf("its own existing mark %s: inserted %v, %v (want a conflict, nothing returned)", existing[s.Name()][i], ok, err)
				}
				var n int
				if err := db.QueryRow(`SELECT count(*) FROM processed_messages WHERE idempotency_key = ANY ($1)`, pq.Array([]string{k, existing[s.Name()][i]})).Scan(&n); err != nil || n != 2 {
					t.Fatalf("its own marks visible: %d (%v), want 2", n, err)
				}
			}
			// A key of no route of its own, under its own topic.
			refusal(s.Name()+":"+uuid.NewString(), s.Topic())
			// Another service's keys, existing or not, under either topic:
			// refused alike, and invisible.
			for _, o := range roster.All {
				if o.Name() == s.Name() {
					continue
				}
				for i, p := range prefixes[o.Name()] {
					for _, topic := range []string{s.Topic(), o.Topic()} {
						fresh := refusal(p+uuid.NewString(), topic)
						taken := refusal(existing[o.Name()][i], topic)
						if fresh != taken {
							t.Fatalf("%s's key under %s: refused as %q when it exists, %q when not: the refusal tells", o.Name(), topic, taken, fresh)
						}
					}
					var n int
					if err := db.QueryRow(`SELECT count(*) FROM processed_messages WHERE idempotency_key = $1 OR starts_with(idempotency_key, $2)`, existing[o.Name()][i], p).Scan(&n); err != nil || n != 0 {
						t.Fatalf("%s's marks visible: %d (%v), want 0", o.Name(), n, err)
					}
					if res, err := db.Exec(`UPDATE processed_messages SET outcome = 'applied' WHERE idempotency_key = $1`, existing[o.Name()][i]); err != nil {
						t.Fatalf("an update of another service's mark should match none, not fail: %v", err)
					} else if n, _ := res.RowsAffected(); n != 0 {
						t.Fatalf("an update of another service's mark changed %d rows", n)
					}
				}
			}
		})
	}
}

// No service role creates in schema public, even where PUBLIC was given
// CREATE there (PostgreSQL ≤ 14's default): the migrations revoke it.
func TestNoServiceRoleCreatesInPublicEvenWherePublicHadCreate(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDB(t)
	admin := openDB(t, dbURL)
	if _, err := admin.Exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	dir, err := migrate.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Apply(context.Background(), dbURL, dir); err != nil {
		t.Fatal(err)
	}
	for _, s := range roster.All {
		db := openDB(t, pgtest.ServiceURL(t, dbURL, s.Name()))
		_, err := db.Exec(`CREATE TABLE public.intruder_` + s.Name() + ` (id int)`)
		if err == nil || !isSQLState(err, "42501") {
			t.Fatalf("%s: CREATE TABLE in public: %v, want 42501", s.Name(), err)
		}
	}
}
