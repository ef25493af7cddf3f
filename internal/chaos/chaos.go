package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/lib/pq" // database/sql driver "postgres"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/roster"
	"github.com/pin-platform/pin/internal/freeport"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/localpg"
)

// Options of a run.
type Options struct {
	Seed      uint64
	Events    int      // per consumer
	Services  []string // only these (rewards, messenger, crm); all when empty
	Rate      float64  // events produced per second and consumer
	Instances int      // consumer processes per group
	Faults    Faults
	// RetryWindow is how long a retry-later schedule takes (each service's
	// RETRY_TIME_SCALE is set for it): a message waiting for a chat or a
	// lead that never comes reaches the DLQ this long after its first try.
	RetryWindow time.Duration
	// Timeout bounds the wait for the consumers to finish once every event
	// is produced and every fault is over.
	Timeout time.Duration
	BinDir  string   // where bin/*-consumers are
	Env     []string // more KEY=VALUE for the consumers (knobs such as CONSUMER_BATCH_SIZE)
	Keep    bool     // keep the work directory (PostgreSQL's data, the consumers' logs)
	Out     io.Writer

	// Pooler puts PgBouncer in transaction mode (four server connections
	// per service) between the consumers and PostgreSQL; setup, checks and
	// faults go to PostgreSQL directly.
	Pooler bool
}

// Defaults are `make chaos`'s: 20,000 events per consumer, two
// instances per group, four kills, a PostgreSQL crash, a read-only window
// and the broker's faults.
func Defaults() Options {
	return Options{Seed: 1, Events: 20000, Rate: 500, Instances: 2,
		Faults:      Faults{Kills: 4, Crash: true, ReadOnly: true, Broker: true},
		RetryWindow: 20 * time.Second, Timeout: 5 * time.Minute, Out: io.Discard}
}

// Short is the CI-sized run: a few thousand events, one kill, one
// read-only window, the broker's faults.
func Short() Options {
	o := Defaults()
	o.Events, o.Rate = 3000, 150
	o.Faults = Faults{Kills: 1, ReadOnly: true, Broker: true}
	o.RetryWindow = 10 * time.Second
	return o
}

// Result is a run's outcome: one tally per service, and what went wrong
// with the run beyond what the database shows.
type Result struct {
	Services []*Tally
	// Problems: a consumer that exited on its own or did not stop
	// cleanly, consumers that did not finish in time.
	Problems []string
	WorkDir  string // kept: Options.Keep, or a run that is not OK
	Took     time.Duration
}

// OK reports a run where every service matched its model and nothing else
// went wrong. A run that Run ended with an error is not OK either.
func (r *Result) OK() bool {
	if len(r.Services) == 0 {
		return false
	}
	for _, t := range r.Services {
		if !t.OK() {
			return false
		}
	}
	return len(r.Problems) == 0
}

// database is the database the consumers write to.
const database = "pin"

type run struct {
	o         Options
	svcs      []*service
	work      string
	pg        *localpg.Server
	bouncer   *localpg.Bouncer
	db        *sql.DB // as the superuser: setup, faults, checks
	bootstrap string
	kc        *kfake.Cluster
	instances []*instance
	exits     chan exit
	t0        time.Time // the first event produced
	stopping  atomic.Bool

	mu       sync.Mutex
	problems []string
}

func (r *run) say(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.o.Out, format+"\n", args...)
}

func (r *run) problem(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.problems = append(r.problems, s)
	r.mu.Unlock()
	r.say("  ! %s", s)
}

// since is the time since the first event was produced.
func (r *run) since() time.Duration { return time.Since(r.t0) }

