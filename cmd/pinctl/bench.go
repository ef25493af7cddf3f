package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/internal/devenv"
	"github.com/pin-platform/pin/internal/term"
	"github.com/pin-platform/pin/migrate/localpg"
)

func init() {
	register(command{name: "bench", summary: "throughput and latency of each consumer, with its broker limit and CPU per event (make bench)", run: runBench})
}

// benchWarmupTopic takes one message of the paced producer before its
// clock starts (no consumer reads it).
const benchWarmupTopic = "pin.bench.warmup"

// benchDB is the database the consumers write to, on the benchmark's own
// PostgreSQL.
const benchDB = "pin"

// benchFetchWaitMs is the consumers' fetch.wait.max.ms unless
// KAFKA_FETCH_WAIT_MAX_MS is given (see consumerEnv).
const benchFetchWaitMs = "5"

// The targets of issue 8, printed beside each measure (its fifth, ≥ 5× the
// 1-client rate of a pgbench model of the consumer's SQL, went with that
// model: bench/README.md, "Method").
const (
	targetBrokerRatio = 0.30
	targetP99         = 50 * time.Millisecond
	targetRSS         = 64 << 20
)

// targetPacedDB is the name of the first of the paced run's targets: the
// table prints the paced run's lines above it.
const targetPacedDB = "paced p99 produce → database commit"

type benchOptions struct {
	events   int
	only     string
	paced    time.Duration
	rate     float64
	chats    int
	leads    int
	timeout  time.Duration
	results  string
	seed     uint64
	keep     bool
	env      []string
	dbParams string
}

func runBench(ctx context.Context, args []string) error {
	fs := newFlags("bench", "bench [--events N] [--only SERVICE[,SERVICE]] [--env KEY=VALUE]…",
		"For each consumer (rewards, messenger, crm), on a local PostgreSQL with fsync and\n"+
			"synchronous_commit on and on the in-process broker:\n"+
			"  1. broker limit: N pre-produced messages consumed with the consumer's Kafka\n"+
			"     configuration (group, auto commit of stored offsets), no database work;\n"+
			"  2. the consumer: N realistic events (demo.Load) pre-produced, the real binary\n"+
			"     started and timed to the last offset committed, with the consumer's and\n"+
			"     PostgreSQL's CPU per event; then a paced run at half that rate with\n"+
			"     p50/p99 produce→commit latency;\n"+
			"  3. the consumer process's peak RSS.\n"+
			"Prints one table per consumer and adds the run to RESULTS/<date>.json.\n"+
			"Consumer knobs (CONSUMER_BATCH_SIZE, DATABASE_MAX_CONNS, LOG_LEVEL, KAFKA_*…)\n"+
			"come from the environment or --env; KAFKA_* apply to the broker-only loop too.\n"+
			"See bench/README.md.")
	o := benchOptions{}
	fs.IntVar(&o.events, "events", 100000, "events per consumer (N)")
	fs.StringVar(&o.only, "only", "", "comma-separated services to run (rewards, messenger, crm); default all")
	fs.DurationVar(&o.paced, "paced", 15*time.Second, "duration of the paced run at half the measured rate")
	fs.Float64Var(&o.rate, "paced-rate", 0, "events/s of the paced run instead of half the measured rate: the same load for every binary of an A/B comparison")
	fs.IntVar(&o.chats, "chats", 0, "lead chats of the messenger load (0: max(100, N/20), about 20 snapshots per chat)")
	fs.IntVar(&o.leads, "leads", 1000, "Active CRM leads the crm load shares over")
	sqlTime := fs.Duration("sql-time", 0, "ignored: the bound of the pgbench SQL limit, which was removed (accepted so that existing command lines still run)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "how long a consumer may take to commit the last offset")
	fs.StringVar(&o.results, "results", filepath.Join("bench", "results"), "directory of the JSON results (<date>.json)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the load generator")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (consumer logs, paced-run CSVs, PostgreSQL data)")
	fs.StringVar(&o.dbParams, "db-params", "", "extra query parameters of the consumer's DATABASE_URL, e.g. binary_parameters=yes")
	fs.Func("env", "KEY=VALUE for the consumer process (repeatable), e.g. CONSUMER_BATCH_SIZE=256", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		o.env = append(o.env, s)
		return nil
	})
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if o.events < 1 {
		return usageError("bench: --events must be ≥ 1")
	}
	if o.paced <= 0 {
		return usageError("bench: --paced must be > 0")
	}
	if o.rate < 0 {
		return usageError("bench: --paced-rate must be ≥ 0")
	}
	if o.chats <= 0 {
		o.chats = max(100, o.events/20)
	}
	if o.leads < 1 {
		return usageError("bench: --leads must be ≥ 1")
	}
	topics, err := benchTopics(o.only)
	if err != nil {
		return err
	}
	if *sqlTime != 0 {
		fmt.Println("▸ --sql-time is ignored: the pgbench SQL limit was removed (bench/README.md)")
	}
	b := &bench{benchOptions: o, out: os.Stdout, tty: term.IsTerminal(os.Stdout)}
	return b.run(ctx, topics)
}

func benchTopics(only string) ([]demo.Topic, error) {
	if only == "" {
		return demo.Topics, nil
	}
	var out []demo.Topic
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(demo.Topics, func(t demo.Topic) bool { return t.Service == name })
		if i < 0 {
			return nil, usageError(fmt.Sprintf("bench: unknown service %q (rewards, messenger, crm)", name))
		}
		out = append(out, demo.Topics[i])
	}
	return out, nil
}

type bench struct {
	benchOptions
	out io.Writer
	tty bool
	mu  sync.Mutex

	bin        string
	work       string
	srv        *localpg.Server
	postmaster int
	db         *sql.DB
	brokers    string
	childEnv   []string
	dbURL      string // the consumers' database, as the superuser: each runs as its login
	knobs      map[string]string
	overrides  kafka.ConfigMap // KAFKA_* of the consumer, for the broker-only loop
}

func (b *bench) say(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.out, format+"\n", args...)
}

// benchRun is one invocation's results, as written to the JSON file.
type benchRun struct {
	Started       time.Time          `json:"started"`
	Commit        string             `json:"commit"` // git HEAD, "+dirty" when consumers/ or cmd/ have changes
	Events        int                `json:"events"`
	Chats         int                `json:"messenger_chats"`
	Leads         int                `json:"crm_leads"`
	Seed          uint64             `json:"seed"`
	PacedSeconds  float64            `json:"paced_seconds"`
	Knobs         map[string]string  `json:"knobs"`
	Host          benchHost          `json:"host"`
	Consumers     []*serviceResult   `json:"consumers"`
	TargetsSource string             `json:"targets"`
	Targets       map[string]float64 `json:"target_values"`
}

