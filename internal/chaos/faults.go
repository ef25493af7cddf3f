package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Faults says which faults a run brings. The seed decides when, for how
// long and to whom.
type Faults struct {
	Kills    int  // consumer processes killed with SIGKILL (and started again)
	Crash    bool // one PostgreSQL crash (pg_ctl stop -m immediate) and restart
	ReadOnly bool // one window in which every write is refused with 25006
	Broker   bool // kfake: offset commits failing, fetch errors, DLQ publishes refused, a slow coordinator, leaders and coordinators moving, connections dropped
}

// fault is one planned fault.
type fault struct {
	at     time.Duration // from the first event produced
	kind   string
	target string        // the instance, service or topic it hits
	hold   time.Duration // how long it lasts
	code   *kerr.Error   // broker faults: the error answered
}

const (
	faultKill       = "kill -9"
	faultCrash      = "postgres crash"
	faultReadOnly   = "read-only"
	faultCommits    = "offset commits fail"
	faultFetch      = "fetches fail"
	faultDLQ        = "dead letters refused"
	faultSlow       = "slow coordinator"
	faultLeaders    = "partition leaders move"
	faultCoordMoves = "group coordinators move"
	faultDrops      = "connections dropped"
)

// planFaults places the faults in the first span of the run (the time it
// takes to produce the events), from seed. instances are the consumer
// processes that may be killed, topics the source topics, dlqs their DLQs.
func planFaults(seed uint64, f Faults, span time.Duration, instances, topics, dlqs []string) []fault {
	rng := rand.New(rand.NewPCG(seed, 0xfa017))
	at := func() time.Duration { return time.Duration((0.1 + 0.7*rng.Float64()) * float64(span)) }
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var out []fault
	// Kills go round the instances in a seeded order, so that several
	// kills hit several groups.
	order := slices.Clone(instances)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i := range f.Kills {
		out = append(out, fault{at: at(), kind: faultKill, target: order[i%len(order)], hold: between(500*time.Millisecond, 3*time.Second)})
	}
	if f.Crash {
		out = append(out, fault{at: at(), kind: faultCrash, hold: between(time.Second, 4*time.Second)})
	}
	if f.ReadOnly {
		out = append(out, fault{at: at(), kind: faultReadOnly, hold: between(3*time.Second, 8*time.Second)})
	}
	if f.Broker {
		commitErrs := []*kerr.Error{kerr.CoordinatorNotAvailable, kerr.NotCoordinator, kerr.RequestTimedOut, kerr.CoordinatorLoadInProgress}
		fetchErrs := []*kerr.Error{kerr.NotLeaderForPartition, kerr.UnknownServerError, kerr.KafkaStorageError}
		out = append(out,
			fault{at: at(), kind: faultCommits, hold: between(2*time.Second, 6*time.Second), code: commitErrs[rng.IntN(len(commitErrs))]},
			fault{at: at(), kind: faultFetch, target: topics[rng.IntN(len(topics))], hold: between(2*time.Second, 5*time.Second), code: fetchErrs[rng.IntN(len(fetchErrs))]},
			fault{at: at(), kind: faultDLQ, target: dlqs[rng.IntN(len(dlqs))], hold: between(2*time.Second, 5*time.Second), code: kerr.TopicAuthorizationFailed},
			fault{at: at(), kind: faultSlow, hold: between(2*time.Second, 5*time.Second)},
			fault{at: at(), kind: faultLeaders},
			fault{at: at(), kind: faultCoordMoves},
			fault{at: at(), kind: faultDrops},
		)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

func (f fault) String() string {
	s := f.kind
	if f.target != "" {
		s += " " + f.target
	}
	if f.code != nil {
		s += " (" + f.code.Message + ")"
	}
	if f.hold > 0 {
		s += fmt.Sprintf(" for %.1fs", f.hold.Seconds())
	}
	return s
}

// readOnlyFunction is the body of the trigger function that makes the
// database read-only (on) or not (off). Switching it is a CREATE OR
// REPLACE FUNCTION: no table lock, no restart.
func readOnlyFunction(on bool) string {
	body := `BEGIN RETURN NULL; END`
	if on {
		body = `BEGIN RAISE EXCEPTION 'chaos: the database is read-only' USING ERRCODE = 'read_only_sql_transaction'; END`
	}
	return `CREATE OR REPLACE FUNCTION chaos_read_only() RETURNS trigger LANGUAGE plpgsql AS $$ ` + body + ` $$`
}

// installReadOnly puts a statement-level trigger of chaos_read_only (off)
// on every table of the public schema: what the services write.
func installReadOnly(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, readOnlyFunction(false)); err != nil {
		return err
	}
	tables, err := publicTables(ctx, db)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TRIGGER chaos_read_only BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %q FOR EACH STATEMENT EXECUTE FUNCTION chaos_read_only()`, t)); err != nil {
			return fmt.Errorf("read-only trigger on %s: %w", t, err)
		}
	}
	return nil
}

// removeReadOnly drops the triggers and their function.
func removeReadOnly(ctx context.Context, db *sql.DB) error {
	tables, err := publicTables(ctx, db)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`DROP TRIGGER IF EXISTS chaos_read_only ON %q`, t)); err != nil {
			return err
		}
	}
	_, err = db.ExecContext(ctx, `DROP FUNCTION IF EXISTS chaos_read_only()`)
	return err
}

func publicTables(ctx context.Context, db *sql.DB) ([]string, error) {
	rs, err := db.QueryContext(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var t string
		if err := rs.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rs.Err()
}

// retry runs fn until it succeeds or ctx ends, every 200 ms: what the
// run itself writes must get through the faults it makes.
func retry(ctx context.Context, fn func(context.Context) error) error {
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// brokerFaults are the faults kfake plays.
type brokerFaults struct {
	c      *kfake.Cluster
	topics map[string]int // source topics → partitions
	rng    *rand.Rand
	mu     sync.Mutex
}

// failing answers every request of key (on topic, when given) with code
// until hold is over.
func (b *brokerFaults) failing(ctx context.Context, key kmsg.Key, topic string, code *kerr.Error, hold time.Duration) {
	h := b.c.Fault(kfake.Fault{Keys: []kmsg.Key{key}, Topic: topic, Err: code, Count: -1})
	sleep(ctx, hold)
	h.Remove()
}

// slow delays the group coordinator's answers (joins, syncs, heartbeats,
// offset commits and fetches of offsets) by 200–800 ms each until hold is
// over. A delayed request holds up the ones behind it on its connection.
func (b *brokerFaults) slow(ctx context.Context, hold time.Duration) {
	end := time.Now().Add(hold)
	for _, k := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.OffsetCommit, kmsg.OffsetFetch} {
		b.c.ControlKey(int16(k), func(kmsg.Request) (kmsg.Response, error, bool) {
			if time.Now().After(end) {
				b.c.DropControl()
				return nil, nil, false
			}
			b.mu.Lock()
			d := time.Duration(200+b.rng.IntN(600)) * time.Millisecond
			b.mu.Unlock()
			b.c.SleepControl(func() { time.Sleep(d) })
			return nil, nil, false
		})
	}
	sleep(ctx, hold)
}

// moveLeaders moves the leader of each source partition to another broker.
func (b *brokerFaults) moveLeaders() error {
	for topic, n := range b.topics {
		for p := range int32(n) {
			leader := b.c.LeaderFor(topic, p)
			b.mu.Lock()
			to := (leader + 1 + int32(b.rng.IntN(2))) % 3
			b.mu.Unlock()
			if err := b.c.MoveTopicPartition(topic, p, to); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropConnections closes the connection of the next few fetches, one
// after the other.
func (b *brokerFaults) dropConnections(ctx context.Context) {
	for range 3 {
		dropped := make(chan struct{})
		b.c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
			close(dropped)
			return nil, errors.New("chaos: connection dropped"), true
		})
		select {
		case <-dropped:
		case <-ctx.Done():
			return
		}
		sleep(ctx, 300*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// describe is a fault's line in the run's output.
func describe(f fault, at time.Duration, what ...string) string {
	return fmt.Sprintf("  +%5.1fs  %s%s", at.Seconds(), f, strings.Join(what, ""))
}