// Run brings up PostgreSQL, kfake and the consumers, produces the events
// while the faults play, waits for the consumers to finish, and compares
// the database and the DLQs with the model of what was produced.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Events < 1 || o.Rate <= 0 || o.Instances < 1 || o.RetryWindow <= 0 || o.Timeout <= 0 {
		return nil, errors.New("chaos: events, rate, instances, retry window and timeout must be positive")
	}
	start := time.Now()
	svcs, err := services(o.Services, o.Seed, o.Events, o.RetryWindow)
	if err != nil {
		return nil, err
	}
	for _, s := range svcs {
		if _, err := consumerBinary(o.BinDir, s.Service); err != nil {
			return nil, err
		}
	}
	r := &run{o: o, svcs: svcs, exits: make(chan exit, 64)}
	res := &Result{}
	if r.work, err = localpg.MkdirTemp("pinctl-chaos-*"); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(r.work, "logs"), 0o755); err != nil {
		return nil, err
	}
	defer func() {
		res.Took = time.Since(start)
		if o.Keep || !res.OK() {
			res.WorkDir = r.work
			return
		}
		os.RemoveAll(r.work)
	}()
	err = r.run(ctx, res)
	r.mu.Lock()
	res.Problems = append(res.Problems, r.problems...)
	r.mu.Unlock()
	return res, err
}

func (r *run) run(ctx context.Context, res *Result) error {
	o := r.o
	var names []string
	for _, s := range r.svcs {
		names = append(names, s.Service)
	}
	r.say("chaos: seed %d, %d events per consumer (%s) at %.0f/s, %d instances per group; work directory %s",
		o.Seed, o.Events, strings.Join(names, ", "), o.Rate, o.Instances, r.work)

	defer r.stopPostgres()
	if err := r.startPostgres(ctx); err != nil {
		return err
	}
	var topics, dlqs []string
	for _, s := range r.svcs {
		topics, dlqs = append(topics, s.Name), append(dlqs, s.DLQ)
	}
	var err error
	r.kc, r.bootstrap, err = startBroker(topicsOf(r.svcs))
	if err != nil {
		return err
	}
	defer r.kc.Close()
	defer r.stopConsumers()
	superCtx, stopSupervising := context.WithCancel(ctx)
	defer stopSupervising()
	go r.supervise(superCtx)
	if err := r.startConsumers(ctx); err != nil {
		return err
	}

	p, err := newProducer(r.bootstrap)
	if err != nil {
		return err
	}
	defer p.close()
	span := time.Duration(float64(o.Events) / o.Rate * float64(time.Second))
	var instNames []string
	for _, in := range r.instances {
		instNames = append(instNames, in.name)
	}
	plan := planFaults(o.Seed, o.Faults, span, instNames, topics, dlqs)
	r.say("producing takes %.0fs; %d faults meanwhile (times from the first event on):", span.Seconds(), len(plan))

	// Produce, play the faults and provision what comes late, together.
	// Whatever way the run ends, those end before the consumers stop.
	var feeding, background sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); feeding.Wait(); background.Wait() }()
	r.t0 = time.Now()
	var produced atomic.Int64
	feedErr := make(chan error, len(r.svcs))
	for _, s := range r.svcs {
		feeding.Add(1)
		go func() {
			defer feeding.Done()
			if err := p.feed(ctx, s.Name, s.events, o.Rate, r.t0, &produced); err != nil {
				feedErr <- err
			}
		}()
	}
	allProduced := make(chan struct{})
	lateCtx, stopLate := context.WithCancel(ctx)
	defer stopLate()
	background.Add(2)
	go func() { defer background.Done(); r.provisionLate(lateCtx, allProduced) }()
	bf := &brokerFaults{c: r.kc, topics: map[string]int{}, rng: newGen(o.Seed, 0xb40c3).rng}
	for _, s := range r.svcs {
		bf.topics[s.Name] = s.Partitions
	}
	faultsDone := make(chan struct{})
	go func() { defer background.Done(); defer close(faultsDone); r.playFaults(ctx, plan, bf) }()

	feeding.Wait()
	close(feedErr)
	if err := <-feedErr; err != nil {
		return err
	}
	if err := p.wait(ctx); err != nil {
		return err
	}
	close(allProduced)
	r.say("  +%5.1fs  every event produced (%d)", r.since().Seconds(), produced.Load())
	if n := p.failed.Load(); n > 0 {
		r.problem("%d events could not be produced (last error: %v); the model leaves them out", n, p.lastErr.Load())
	}
	select {
	case <-faultsDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := r.waitDone(ctx); err != nil {
		r.problem("%v", err)
	}
	stopLate()
	background.Wait()
	r.say("  +%5.1fs  done; comparing the database and the DLQs with the model", r.since().Seconds())

	if err := retry(ctx, func(ctx context.Context) error { return removeReadOnly(ctx, r.db) }); err != nil {
		return err
	}
	for _, s := range r.svcs {
		t, err := r.check(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Service, err)
		}
		res.Services = append(res.Services, t)
	}
	r.stopConsumers()
	return nil
}