type benchHost struct {
	Cores    int    `json:"cores"`
	MemMiB   int64  `json:"mem_mib"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
	Durable  string `json:"durability"`
	Load1    string `json:"load_avg_at_start"`
}

func (b *bench) run(ctx context.Context, topics []demo.Topic) error {
	var err error
	if b.bin, err = devenv.BinDir(); err != nil {
		return err
	}
	if b.work, err = localpg.MkdirTemp("pinctl-bench-*"); err != nil {
		return err
	}
	if b.keep {
		b.say("▸ work directory (kept): %s", b.work)
	} else {
		defer os.RemoveAll(b.work)
	}
	run := &benchRun{Started: time.Now(), Events: b.events, Chats: b.chats, Leads: b.leads, Seed: b.seed,
		PacedSeconds:  b.paced.Seconds(),
		TargetsSource: "issue 8: ≥ 30 % of broker-only, p99 ≤ 50 ms at half load, RSS ≤ 64 MiB, flat per-event cost 10k → 1M (its ≥ 5× the 1-client pgbench rate went with the pgbench model)",
		Targets: map[string]float64{"broker_ratio": targetBrokerRatio,
			"paced_p99_ms": float64(targetP99.Milliseconds()), "rss_mib": targetRSS >> 20}}
	run.Host = hostInfo()
	run.Commit = gitCommit()

	// PostgreSQL: durable (fsync, synchronous_commit and full_page_writes
	// at their defaults, all on), in the work directory.
	pgDir := filepath.Join(b.work, "postgres")
	b.say("▸ PostgreSQL: starting a durable local server (fsync on, synchronous_commit on) in %s …", pgDir)
	if b.srv, err = localpg.Start(ctx, pgDir, localpg.Options{Durable: true}); err != nil {
		return err
	}
	defer func() {
		if err := b.srv.Stop(); err != nil {
			b.say("! stopping PostgreSQL: %v", err)
		}
	}()
	b.postmaster = postmasterPID(pgDir)
	// As in production: migrated by the schema's owner, each consumer as
	// its service's login (row-level security included).
	dbURL, _, err := devenv.SetUpDatabase(ctx, b.srv.URL("postgres"), benchDB)
	if err != nil {
		return err
	}
	if b.db, err = sql.Open("postgres", dbURL); err != nil {
		return err
	}
	defer b.db.Close()
	var fsync, syncCommit string
	_ = b.db.QueryRowContext(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).
		Scan(&run.Host.Postgres, &fsync, &syncCommit)
	run.Host.Durable = "fsync=" + fsync + " synchronous_commit=" + syncCommit
	if fsync != "on" || syncCommit != "on" {
		return fmt.Errorf("the benchmark needs fsync and synchronous_commit on, the server has %s", run.Host.Durable)
	}

	// The broker.
	mc, err := kafka.NewMockCluster(1)
	if err != nil {
		return fmt.Errorf("start the in-process broker: %w", err)
	}
	defer mc.Close()
	for _, t := range topics {
		for _, name := range []string{t.Name, t.DLQ} {
			if err := mc.CreateTopic(name, t.Partitions, 1); err != nil {
				return fmt.Errorf("create topic %s: %w", name, err)
			}
		}
	}
	if err := mc.CreateTopic(benchWarmupTopic, 1, 1); err != nil {
		return fmt.Errorf("create topic %s: %w", benchWarmupTopic, err)
	}
	b.brokers = mc.BootstrapServers()
	b.say("▸ Kafka: in-process broker at %s", b.brokers)
	b.consumerEnv()
	run.Knobs = b.knobs
	if len(b.knobs) > 0 {
		b.say("▸ consumer knobs: %s", fmtKnobs(b.knobs))
	}

	for _, t := range topics {
		r, err := b.runService(ctx, t)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Service, err)
		}
		run.Consumers = append(run.Consumers, r)
		b.table(r)
	}
	path, err := writeBenchResults(b.results, run)
	if err != nil {
		return err
	}
	b.say("\n▸ results added to %s", path)
	return nil
}

// consumerEnv is the consumer processes' environment: pinctl's own, the
// --env pairs, then the broker and database of the benchmark. knobs are
// the settings that change the consumer's behaviour, for the record.
func (b *bench) consumerEnv() {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "KAFKA_BOOTSTRAP_SERVERS" || k == "DATABASE_URL" || k == "HTTP_ADDR" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, b.env...)
	// The mock broker answers a fetch that finds no data only after
	// fetch.wait.max.ms (500 ms by default) and does not cut the wait short
	// when data arrives, as Kafka does: a paced run would measure the mock's
	// wait. A short wait stands in for Kafka's long poll.
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "KAFKA_FETCH_WAIT_MAX_MS=") }) {
		env = append(env, "KAFKA_FETCH_WAIT_MAX_MS="+benchFetchWaitMs)
	}
	b.knobs = map[string]string{}
	b.overrides = kafka.ConfigMap{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "KAFKA_") && k != "KAFKA_BOOTSTRAP_SERVERS":
			b.knobs[k] = v
			b.overrides[strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "KAFKA_")), "_", ".")] = v
		case strings.HasPrefix(k, "CONSUMER_"), strings.HasPrefix(k, "OTEL_"),
			strings.HasPrefix(k, "DATABASE_") && k != "DATABASE_URL", k == "LOG_LEVEL", k == "RETRY_TIME_SCALE", k == "GOGC", k == "GOMEMLIMIT", k == "GOMAXPROCS":
			b.knobs[k] = v
		}
	}
	dbURL := b.srv.URL(benchDB)
	if b.dbParams != "" {
		dbURL += "&" + b.dbParams
		b.knobs["DATABASE_URL params"] = b.dbParams
	}
	b.childEnv = append(env, "KAFKA_BOOTSTRAP_SERVERS="+b.brokers)
	b.dbURL = dbURL
}

func fmtKnobs(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, " ")
}

// serviceResult is everything measured for one consumer.
type serviceResult struct {
	Service        string       `json:"service"`
	Topic          string       `json:"topic"`
	Partitions     int          `json:"partitions"`
	Events         int          `json:"events"`
	ProduceEPS     float64      `json:"produce_events_per_s"`
	PreProduced    int          `json:"pre_produced"` // the rest was produced during the max run, ahead of the consumer
	BrokerOnly     rateResult   `json:"broker_only"`
	Consumer       consumerRun  `json:"consumer"`
	Paced          pacedRun     `json:"paced"`
	RSSPeakMiB     float64      `json:"rss_peak_mib"`
	StatementCache stmtCacheUse `json:"statement_cache"` // over both runs
	ExitCode       int          `json:"exit_code"`
	Ratios         struct {
		ToBroker float64 `json:"to_broker_only"`
	} `json:"ratios"`
	Targets []targetCheck `json:"targets"`
}

// stmtCacheUse is what the consumer's statement cache did
// (pin_consumer_db_statement_cache_total).
type stmtCacheUse struct {
	Hits    float64 `json:"hits"`
	Misses  float64 `json:"misses"` // statements prepared
	First   float64 `json:"first"`  // run unprepared: the first time their connection saw them
	Evicted float64 `json:"evicted"`
}

type rateResult struct {
	Events      int     `json:"events"`
	EPS         float64 `json:"events_per_s"` // N / (start → last offset committed)
	Seconds     float64 `json:"seconds"`
	JoinSeconds float64 `json:"join_seconds"`                  // start → partitions assigned
	AssignedEPS float64 `json:"events_per_s_after_assignment"` // N / (assigned → last offset committed)
}

type consumerRun struct {
	rateResult
	// JoinEstimated: the consumer logged no "partitions assigned" line
	// (LOG_LEVEL above info); the broker-only loop's join time stands in.
	JoinEstimated bool    `json:"join_estimated,omitempty"`
	StartupS      float64 `json:"startup_seconds"`     // start → first event committed in the database
	SteadyEPS     float64 `json:"steady_events_per_s"` // first → last database commit (log lines)
	WallUsPer     float64 `json:"wall_us_per_event"`   // 1e6 / EPS
	CPUUsPer      float64 `json:"consumer_cpu_us_per_event"`
	PGUsPer       float64 `json:"postgres_cpu_us_per_event"`
	CPU           cpuUse  `json:"cpu"`
	RSSMiB        float64 `json:"rss_peak_mib_after_max_run"`
	// MinBacklog is the fewest produced-but-uncommitted messages seen while
	// events were still being produced (-1: all were pre-produced).
	MinBacklog int64 `json:"min_backlog_while_feeding"`
	// From the consumer's /metrics after the max run.
	BatchedEvents float64 `json:"batched_events"`           // events committed through the batch path (a lone message of a service with Prepare included)
	Batches       float64 `json:"batches"`                  // such transactions
	MeanBatch     float64 `json:"mean_batch_size"`          // batched_events / batches
	OffsetCommits float64 `json:"offset_commits,omitempty"` // the runtime's commits right after a store that Kafka took (pin_consumer_offset_commits_total{trigger="stored",result="committed"}); absent before 2026-12-01
	GoSysMiB      float64 `json:"go_sys_mib"`               // memory the Go runtime holds
	GoHeapMiB     float64 `json:"go_heap_inuse_mib"`        // of which heap in use
	RSSNowMiB     float64 `json:"rss_mib"`                  // process RSS at that moment
	// Over the max and paced runs together:
	Outcomes map[string]int `json:"outcomes"`
	DLQ      int64          `json:"dead_lettered"`
	Parked   int            `json:"parked"`
	Warnings map[string]int `json:"log_warnings"`
}

type pacedRun struct {
	TargetEPS float64 `json:"target_events_per_s"`
	FixedRate bool    `json:"fixed_rate,omitempty"` // --paced-rate, not half the measured rate
	ActualEPS float64 `json:"produced_events_per_s"`
	Events    int     `json:"events"`
	CPU       *cpuUse `json:"cpu,omitempty"` // first produce → last offset commit (absent before 2026-11-30 evening)
	// CPU seconds per paced event over the same span, and the paced
	// run's transactions (pin_consumer_batch_size), to set against the
	// max run's: a half load in small transactions costs more per event.
	// Absent before 2026-12-01.
	ConsumerUsPer float64 `json:"consumer_cpu_us_per_event,omitempty"`
	PGUsPer       float64 `json:"postgres_cpu_us_per_event,omitempty"`
	Batches       float64 `json:"batches,omitempty"`
	MeanBatch     float64 `json:"mean_batch_size,omitempty"`
	OffsetCommits float64 `json:"offset_commits,omitempty"`
	// produce → the event's database commit: the time of the consumer's
	// outcome log line, written right after the commit.
	DBp50ms float64 `json:"db_commit_p50_ms"`
	DBp99ms float64 `json:"db_commit_p99_ms"`
	DBmaxms float64 `json:"db_commit_max_ms"`
	DBn     int     `json:"db_commit_samples"`
	// The p99 of produce → database commit of the messages produced in
	// each whole second of the run (a last, partial second left out): a
	// run's p99 made by one stall shows as one bad second, a machine
	// too busy throughout as many. Absent before 2026-12-01.
	// A second none of whose messages has an outcome line is null.
	DBp99BySecondMs []*float64 `json:"db_commit_p99_by_second_ms,omitempty"`
	// produce → the offset committed to Kafka: the first poll (every 5 ms)
	// that saw the group's committed offset past the message.
	Offp50ms float64 `json:"offset_commit_p50_ms"`
	Offp99ms float64 `json:"offset_commit_p99_ms"`
	Offmaxms float64 `json:"offset_commit_max_ms"`
	Offn     int     `json:"offset_commit_samples"`
}

type targetCheck struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Target string `json:"target"`
	Met    bool   `json:"met"`
	NA     bool   `json:"not_measured,omitempty"` // e.g. no outcome log lines with LOG_LEVEL above info
	// Why says what a missed target would take, where the run tells.
	Why string `json:"why,omitempty"`
}

func nextOf(l *demo.Load, service string) func() demo.Event {
	switch service {
	case "rewards":
		return l.Rewards
	case "messenger":
		return l.Messenger
	}
	return l.CRM
}

func (b *bench) runService(ctx context.Context, t demo.Topic) (*serviceResult, error) {
	n := b.events
	r := &serviceResult{Service: t.Service, Topic: t.Name, Partitions: t.Partitions, Events: n}
	b.say("\n● %s: %s, %d partitions, %d events", t.Service, t.Name, t.Partitions, n)

	// The realistic load and what it needs provisioned.
	load := demo.NewLoad(b.seed, b.chats, b.leads)
	for _, st := range load.Setup() {
		if _, err := b.db.ExecContext(ctx, st.SQL, st.SQLArgs...); err != nil {
			return nil, fmt.Errorf("%s: %w", st.Say, err)
		}
	}
	next := nextOf(load, t.Service)

	// N events: as many pre-produced as the broker keeps (see feedBudget),
	// the rest produced during the consumer's run, ahead of it.
	f, err := newFeeder(b.brokers, t.Partitions)
	if err != nil {
		return nil, err
	}
	defer f.close()
	bar := term.NewProgress(b.out, b.tty, "produce", n)
	start := time.Now()
	pre, err := f.fill(ctx, next, n, bar)
	if err != nil {
		return nil, err
	}
	r.PreProduced = pre
	r.ProduceEPS = float64(pre) / time.Since(start).Seconds()
	bar.Done()
	if pre < n {
		b.say("  %d events pre-produced (the broker keeps ~5 MiB per partition); the other %d are produced during the run, ahead of the consumer", pre, n-pre)
	}

	w, err := newOffsetWatcher(b.brokers, t.Group, t.Name, t.Partitions)
	if err != nil {
		return nil, err
	}
	defer w.close()

	// 1. Broker limit, on the pre-produced events.
	b.say("  broker only …")
	if r.BrokerOnly, err = brokerOnly(ctx, b.brokers, t.Group+"-bench-broker-only", t.Name, pre, b.overrides, b.timeout); err != nil {
		return nil, err
	}
	r.BrokerOnly.Events = pre

	// 2. The consumer, then the paced run on the same process.
	if _, err := b.db.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return nil, err
	}
	logPath := filepath.Join(b.work, t.Service+"-consumer.log")
	pr, t0, err := b.startConsumer(t.Service, logPath)
	if err != nil {
		return nil, err
	}
	defer devenv.StopConsumers(pr) // no-op once stopped below
	end, err := b.maxRun(ctx, pr, logPath, w, f, next, t0, r)
	if err != nil {
		return nil, err
	}
	// Every event is produced: the feeder's producer, idle from now on,
	// goes, so that its threads and its poller (a goroutine in a cgo call
	// that returns every 100 ms) do not share the paced run's cores.
	f.close()
	b.say("  paced at %.0f events/s for %s …", b.pacedRate(r), b.paced)
	recs, obs, err := b.pacedRun(ctx, pr.Pid(), w, next, r)
	if err != nil {
		return nil, err
	}

	// 3. Peak RSS, then stop.
	if m, err := scrapeMetrics(pr.Addr); err == nil {
		r.Paced.setFromMetrics(m, &r.Consumer)
		for _, c := range []struct {
			dst    *float64
			result string
		}{{&r.StatementCache.Hits, "hit"}, {&r.StatementCache.Misses, "miss"}, {&r.StatementCache.First, "first"}, {&r.StatementCache.Evicted, "evicted"}} {
			*c.dst = seriesWith(m, "pin_consumer_db_statement_cache_total", `result="`+c.result+`"`)
		}
	}
	if rss, ok := peakRSS(pr.Pid()); ok {
		r.RSSPeakMiB = float64(rss) / (1 << 20)
	}
	r.ExitCode = devenv.StopConsumers(pr)
	if r.ExitCode != 0 {
		return nil, fmt.Errorf("the consumer exited with code %d (log: %s)", r.ExitCode, logPath)
	}

	// What the consumer's log and the database say.
	lg, err := readConsumerLog(logPath, end)
	if err != nil {
		return nil, err
	}
	if !lg.first.IsZero() {
		r.Consumer.StartupS = lg.first.Sub(t0).Seconds()
		if span := lg.lastMax.Sub(lg.first).Seconds(); span > 0 {
			r.Consumer.SteadyEPS = float64(lg.maxRun-1) / span
		}
	}
	r.Consumer.Warnings = lg.warnings
	r.Paced.fill(recs, obs, lg.at)
	if err := writePacedCSV(filepath.Join(b.work, t.Service+"-paced.csv"), recs, obs, lg.at); err != nil {
		return nil, err
	}
	if err := b.outcomes(ctx, t, w, r); err != nil {
		return nil, err
	}
	// Every event must have reached a final state: a mark, or the DLQ.
	marks := 0
	for _, v := range r.Consumer.Outcomes {
		marks += v
	}
	if want := r.Events + r.Paced.Events; marks+int(r.Consumer.DLQ) < want {
		return nil, fmt.Errorf("%d of %d events have a mark or a dead letter: the broker dropped messages before they were consumed", marks+int(r.Consumer.DLQ), want)
	}
	r.evaluate()
	return r, nil
}

// startConsumer starts the service's consumer binary with its log on
// logPath; t0 is the instant just before the start.
func (b *bench) startConsumer(service, logPath string) (*devenv.Consumer, time.Time, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("consumer log: %w", err)
	}
	t0 := time.Now()
	p, err := devenv.StartConsumer(b.bin, service, append(slices.Clone(b.childEnv), "DATABASE_URL="+devenv.ServiceURL(b.dbURL, service)), logf)
	if err != nil {
		return nil, t0, err
	}
	b.say("  consumer started (pid %d), log %s", p.Pid(), logPath)
	return p, t0, nil
}

// maxRun waits until the group committed the offsets of all N events,
// producing those that were not pre-produced ahead of the consumer, and
// records the rate from the process start to that moment, and the CPU every
// party used meanwhile. It returns the high watermarks after the N events.
func (b *bench) maxRun(ctx context.Context, p *devenv.Consumer, logPath string, w *offsetWatcher, f *feeder, next func() demo.Event, t0 time.Time, r *serviceResult) ([]int64, error) {
	pid := p.Pid()
	// The CPU figures cover the time from the partitions' assignment (the
	// group join before it is idle) to the last commit, like the rate.
	cpu0, cpu0At, joined := takeCPU(pid, b.postmaster), time.Now(), false
	s := startCommitSampler(w, 10*time.Millisecond)
	bar := term.NewProgress(b.out, b.tty, "consume", r.Events)
	deadline := t0.Add(b.timeout)
	var end []int64
	minBacklog := int64(-1)
	for {
		cur := s.current()
		produced, high := f.state()
		var got, backlog int64
		done := produced == r.Events
		for i, h := range high {
			got += min(max(cur[i], 0), h)
			backlog += h - max(cur[i], 0)
			if cur[i] < h {
				done = false
			}
		}
		bar.Set(int(got))
		if done {
			end = high
			break
		}
		if !joined { // until the line is found, or progress says LOG_LEVEL hides it
			_, err := assignedAt(logPath)
			if err == nil {
				cpu0, cpu0At = takeCPU(pid, b.postmaster), time.Now()
			}
			joined = err == nil || got > 0
		}
		if produced < r.Events {
			if minBacklog < 0 || backlog < minBacklog {
				minBacklog = backlog
			}
			if f.room(cur) {
				if err := f.produce(ctx, next, min(feedChunk, r.Events-produced)); err != nil {
					s.close()
					return nil, err
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			s.close()
			return nil, ctx.Err()
		case <-p.Done():
			s.close()
			return nil, fmt.Errorf("the consumer exited with code %d before committing every offset", p.ExitCode())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, fmt.Errorf("the consumer did not commit every offset in %s (%d of %d)", b.timeout, got, r.Events)
		}
	}
	r.Consumer.MinBacklog = minBacklog
	cpu1, cpu1At := takeCPU(pid, b.postmaster), time.Now()
	obs := s.close()
	bar.Done()
	// The last offset's commit time: when the last partition was first
	// seen complete.
	var last time.Time
	for i, e := range end {
		if at, ok := commitTime(obs[i], e-1); ok && at.After(last) {
			last = at
		}
	}
	c := &r.Consumer
	c.Seconds = last.Sub(t0).Seconds()
	c.EPS = float64(r.Events) / c.Seconds
	assigned, err := assignedAt(logPath)
	if err != nil {
		// LOG_LEVEL above info hides the line: take the join time the
		// broker-only loop measured on the same broker.
		assigned = t0.Add(time.Duration(r.BrokerOnly.JoinSeconds * float64(time.Second)))
		c.JoinEstimated = true
	}
	c.JoinSeconds = assigned.Sub(t0).Seconds()
	c.AssignedEPS = float64(r.Events) / last.Sub(assigned).Seconds()
	c.WallUsPer = 1e6 / c.AssignedEPS
	c.CPU = cpuBetween(cpu0, cpu1, cpu1At.Sub(cpu0At).Seconds(), runtime.NumCPU())
	c.CPUUsPer = (cpu1.consumer - cpu0.consumer) / float64(r.Events) * 1e6
	c.PGUsPer = (cpu1.postgres - cpu0.postgres) / float64(r.Events) * 1e6
	if rss, ok := peakRSS(pid); ok {
		c.RSSMiB = float64(rss) / (1 << 20)
	}
	if m, err := scrapeMetrics(p.Addr); err == nil {
		c.BatchedEvents, c.Batches = m["pin_consumer_batch_size_sum"], m["pin_consumer_batch_size_count"]
		c.OffsetCommits = storedCommits(m)
		if c.Batches > 0 {
			c.MeanBatch = c.BatchedEvents / c.Batches
		}
		c.GoSysMiB = m["go_memstats_sys_bytes"] / (1 << 20)
		c.GoHeapMiB = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
		c.RSSNowMiB = m["process_resident_memory_bytes"] / (1 << 20)
	}
	return end, nil
}

// scrapeMetrics reads the consumer's Prometheus text exposition: each
// family's samples summed over their labels, and each series by its full
// name (name{labels}).
func scrapeMetrics(addr string) (map[string]float64, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[name] += v
			if name != line[:i] {
				out[line[:i]] = v // the series too
			}
		}
	}
	return out, sc.Err()
}

// seriesWith sums the series of family that have every one of labels
// (name="value") among their labels.
func seriesWith(m map[string]float64, family string, labels ...string) float64 {
	sum := 0.0
series:
	for k, v := range m {
		have, ok := strings.CutPrefix(k, family+"{")
		if !ok {
			continue
		}
		pairs := strings.Split(strings.TrimSuffix(have, "}"), ",")
		for _, l := range labels {
			if !slices.Contains(pairs, l) {
				continue series
			}
		}
		sum += v
	}
	return sum
}

// storedCommits is how many offset commits the runtime made right after
// offsets were stored and Kafka took (not the ones that found nothing to
// commit or failed).
func storedCommits(m map[string]float64) float64 {
	return seriesWith(m, "pin_consumer_offset_commits_total", `trigger="stored"`, `result="committed"`)
}

// pacedRate is the paced run's rate: half the measured one, or --paced-rate.
func (b *bench) pacedRate(r *serviceResult) float64 {
	if b.rate > 0 {
		return b.rate
	}
	return r.Consumer.AssignedEPS / 2
}

// pacedRun produces at pacedRate for --paced and samples the committed
// offsets every 5 ms until every paced message is committed. The CPU
// figures cover the same span: first produce to last commit.
func (b *bench) pacedRun(ctx context.Context, pid int, w *offsetWatcher, next func() demo.Event, r *serviceResult) ([]produced, [][]commitObs, error) {
	rate := b.pacedRate(r)
	count := max(1, int(rate*b.paced.Seconds()))
	r.Paced.TargetEPS, r.Paced.Events, r.Paced.FixedRate = rate, count, b.rate > 0
	s := startCommitSampler(w, 5*time.Millisecond)
	cpu0, cpu0At := takeCPU(pid, b.postmaster), time.Now()
	recs, err := pacedProduce(ctx, b.brokers, next, count, rate)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	if span := recs[len(recs)-1].at.Sub(recs[0].at); span > 0 {
		r.Paced.ActualEPS = float64(count-1) / span.Seconds()
	}
	want := map[int32]int64{}
	for _, rc := range recs {
		want[rc.partition] = max(want[rc.partition], rc.offset+1)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cur := s.current()
		done := true
		for p, o := range want {
			if cur[p] < o {
				done = false
			}
		}
		if done {
			cpu1, cpu1At := takeCPU(pid, b.postmaster), time.Now()
			r.Paced.CPU = new(cpuBetween(cpu0, cpu1, cpu1At.Sub(cpu0At).Seconds(), runtime.NumCPU()))
			r.Paced.ConsumerUsPer = (cpu1.consumer - cpu0.consumer) / float64(count) * 1e6
			r.Paced.PGUsPer = (cpu1.postgres - cpu0.postgres) / float64(count) * 1e6
			break
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, nil, errors.New("paced run: not every message was committed within 2 minutes")
		}
		select {
		case <-ctx.Done():
			s.close()
			return nil, nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return recs, s.close(), nil
}

type msgPos struct {
	partition int32
	offset    int64
}

// fill computes the paced run's latency percentiles.
func (pr *pacedRun) fill(recs []produced, obs [][]commitObs, dbAt map[msgPos]time.Time) {
	var db, off []time.Duration
	var bySecond [][]time.Duration // db, by the second of the run the message was produced in
	var t0 time.Time
	if len(recs) > 0 {
		t0 = recs[0].at
	}
	for _, rc := range recs {
		if !rc.ok {
			continue
		}
		if at, ok := dbAt[msgPos{rc.partition, rc.offset}]; ok {
			db = append(db, at.Sub(rc.at))
			sec := int(rc.at.Sub(t0) / time.Second)
			for len(bySecond) <= sec {
				bySecond = append(bySecond, nil)
			}
			bySecond[sec] = append(bySecond[sec], at.Sub(rc.at))
		}
		if int(rc.partition) < len(obs) {
			if at, ok := commitTime(obs[rc.partition], rc.offset); ok {
				off = append(off, at.Sub(rc.at))
			}
		}
	}
	pr.DBp50ms, pr.DBp99ms, pr.DBmaxms, pr.DBn = percentiles(db)
	pr.DBp99BySecondMs = nil
	if len(bySecond) > 1 {
		// The last second is whole when the run's last message was due
		// no earlier than one interval before its end.
		var every time.Duration
		if pr.TargetEPS > 0 {
			every = time.Duration(float64(time.Second) / pr.TargetEPS)
		}
		if recs[len(recs)-1].at.Sub(t0)+every < time.Duration(len(bySecond))*time.Second {
			bySecond = bySecond[:len(bySecond)-1]
		}
	}
	for _, ds := range bySecond {
		_, p99, _, n := percentiles(ds)
		var v *float64
		if n > 0 {
			v = new(math.Round(p99*10) / 10)
		}
		pr.DBp99BySecondMs = append(pr.DBp99BySecondMs, v)
	}
	pr.Offp50ms, pr.Offp99ms, pr.Offmaxms, pr.Offn = percentiles(off)
}

// writePacedCSV writes each paced message's times (for --keep): produced,
// committed in the database, offset committed, in ms since the first.
func writePacedCSV(path string, recs []produced, obs [][]commitObs, dbAt map[msgPos]time.Time) error {
	if len(recs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("partition,offset,produced_ms,acked_ms,db_commit_ms,offset_commit_ms\n")
	t0 := recs[0].at
	ms := func(t time.Time, ok bool) string {
		if !ok {
			return ""
		}
		return strconv.FormatFloat(float64(t.Sub(t0))/float64(time.Millisecond), 'f', 3, 64)
	}
	for _, rc := range recs {
		db, okDB := dbAt[msgPos{rc.partition, rc.offset}]
		var off time.Time
		okOff := false
		if int(rc.partition) < len(obs) {
			off, okOff = commitTime(obs[rc.partition], rc.offset)
		}
		fmt.Fprintf(&b, "%d,%d,%s,%s,%s,%s\n", rc.partition, rc.offset, ms(rc.at, true), ms(rc.acked, rc.ok), ms(db, okDB), ms(off, okOff))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// setFromMetrics sets the paced run's transactions and its offset commits
// right after a store (storedCommits) from the consumer's metrics after
// it, less the max run's (scraped at its end, right before).
func (pr *pacedRun) setFromMetrics(m map[string]float64, maxRun *consumerRun) {
	if n := m["pin_consumer_batch_size_count"] - maxRun.Batches; n > 0 {
		pr.Batches = n
		pr.MeanBatch = (m["pin_consumer_batch_size_sum"] - maxRun.BatchedEvents) / n
	}
	pr.OffsetCommits = storedCommits(m) - maxRun.OffsetCommits
}

// summarizeSeconds says how the per-second p99s of a paced run compare
// with the target: the median second, the worst one and when it was, and
// how many seconds were within the target.
func summarizeSeconds(p99s []*float64, target time.Duration) string {
	limit := float64(target) / float64(time.Millisecond)
	var measured []float64
	worst, within := -1, 0
	for i, v := range p99s {
		if v == nil { // no outcome line from that second: not counted
			continue
		}
		measured = append(measured, *v)
		if worst < 0 || *v > *p99s[worst] {
			worst = i
		}
		if *v <= limit {
			within++
		}
	}
	if len(measured) == 0 {
		return ""
	}
	slices.Sort(measured)
	s := fmt.Sprintf("median second %s, worst %s (second %d); %d of %d seconds ≤ %s",
		fmtMs(measured[(len(measured)-1)/2]), fmtMs(*p99s[worst]), worst, within, len(measured), fmtMs(limit))
	if n := len(p99s) - len(measured); n > 0 {
		s += fmt.Sprintf(" (%d without outcome lines)", n)
	}
	return s
}

// percentiles returns p50, p99 and max in milliseconds (nearest rank).
func percentiles(ds []time.Duration) (p50, p99, mx float64, n int) {
	if len(ds) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), 0
	}
	slices.Sort(ds)
	rank := func(q float64) float64 {
		i := max(int(math.Ceil(q*float64(len(ds))))-1, 0)
		return float64(ds[i]) / float64(time.Millisecond)
	}
	return rank(0.50), rank(0.99), float64(ds[len(ds)-1]) / float64(time.Millisecond), len(ds)
}

// consumerLog is what the consumer's JSON log lines say: when each message
// reached its final state (the outcome line is written right after the
// database commit), the first and last of the max run, and the warnings.
type consumerLog struct {
	at       map[msgPos]time.Time // messages of the paced run
	first    time.Time
	lastMax  time.Time
	maxRun   int
	warnings map[string]int
}

func readConsumerLog(path string, end []int64) (*consumerLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lg := &consumerLog{at: map[msgPos]time.Time{}, warnings: map[string]int{}}
	var line struct {
		Time      time.Time `json:"time"`
		Level     string    `json:"level"`
		Message   string    `json:"message"`
		Partition *int32    `json:"partition"`
		Offset    *int64    `json:"offset"`
		Outcome   string    `json:"outcome"`
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 256*1024), 4<<20)
	outcomeKey, warnKey, errKey := []byte(`"outcome":`), []byte(`"level":"warn"`), []byte(`"level":"error"`)
	for sc.Scan() {
		raw := sc.Bytes()
		isOutcome := bytes.Contains(raw, outcomeKey)
		if !isOutcome && !bytes.Contains(raw, warnKey) && !bytes.Contains(raw, errKey) {
			continue
		}
		line.Partition, line.Offset, line.Outcome, line.Message, line.Level = nil, nil, "", "", ""
		if json.Unmarshal(raw, &line) != nil {
			continue
		}
		if line.Level == "warn" || line.Level == "error" {
			lg.warnings[line.Level+": "+line.Message]++
		}
		if line.Outcome == "" || line.Partition == nil || line.Offset == nil {
			continue
		}
		p, o := *line.Partition, *line.Offset
		if int(p) < len(end) && o < end[p] {
			lg.maxRun++
			if lg.first.IsZero() || line.Time.Before(lg.first) {
				lg.first = line.Time
			}
			if line.Time.After(lg.lastMax) {
				lg.lastMax = line.Time
			}
			continue
		}
		if _, seen := lg.at[msgPos{p, o}]; !seen {
			lg.at[msgPos{p, o}] = line.Time
		}
	}
	return lg, sc.Err()
}

// assignedAt returns the time of the consumer's first "partitions
// assigned" log line.
func assignedAt(path string) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 256*1024), 4<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"partitions assigned"`)) {
			continue
		}
		var line struct {
			Time time.Time `json:"time"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return time.Time{}, err
		}
		return line.Time, nil
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, fmt.Errorf("%s: no \"partitions assigned\" line", path)
}

// outcomes reads the idempotency marks by outcome, the DLQ and the parked
// messages of the service's group.
func (b *bench) outcomes(ctx context.Context, t demo.Topic, w *offsetWatcher, r *serviceResult) error {
	rows, err := b.db.QueryContext(ctx, `SELECT outcome, count(*) FROM processed_messages WHERE consumer_group = $1 GROUP BY 1`, t.Group)
	if err != nil {
		return err
	}
	defer rows.Close()
	r.Consumer.Outcomes = map[string]int{}
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			return err
		}
		r.Consumer.Outcomes[o] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM parked_messages WHERE consumer_group = $1`, t.Group).Scan(&r.Consumer.Parked); err != nil {
		return err
	}
	dlq, err := w.high(t.DLQ)
	if err != nil {
		return err
	}
	r.Consumer.DLQ = sum(dlq)
	return nil
}

// evaluate computes the ratios and checks the targets.
func (r *serviceResult) evaluate() {
	c := r.Consumer.AssignedEPS
	if v := r.BrokerOnly.AssignedEPS; v > 0 {
		r.Ratios.ToBroker = c / v
	}
	p99 := float64(targetP99.Milliseconds())
	r.Targets = []targetCheck{
		{Name: "events/s ÷ broker-only events/s", Value: fmt.Sprintf("%.1f %%", 100*r.Ratios.ToBroker), Target: fmt.Sprintf("≥ %g %%", 100*targetBrokerRatio), Met: r.Ratios.ToBroker >= targetBrokerRatio},
		{Name: targetPacedDB, Value: fmtMs(r.Paced.DBp99ms), Target: fmt.Sprintf("≤ %g ms", p99), Met: r.Paced.DBp99ms <= p99, NA: r.Paced.DBn == 0},
		{Name: "paced p99 produce → offset commit", Value: fmtMs(r.Paced.Offp99ms), Target: fmt.Sprintf("≤ %g ms", p99), Met: r.Paced.Offp99ms <= p99},
		{Name: "peak RSS", Value: fmt.Sprintf("%.1f MiB", r.RSSPeakMiB), Target: fmt.Sprintf("≤ %d MiB", targetRSS>>20), Met: r.RSSPeakMiB > 0 && r.RSSPeakMiB <= targetRSS>>20},
	}
	if t := &r.Targets[0]; !t.Met {
		t.Why = brokerShareNeeds(r.BrokerOnly.AssignedEPS, r.Consumer.CPUUsPer, r.Consumer.PGUsPer, r.Consumer.CPU.Cores)
	}
}