func topicsOf(svcs []*service) []demo.Topic {
	out := make([]demo.Topic, len(svcs))
	for i, s := range svcs {
		out[i] = s.Topic
	}
	return out
}

// databaseURL is a service's DATABASE_URL: the one place where it is
// built. Every consumer logs in as its service's login (a member of its
// group role: its own tables and rows, no DDL), as in production.
func (r *run) databaseURL(service string) string {
	if r.bouncer != nil {
		return r.bouncer.URLAs(migrate.ServiceLogin(service), database)
	}
	return r.pg.URLAs(migrate.ServiceLogin(service), database)
}

// startPostgres starts a private PostgreSQL in the work directory, with
// the database migrated, the rows other components own and the read-only
// trigger (off). fsync is off (the server's process crashes, not the
// machine), but every commit waits for its WAL write
// (synchronous_commit): an immediate stop loses commits not yet written,
// which would be the server's loss, not the consumers'.
func (r *run) startPostgres(ctx context.Context) error {
	var err error
	if r.pg, err = localpg.Start(ctx, filepath.Join(r.work, "postgres"), localpg.Options{}); err != nil {
		return err
	}
	admin, err := sql.Open("postgres", r.pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	// The migrations run as the schema's owner, not the superuser.
	if err := migrate.EnsureOwner(ctx, admin, ""); err != nil {
		return err
	}
	for _, q := range []string{`CREATE DATABASE ` + database + ` OWNER ` + migrate.OwnerRole, `ALTER DATABASE ` + database + ` SET synchronous_commit = on`} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	dir, err := migrate.Embedded()
	if err != nil {
		return err
	}
	if _, err := migrate.Apply(ctx, r.pg.URLAs(migrate.OwnerRole, database), dir); err != nil {
		return err
	}
	for _, s := range roster.All {
		svc := s.Name()
		if err := migrate.EnsureLogin(ctx, admin, migrate.ServiceLogin(svc), "", migrate.ServiceRole(svc)); err != nil {
			return err
		}
	}
	if r.db, err = sql.Open("postgres", r.pg.URL(database)); err != nil {
		return err
	}
	r.db.SetMaxOpenConns(4)
	if err := installReadOnly(ctx, r.db); err != nil {
		return err
	}
	for _, s := range r.svcs {
		for _, st := range s.setup {
			if _, err := r.db.ExecContext(ctx, st.sql, st.args...); err != nil {
				return fmt.Errorf("%s: provision: %w", s.Service, err)
			}
		}
	}
	if r.o.Pooler {
		dir := filepath.Join(r.work, "pgbouncer")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		if cred, err := localpg.PostgresUser(); err == nil && os.Geteuid() == 0 {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
		var users []string
		for _, s := range r.svcs {
			users = append(users, migrate.ServiceLogin(s.Service))
		}
		if r.bouncer, err = localpg.StartBouncer(ctx, dir, r.pg.Port(), database, localpg.BouncerOptions{Users: users}); err != nil {
			return err
		}
		r.say("pgbouncer in transaction mode on port %d (4 server connections per service) between the consumers and PostgreSQL", r.bouncer.Port())
	}
	return nil
}

func (r *run) stopPostgres() {
	if r.bouncer != nil {
		if err := r.bouncer.Stop(); err != nil {
			r.say("  ! stopping pgbouncer: %v", err)
		}
	}
	if r.db != nil {
		r.db.Close()
	}
	if r.pg == nil {
		return
	}
	if err := r.pg.Stop(); err != nil {
		r.say("  ! stopping PostgreSQL: %v", err)
	}
}

// startConsumers starts Instances processes of each service and waits
// until each has joined its group.
func (r *run) startConsumers(ctx context.Context) error {
	for _, s := range r.svcs {
		bin, err := consumerBinary(r.o.BinDir, s.Service)
		if err != nil {
			return err
		}
		env := append(os.Environ(),
			"KAFKA_BOOTSTRAP_SERVERS="+r.bootstrap,
			"DATABASE_URL="+r.databaseURL(s.Service),
			"LOG_LEVEL=info",
			"RETRY_TIME_SCALE="+strconv.FormatFloat(s.retryScale, 'g', 4, 64),
			// A killed member's partitions move after its session times
			// out; kfake allows short ones.
			"KAFKA_SESSION_TIMEOUT_MS=4000",
			"KAFKA_HEARTBEAT_INTERVAL_MS=400",
		)
		env = append(env, r.o.Env...)
		for n := 1; n <= r.o.Instances; n++ {
			addr, err := freeport.Addr()
			if err != nil {
				return err
			}
			in := &instance{name: fmt.Sprintf("%s#%d", s.Service, n), bin: bin, env: env, addr: addr,
				logPath: filepath.Join(r.work, "logs", fmt.Sprintf("%s-%d.log", s.Service, n))}
			if err := in.start(r.exits); err != nil {
				return err
			}
			r.instances = append(r.instances, in)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, in := range r.instances {
		for !in.ready() {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s is not ready after 90 s (log: %s)", in.name, in.logPath)
			}
			sleep(ctx, 200*time.Millisecond)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	r.say("consumers: %d processes joined their groups (logs in %s)", len(r.instances), filepath.Join(r.work, "logs"))
	return nil
}

// supervise starts again a consumer that exited by itself, and says so: a
// finding of the run.
func (r *run) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ex := <-r.exits:
			if r.stopping.Load() {
				continue
			}
			r.problem("%s exited by itself with code %d (log: %s, its last line: %s); started again",
				ex.in.name, ex.code, ex.in.logPath, lastLine(ex.in.logPath))
			sleep(ctx, time.Second)
			if err := ex.in.start(r.exits); err != nil {
				r.problem("%v", err)
			}
		}
	}
}

// stopConsumers stops every process (SIGTERM) and records those that do
// not exit 0. It runs once.
func (r *run) stopConsumers() {
	if r.stopping.Swap(true) {
		return
	}
	var wg sync.WaitGroup
	for _, in := range r.instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := in.stop(30 * time.Second); code != 0 {
				r.problem("%s exited with code %d on SIGTERM (log: %s)", in.name, code, in.logPath)
			}
		}()
	}
	wg.Wait()
}

func (r *run) instance(name string) *instance {
	for _, in := range r.instances {
		if in.name == name {
			return in
		}
	}
	return nil
}

// playFaults plays the plan: each fault at its time, in its own goroutine,
// and returns when all are over.
func (r *run) playFaults(ctx context.Context, plan []fault, bf *brokerFaults) {
	var wg sync.WaitGroup
	for _, f := range plan {
		sleep(ctx, time.Until(r.t0.Add(f.at)))
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.play(ctx, f, bf)
		}()
	}
	wg.Wait()
}

func (r *run) play(ctx context.Context, f fault, bf *brokerFaults) {
	at := r.since()
	switch f.kind {
	case faultKill:
		in := r.instance(f.target)
		in.faults.Lock()
		defer in.faults.Unlock()
		at = r.since()
		pid := in.pid()
		in.kill()
		r.say("%s", describe(f, at, fmt.Sprintf(": pid %d killed", pid)))
		sleep(ctx, f.hold)
		if err := in.start(r.exits); err != nil {
			r.problem("start %s again: %v", in.name, err)
			return
		}
		r.say("  +%5.1fs  %s started again (pid %d)", r.since().Seconds(), in.name, in.pid())
	case faultCrash:
		if err := r.pg.Crash(ctx); err != nil {
			r.problem("crash PostgreSQL: %v", err)
			return
		}
		r.say("%s", describe(f, at, ": pg_ctl stop -m immediate"))
		sleep(ctx, f.hold)
		if err := retry(ctx, r.pg.Restart); err != nil {
			r.problem("restart PostgreSQL: %v", err)
			return
		}
		r.say("  +%5.1fs  postgres restarted", r.since().Seconds())
	case faultReadOnly:
		set := func(on bool) error {
			return retry(ctx, func(ctx context.Context) error {
				_, err := r.db.ExecContext(ctx, readOnlyFunction(on))
				return err
			})
		}
		if err := set(true); err != nil {
			r.problem("read-only on: %v", err)
			return
		}
		r.say("%s", describe(f, r.since(), ": every write refused with 25006"))
		sleep(ctx, f.hold)
		if err := set(false); err != nil {
			r.problem("read-only off: %v", err)
			return
		}
		r.say("  +%5.1fs  writable again", r.since().Seconds())
	case faultCommits:
		r.say("%s", describe(f, at))
		bf.failing(ctx, kmsg.OffsetCommit, "", f.code, f.hold)
	case faultFetch:
		r.say("%s", describe(f, at))
		bf.failing(ctx, kmsg.Fetch, f.target, f.code, f.hold)
	case faultDLQ:
		r.say("%s", describe(f, at))
		bf.failing(ctx, kmsg.Produce, f.target, f.code, f.hold)
	case faultSlow:
		r.say("%s", describe(f, at))
		bf.slow(ctx, f.hold)
	case faultLeaders:
		if err := bf.moveLeaders(); err != nil {
			r.problem("move partition leaders: %v", err)
			return
		}
		r.say("%s", describe(f, at))
	case faultCoordMoves:
		bf.c.RehashCoordinators()
		r.say("%s", describe(f, at))
	case faultDrops:
		r.say("%s", describe(f, at, ": the next three fetches' connections closed"))
		bf.dropConnections(ctx)
	}
}