// brokerShareNeeds says how many cores the broker-only target would take
// at the CPU per event the consumer and PostgreSQL spent in the max run:
// when that is more than the machine has, no code on the consumer's side
// of the measure meets it here.
func brokerShareNeeds(brokerEPS, consumerUs, pgUs float64, cores int) string {
	if brokerEPS <= 0 || consumerUs+pgUs <= 0 || cores <= 0 {
		return ""
	}
	eps := targetBrokerRatio * brokerEPS
	need := eps * (consumerUs + pgUs) / 1e6
	why := fmt.Sprintf("%s ev/s at this run's %.0f + %.0f µs of consumer + PostgreSQL CPU per event need %.1f cores, of %d",
		thousands(eps), consumerUs, pgUs, need, cores)
	if pgNeed := eps * pgUs / 1e6; pgNeed > float64(cores) {
		why += fmt.Sprintf(" (PostgreSQL's share alone %.1f)", pgNeed)
	}
	return why
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// thousands formats v rounded, with thin groups: 12,345.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func mark(ok bool) string {
	if ok {
		return "✔ met"
	}
	return "✘ missed"
}

// table prints one consumer's results.
func (b *bench) table(r *serviceResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := r.Consumer
	fmt.Fprintf(b.out, "\n═══ %s · %s · %d partitions · %s events ═══\n", r.Service, r.Topic, r.Partitions, thousands(float64(r.Events)))
	w := tabwriter.NewWriter(b.out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  measure\tvalue\ttarget\tnotes\n")
	fmt.Fprintf(w, "  broker only (consumer's Kafka config, no database)\t%s ev/s\t\t%s events; start → commit %s ev/s (join %.1f s)\n",
		thousands(r.BrokerOnly.AssignedEPS), thousands(float64(r.BrokerOnly.Events)), thousands(r.BrokerOnly.EPS), r.BrokerOnly.JoinSeconds)
	feed := "all pre-produced"
	if r.PreProduced < r.Events {
		feed = fmt.Sprintf("%s pre-produced, the rest fed ahead (backlog ≥ %s)", thousands(float64(r.PreProduced)), thousands(float64(c.MinBacklog)))
	}
	fmt.Fprintf(w, "  consumer: assigned → last offset committed\t%s ev/s\t\tstart → commit %s ev/s in %.1f s (join %.1f s); db commits %s ev/s; %s\n",
		thousands(c.AssignedEPS), thousands(c.EPS), c.Seconds, c.JoinSeconds, thousands(c.SteadyEPS), feed)
	for _, t := range r.Targets {
		if t.Name == targetPacedDB {
			rate := "produced at " + thousands(r.Paced.ActualEPS) + " ev/s"
			if r.Paced.FixedRate {
				rate += " (--paced-rate, not half the measured rate)"
			}
			fmt.Fprintf(w, "  paced at %s ev/s: %s events\t\t\t%s\n", thousands(r.Paced.TargetEPS), thousands(float64(r.Paced.Events)), rate)
			fmt.Fprintf(w, "    p50 / p99 produce → database commit\t%s / %s\t\tmax %s\n", fmtMs(r.Paced.DBp50ms), fmtMs(r.Paced.DBp99ms), fmtMs(r.Paced.DBmaxms))
			fmt.Fprintf(w, "    p50 / p99 produce → offset commit\t%s / %s\t\tmax %s\n", fmtMs(r.Paced.Offp50ms), fmtMs(r.Paced.Offp99ms), fmtMs(r.Paced.Offmaxms))
			if s := summarizeSeconds(r.Paced.DBp99BySecondMs, targetP99); s != "" {
				fmt.Fprintf(w, "    p99 → database commit, second by second\t%s\n", s)
			}
		}
		verdict := mark(t.Met)
		if t.NA {
			verdict = "– not measured"
		}
		if t.Why != "" {
			verdict += ": " + t.Why
		}
		fmt.Fprintf(w, "    %s\t%s\t%s\t%s\n", t.Name, t.Value, t.Target, verdict)
	}
	fmt.Fprintf(w, "  per event: wall / consumer CPU / PostgreSQL CPU\t%.0f / %.0f / %.0f µs\tflat 10k → 1M\tcompare runs of several N\n", c.WallUsPer, c.CPUUsPer, c.PGUsPer)
	w.Flush()
	fmt.Fprintf(b.out, "  CPU during the max run (cores of %d): consumer %.2f · PostgreSQL %.2f · pinctl+broker %.2f · other processes %.2f\n",
		c.CPU.Cores, c.CPU.Consumer, c.CPU.Postgres, c.CPU.Pinctl, c.CPU.Others)
	if p := r.Paced.CPU; p != nil {
		fmt.Fprintf(b.out, "  CPU during the paced run (cores of %d): consumer %.2f · PostgreSQL %.2f · pinctl+broker %.2f · other processes %.2f\n",
			p.Cores, p.Consumer, p.Postgres, p.Pinctl, p.Others)
	}
	if pc := r.Paced; pc.CPU != nil && pc.Batches > 0 {
		commits := ""
		if pc.OffsetCommits > 0 { // a binary from before the counter exports none
			commits = ", " + thousands(pc.OffsetCommits) + " offset commits"
		}
		fmt.Fprintf(b.out, "  paced run: %s batch transactions (mean %.1f events)%s; per event: consumer %.0f µs, PostgreSQL %.0f µs (max run: %.0f, %.0f)\n",
			thousands(pc.Batches), pc.MeanBatch, commits, pc.ConsumerUsPer, pc.PGUsPer, c.CPUUsPer, c.PGUsPer)
	}
	var outs []string
	for k, v := range c.Outcomes {
		outs = append(outs, fmt.Sprintf("%s %s", k, thousands(float64(v))))
	}
	sort.Strings(outs)
	fmt.Fprintf(b.out, "  max run: %s of %s events committed in %s batch transactions (mean %.1f); memory after it: RSS %.1f MiB, Go runtime %.1f MiB (heap in use %.1f)\n",
		thousands(c.BatchedEvents), thousands(float64(r.Events)), thousands(c.Batches), c.MeanBatch, c.RSSNowMiB, c.GoSysMiB, c.GoHeapMiB)
	if sc := r.StatementCache; sc.Hits+sc.Misses > 0 {
		fmt.Fprintf(b.out, "  statement cache over both runs: %s statements run prepared, %s prepared, %s run unprepared (first sight), %s evicted\n",
			thousands(sc.Hits), thousands(sc.Misses), thousands(sc.First), thousands(sc.Evicted))
	}
	fmt.Fprintf(b.out, "  marks by outcome: %s; dead-lettered %d; parked %d\n", strings.Join(outs, " · "), c.DLQ, c.Parked)
	if len(c.Warnings) > 0 {
		var ws []string
		for k, v := range c.Warnings {
			ws = append(ws, fmt.Sprintf("%s ×%d", k, v))
		}
		sort.Strings(ws)
		fmt.Fprintf(b.out, "  log warnings: %s\n", strings.Join(ws, "; "))
	}
}

// gitCommit names the code measured: HEAD, and "+dirty" when the consumers
// or the commands differ from it ("" outside a git checkout).
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--", "consumers", "cmd").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}

func hostInfo() benchHost {
	h := benchHost{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if fs := strings.Fields(line); len(fs) >= 2 {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			h.MemMiB = kb >> 10
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.Load1 = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return h
}

// writeBenchResults adds run to dir/<date>.json (a list of runs).
func writeBenchResults(dir string, run *benchRun) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, run.Started.Format("2006-01-02")+".json")
	var file struct {
		Date string          `json:"date"`
		Runs json.RawMessage `json:"runs"`
	}
	var runs []json.RawMessage
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &file); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if err := json.Unmarshal(file.Runs, &runs); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
	}
	one, err := json.Marshal(sanitize(run))
	if err != nil {
		return "", err
	}
	runs = append(runs, one)
	file.Date = run.Started.Format("2006-01-02")
	if file.Runs, err = json.Marshal(runs); err != nil {
		return "", err
	}
	out, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(out, '\n'), 0o644)
}

// sanitize replaces NaN (no sample) with -1: JSON has no NaN.
func sanitize(run *benchRun) *benchRun {
	for _, c := range run.Consumers {
		for _, f := range []*float64{&c.Paced.DBp50ms, &c.Paced.DBp99ms, &c.Paced.DBmaxms, &c.Paced.Offp50ms, &c.Paced.Offp99ms, &c.Paced.Offmaxms} {
			if math.IsNaN(*f) {
				*f = -1
			}
		}
	}
	return run
}