// provisionLate creates the late chats and leads: each once a message
// waiting for it is parked, the rest once every event is produced.
func (r *run) provisionLate(ctx context.Context, allProduced <-chan struct{}) {
	var rows []*lateRow
	for _, s := range r.svcs {
		rows = append(rows, s.late...)
	}
	waited, after := 0, 0
	defer func() {
		if waited+after > 0 {
			r.say("  +%5.1fs  %d chats and leads provisioned late: %d once a message waited for them, %d after the last event",
				r.since().Seconds(), waited+after, waited, after)
		}
	}()
	for {
		produced := false
		select {
		case <-allProduced:
			produced = true
		default:
		}
		parked, err := r.parkedKeys(ctx)
		left := 0
		for _, l := range rows {
			if l.done {
				continue
			}
			waiting := err == nil && slices.ContainsFunc(l.keys, func(k string) bool { return parked[k] })
			if waiting || produced {
				if _, err := r.db.ExecContext(ctx, l.step.sql, l.step.args...); err == nil {
					l.done = true
					if waiting {
						waited++
					} else {
						after++
					}
					continue
				}
			}
			left++
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *run) parkedKeys(ctx context.Context) (map[string]bool, error) {
	rs, err := r.db.QueryContext(ctx, `SELECT DISTINCT key FROM parked_messages WHERE key IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]bool{}
	for rs.Next() {
		var k []byte
		if err := rs.Scan(&k); err != nil {
			return nil, err
		}
		out[string(k)] = true
	}
	return out, rs.Err()
}

// waitDone waits until every group committed its topic's high watermarks
// and no message waits in parked_messages, with every consumer running.
func (r *run) waitDone(ctx context.Context) error {
	v, err := newView(r.bootstrap)
	if err != nil {
		return err
	}
	defer v.close()
	deadline := time.Now().Add(r.o.Timeout)
	lastSaid := time.Now()
	for {
		behind, parked, err := r.progress(ctx, v)
		if err == nil && behind == 0 && parked == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the consumers did not finish in %s: %v", r.o.Timeout, err)
			}
			return fmt.Errorf("the consumers did not finish in %s: %d messages not committed, %d parked", r.o.Timeout, behind, parked)
		}
		if time.Since(lastSaid) > 15*time.Second {
			lastSaid = time.Now()
			if err != nil {
				r.say("  +%5.1fs  waiting (%v)", r.since().Seconds(), err)
			} else {
				r.say("  +%5.1fs  waiting: %d messages not committed, %d parked", r.since().Seconds(), behind, parked)
			}
		}
		sleep(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// progress is how many messages the groups have not committed yet and
// how many wait parked.
func (r *run) progress(ctx context.Context, v *view) (behind int64, parked int, err error) {
	for _, s := range r.svcs {
		hi, err := v.highWatermarks(s.Name, s.Partitions)
		if err != nil {
			return 0, 0, err
		}
		done, err := v.committed(s.Group, s.Name, s.Partitions)
		if err != nil {
			return 0, 0, err
		}
		for p := range hi {
			behind += max(0, hi[p]-done[p])
		}
	}
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM parked_messages`).Scan(&parked); err != nil {
		return 0, 0, err
	}
	return behind, parked, nil
}

// check reads a service's topic, DLQ and marks back and compares them and
// its tables with the model.
func (r *run) check(ctx context.Context, s *service) (*Tally, error) {
	t := &Tally{service: s.Service}
	msgs, err := readTopic(ctx, r.bootstrap, s.Name, s.Partitions)
	if err != nil {
		return nil, err
	}
	recs := make([]record, 0, len(msgs))
	for _, m := range msgs {
		v, ok := header(m, headerSeq)
		seq, err := strconv.Atoi(v)
		if !ok || err != nil || seq < 0 || seq >= len(s.events) {
			return nil, fmt.Errorf("%s[%d]@%d has no %s header the run made", s.Name, m.TopicPartition.Partition, m.TopicPartition.Offset, headerSeq)
		}
		recs = append(recs, record{pos: pos{m.TopicPartition.Partition, int64(m.TopicPartition.Offset)}, ev: s.events[seq]})
	}
	dead, err := readTopic(ctx, r.bootstrap, s.DLQ, s.Partitions)
	if err != nil {
		return nil, err
	}
	dlq := map[pos][]string{}
	for _, m := range dead {
		code, _ := header(m, consumer.HeaderErrorCode)
		ps, _ := header(m, consumer.HeaderOriginalPartition)
		offs, _ := header(m, consumer.HeaderOriginalOffset)
		p, err1 := strconv.Atoi(ps)
		o, err2 := strconv.ParseInt(offs, 10, 64)
		if err1 != nil || err2 != nil {
			t.addWrong("a dead letter without its source position (%s[%d]@%d)", s.DLQ, m.TopicPartition.Partition, m.TopicPartition.Offset)
			continue
		}
		k := pos{int32(p), o}
		if !slices.Contains(dlq[k], code) {
			dlq[k] = append(dlq[k], code)
		}
	}
	marks := map[string]string{}
	rs, err := r.db.QueryContext(ctx, `SELECT idempotency_key, outcome FROM processed_messages WHERE consumer_group = $1`, s.Group)
	if err != nil {
		return nil, err
	}
	for rs.Next() {
		var k, out string
		if err := rs.Scan(&k, &out); err != nil {
			rs.Close()
			return nil, err
		}
		marks[k] = out
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if err := s.check(ctx, r.db, t, recs, marks, dlq); err != nil {
		return nil, err
	}
	return t, nil
}
