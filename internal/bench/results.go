package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Record is one invocation's results, as written to the JSON file.
type Record struct {
	Started       time.Time          `json:"started"`
	Commit        string             `json:"commit"` // git HEAD, "+dirty" when consumers/ or cmd/ have changes
	Events        int                `json:"events"`
	Chats         int                `json:"messenger_chats"`
	Leads         int                `json:"crm_leads"`
	Seed          uint64             `json:"seed"`
	PacedSeconds  float64            `json:"paced_seconds"`
	DBLatencyMs   float64            `json:"db_latency_ms"`             // --db-latency: the round trip added to PostgreSQL (0: none; absent before 2026-12-02)
	Profile       int                `json:"profile_seconds,omitempty"` // --profile: the consumer's CPU profile's length (its CPU figures include profiling's and pg_stat_statements' cost); absent without
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

	profile *profileReport // --profile; not recorded
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
	StartupS      float64 `json:"startup_seconds"` // start → first event committed in the database
	// SettleS: the settle before the run (settle), seconds; it includes
	// the sync(2) since 2026-12-07 (cb92b76).
	// MaintenancePGUsPer: PostgreSQL's CPU in the settle after the run
	// (the maintenance its N events owed, done before the paced run), µs
	// per event of the run; in neither PGUsPer nor the ceiling. Both
	// absent before 2026-12-06 evening. Through --db-latency's proxy the
	// settle's time includes its statements' round trips.
	SettleS            float64 `json:"settle_seconds,omitempty"`
	MaintenancePGUsPer float64 `json:"maintenance_postgres_cpu_us_per_event,omitempty"`
	SteadyEPS          float64 `json:"steady_events_per_s"` // first → last database commit (log lines)
	WallUsPer          float64 `json:"wall_us_per_event"`   // 1e6 / EPS
	CPUUsPer           float64 `json:"consumer_cpu_us_per_event"`
	PGUsPer            float64 `json:"postgres_cpu_us_per_event"`
	CPU                cpuUse  `json:"cpu"`
	RSSMiB             float64 `json:"rss_peak_mib_after_max_run"`
	// The RSS after the max run in anonymous memory (the heap, stacks,
	// librdkafka's buffers) and in pages of files (the binary's text and
	// data: mapped in 2 MiB pages where the page cache holds the file in
	// large folios, as ext4 does on Linux 6.x, 2 MiB of text counts whole).
	// Absent before 2026-12-03 evening.
	RSSAnonMiB float64 `json:"rss_anon_mib_after_max_run,omitempty"`
	RSSFileMiB float64 `json:"rss_file_mib_after_max_run,omitempty"`
	// MinBacklog is the fewest produced-but-uncommitted messages seen while
	// events were still being produced (-1: all were pre-produced).
	MinBacklog int64 `json:"min_backlog_while_feeding"`
	// DBProxy is what the --db-latency proxy forwarded per event over the
	// same span, each way: about a round trip per chunk to PostgreSQL.
	DBProxy *proxyChunks `json:"db_proxy_chunks_per_event,omitempty"`
	// Ceiling is the rate the machine's cores allow at this run's CPU per
	// event (absent before 2026-12-02).
	Ceiling *ceilingUse `json:"ceiling,omitempty"`
	// Steady is the run under its backlog, its warm-up and its drain left
	// out (steadyRun): the ceiling target's measure since 2026-12-06
	// (session 22) unless shorter than steadyMin; absent before.
	Steady *steadyRun `json:"steady,omitempty"`
	// With --profile, from pg_stat_statements over the max run: the
	// statements the consumer sent (BEGIN and COMMIT included; not the
	// foreign-key checks run inside them) and the WAL they wrote (not the
	// commit records, written after a COMMIT's measure), per event; and
	// the WAL the server wrote meanwhile (pg_current_wal_lsn), per event.
	StatementsPerEvent       float64 `json:"statements_per_event,omitempty"`
	NestedStatementsPerEvent float64 `json:"nested_statements_per_event,omitempty"`
	WALBytesPerEvent         float64 `json:"wal_bytes_per_event,omitempty"`
	ServerWALBytesPerEvent   float64 `json:"server_wal_bytes_per_event,omitempty"`
	// From the consumer's /metrics after the max run.
	BatchedEvents float64 `json:"batched_events"`           // events committed through the batch path (a lone message of a service with Prepare included)
	Batches       float64 `json:"batches"`                  // such transactions
	MeanBatch     float64 `json:"mean_batch_size"`          // batched_events / batches
	OffsetCommits float64 `json:"offset_commits,omitempty"` // the runtime's commits right after a store that Kafka took (pin_consumer_offset_commits_total{trigger="stored",result="committed"}); absent before 2026-12-01
	// Where a message's time went over the max run (stageTimes); absent
	// before 2026-12-03 evening.
	Stages    map[string]stageTime `json:"stages,omitempty"`
	metrics   map[string]float64   // the scrape after the max run, which the paced run's is diffed against
	GoSysMiB  float64              `json:"go_sys_mib"`        // memory the Go runtime holds
	GoHeapMiB float64              `json:"go_heap_inuse_mib"` // of which heap in use
	RSSNowMiB float64              `json:"rss_mib"`           // process RSS at that moment
	// Over the max and paced runs together:
	Outcomes map[string]int `json:"outcomes"`
	DLQ      int64          `json:"dead_lettered"`
	Parked   int            `json:"parked"`
	Warnings map[string]int `json:"log_warnings"`
}

// ceilingUse is the events/s the cores allow at the max run's CPU per
// event of the consumer and PostgreSQL, and the share of it the run
// reached (its events/s, assignment → last offset committed, over the
// same span as the CPU).
type ceilingUse struct {
	CPUUsPer float64 `json:"cpu_us_per_event"` // consumer + PostgreSQL
	// On all the machine's cores.
	Cores   int     `json:"machine_cores"`
	EPS     float64 `json:"events_per_s"` // cores ÷ CPU per event
	Reached float64 `json:"reached"`      // events/s ÷ EPS
	// On the cores pinctl (with the broker) and other processes left to
	// the consumer and PostgreSQL over the max run: the target's.
	CoresLeft          float64 `json:"cores_left"`
	EPSOnCoresLeft     float64 `json:"events_per_s_on_cores_left"`
	ReachedOnCoresLeft float64 `json:"reached_on_cores_left"`
}

// steadyRun is the max run's steady window: from the moment steadyFrom of
// its events were committed to Kafka to the moment steadyTo were, its
// rate, CPU and ceiling. Before the window the consumer warms up (its
// first fetches, the statements prepared, the first plans), after it the
// partitions run dry one by one and the lanes run out of backlog: neither
// is the consumer under a backlog, which issue 28's target is about. The
// whole run's figures (rateResult, CPUUsPer, Ceiling) are kept beside it.
type steadyRun struct {
	From     float64 `json:"from_share"` // of the run's events committed
	To       float64 `json:"to_share"`
	Events   int64   `json:"events"`
	Seconds  float64 `json:"seconds"`
	EPS      float64 `json:"events_per_s"`
	CPUUsPer float64 `json:"consumer_cpu_us_per_event"`
	PGUsPer  float64 `json:"postgres_cpu_us_per_event"`
	CPU      cpuUse  `json:"cpu"`
	// Ceiling is at the window's own CPU per event, on its cores left.
	Ceiling *ceilingUse `json:"ceiling,omitempty"`
}

// steadyFrom and steadyTo bound the steady window, in shares of the max
// run's events committed; steadyMin is the shortest window the target is
// taken on (its ends are found by polls 20 ms apart and the CPU is
// counted in 10 ms ticks: a shorter one is kept, and the target is on the
// whole run).
const (
	steadyFrom = 0.05
	steadyTo   = 0.95
	steadyMin  = time.Second
)

// steadyPoint is one end of the steady window: the CPU counters, the time
// and the events committed then.
type steadyPoint struct {
	cpu cpuSnapshot
	at  time.Time
	got int64
}

// steadyBetween is the steady window between its two ends; nil when an
// end is missing or it holds no event.
func steadyBetween(a, z steadyPoint, cores int) *steadyRun {
	d := z.at.Sub(a.at)
	n := z.got - a.got
	if a.at.IsZero() || z.at.IsZero() || d <= 0 || n <= 0 {
		return nil
	}
	s := &steadyRun{From: steadyFrom, To: steadyTo, Events: n, Seconds: d.Seconds()}
	s.EPS = float64(n) / s.Seconds
	s.CPU, s.CPUUsPer, s.PGUsPer = spanUse(a.cpu, z.cpu, a.at, z.at, float64(n), cores)
	return s
}

// measured says whether the target is taken on the window.
func (s *steadyRun) measured() bool {
	return s != nil && s.Seconds >= steadyMin.Seconds()
}

// steadyLine is the table's line on the steady window ("" without one).
func steadyLine(s *steadyRun) string {
	if s == nil {
		return ""
	}
	l := fmt.Sprintf("steady window (%.0f → %.0f %% of the events committed, %.2f s): %s ev/s at %.0f + %.0f µs of consumer + PostgreSQL CPU per event",
		100*s.From, 100*s.To, s.Seconds, thousands(s.EPS), s.CPUUsPer, s.PGUsPer)
	if !s.measured() {
		return l + fmt.Sprintf("; shorter than %g s, too short to measure: the target is on the whole run", steadyMin.Seconds())
	}
	return l + "; " + ceilingLine(s.Ceiling, s.CPU)
}

// ceilingOf is the ceiling of a run at eps events/s that spent consumerUs
// + pgUs of CPU per event, with u the cores every party used meanwhile;
// nil without a CPU measure.
func ceilingOf(eps, consumerUs, pgUs float64, u cpuUse) *ceilingUse {
	per := (consumerUs + pgUs) / 1e6
	if per <= 0 || u.Cores <= 0 {
		return nil
	}
	c := &ceilingUse{CPUUsPer: consumerUs + pgUs, Cores: u.Cores, EPS: float64(u.Cores) / per}
	c.Reached = eps / c.EPS
	c.CoresLeft = max(0, float64(u.Cores)-u.Pinctl-u.Others-u.Stolen)
	if c.CoresLeft > 0 {
		c.EPSOnCoresLeft = c.CoresLeft / per
		c.ReachedOnCoresLeft = eps / c.EPSOnCoresLeft
	}
	return c
}

// ceilingLine is the table's line on the ceiling and the machine's idle
// share over the max run.
func ceilingLine(c *ceilingUse, u cpuUse) string {
	if c == nil {
		return ""
	}
	stolen := ""
	if u.Stolen >= 0.005 {
		stolen = fmt.Sprintf(" (and the hypervisor, %.2f)", u.Stolen)
	}
	return fmt.Sprintf("ceiling at this cost: %s ev/s on %d cores (reached %.0f %%); %s ev/s on the %.2f cores the broker and other processes%s left (reached %.0f %%); machine idle %.0f %%",
		thousands(c.EPS), c.Cores, 100*c.Reached, thousands(c.EPSOnCoresLeft), c.CoresLeft, stolen, 100*c.ReachedOnCoresLeft, 100*u.Idle)
}

// stolenShare is the share of the machine's cores the hypervisor took
// over a span (0 without a measure).
func stolenShare(u *cpuUse) float64 {
	if u == nil || u.Cores <= 0 {
		return 0
	}
	return u.Stolen / float64(u.Cores)
}

// stolenWarnShare is the steal above which a run is flagged: its rates and
// latencies are a smaller machine's, with pauses no code of ours made.
const stolenWarnShare = 0.05

// stolenNote says how much of the cores the hypervisor took during a run,
// when that is enough to matter ("" otherwise).
func stolenNote(run string, u *cpuUse) string {
	if s := stolenShare(u); s >= stolenWarnShare {
		return fmt.Sprintf("the hypervisor took %.0f %% of the cores (steal time) during the %s: its rates and latencies are a smaller machine's with pauses of its own, not comparable with a quiet run's", 100*s, run)
	}
	return ""
}

// pausedNote says that the machine stood still during a run, when it did
// ("" otherwise): the host paused the virtual machine (a snapshot, a
// migration; the kernel logs "crng reseeded due to virtual machine fork"
// after one), which the CPU counters do not see and wall-clock times do.
func pausedNote(run string, u *cpuUse) string {
	if u == nil || u.Paused == 0 {
		return ""
	}
	return fmt.Sprintf("the machine stood still for %.1f s during the %s (its wall clock moved that much more than its monotonic clock: the host paused it): the figures from wall-clock times — the steady rate from the consumer's log, the latencies — are off by as much; run it again", u.Paused, run)
}

// proxyChunks counts the reads the --db-latency proxy forwarded, per event.
type proxyChunks struct {
	ToPostgres   float64 `json:"to_postgres"`
	FromPostgres float64 `json:"from_postgres"`
}

type pacedRun struct {
	TargetEPS float64 `json:"target_events_per_s"`
	FixedRate bool    `json:"fixed_rate,omitempty"` // --paced-rate, not half the measured rate
	ActualEPS float64 `json:"produced_events_per_s"`
	Events    int     `json:"events"`
	CPU       *cpuUse `json:"cpu,omitempty"` // first produce → last offset commit (absent before 2026-11-30 evening)
	// SettleS: the settle between the max run and this one (settle),
	// seconds. Absent before 2026-12-06 evening, when there was none; it
	// includes the sync(2) since 2026-12-07 (cb92b76).
	SettleS float64 `json:"settle_seconds,omitempty"`
	// CPU seconds per paced event over the same span, and the paced
	// run's transactions (pin_consumer_batch_size), to set against the
	// max run's: a half load in small transactions costs more per event.
	// Absent before 2026-12-01.
	ConsumerUsPer float64              `json:"consumer_cpu_us_per_event,omitempty"`
	PGUsPer       float64              `json:"postgres_cpu_us_per_event,omitempty"`
	Batches       float64              `json:"batches,omitempty"`
	MeanBatch     float64              `json:"mean_batch_size,omitempty"`
	OffsetCommits float64              `json:"offset_commits,omitempty"`
	Stages        map[string]stageTime `json:"stages,omitempty"` // as the max run's, over the paced run
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
	// Stalls: the times no message of the run was committed on any
	// partition for stallGap or longer while the run's messages were
	// being produced, and the longest of them: a pause of every lane
	// at once (on 2026-12-06, a COMMIT creating a WAL segment whose lead
	// locks crm's other lane waited for). Absent before 2026-12-06.
	Stalls         int     `json:"db_commit_stalls"`
	LongestStallMs float64 `json:"db_commit_longest_stall_ms"`
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

// targetCeilingName is the ceiling target's line: against the ceiling on
// the cores left to the consumer and PostgreSQL, not on all the machine's.
const targetCeilingName = "events/s ÷ ceiling on the cores left to consumer + PostgreSQL"

// evaluate computes the ratios and checks the targets.
func (r *serviceResult) evaluate() {
	c := r.Consumer.AssignedEPS
	if v := r.BrokerOnly.AssignedEPS; v > 0 {
		r.Ratios.ToBroker = c / v
	}
	r.Consumer.Ceiling = ceilingOf(c, r.Consumer.CPUUsPer, r.Consumer.PGUsPer, r.Consumer.CPU)
	// The target is on the steady window where there is one, else on the
	// whole run.
	eps, cl, u, window := c, r.Consumer.Ceiling, r.Consumer.CPU, "the max run"
	steady := r.Consumer.Steady.measured()
	if s := r.Consumer.Steady; steady {
		s.Ceiling = ceilingOf(s.EPS, s.CPUUsPer, s.PGUsPer, s.CPU)
		eps, cl, u, window = s.EPS, s.Ceiling, s.CPU, "the max run's steady window"
	}
	ceiling := targetCheck{Name: targetCeilingName, Value: "n/a", Target: fmt.Sprintf("≥ %g %%", 100*targetCeiling), NA: true}
	if cl != nil && cl.EPSOnCoresLeft > 0 {
		ceiling.Value, ceiling.NA = fmt.Sprintf("%.1f %%", 100*cl.ReachedOnCoresLeft), false
		ceiling.Met = cl.ReachedOnCoresLeft >= targetCeiling
		var on string
		switch s := r.Consumer.Steady; {
		case steady:
			ceiling.Why, on = "in the steady window", "in the steady window, "
		case s != nil: // kept, too short to measure
			ceiling.Why = fmt.Sprintf("on the whole run: the steady window lasted %.2f s, under %g s", s.Seconds, steadyMin.Seconds())
			on = ceiling.Why + "; "
		}
		if !ceiling.Met {
			ceiling.Why = fmt.Sprintf("%s%s of %s ev/s on %.2f cores; the machine was %.0f %% idle: waits, not cores, held the rate",
				on, thousands(eps), thousands(cl.EPSOnCoresLeft), cl.CoresLeft, 100*u.Idle)
		}
	}
	p99 := float64(targetP99.Milliseconds())
	r.Targets = []targetCheck{
		{Name: "events/s ÷ broker-only events/s", Value: fmt.Sprintf("%.1f %%", 100*r.Ratios.ToBroker), Target: fmt.Sprintf("≥ %g %%", 100*targetBrokerRatio), Met: r.Ratios.ToBroker >= targetBrokerRatio},
		ceiling,
		{Name: targetPacedDB, Value: fmtMs(r.Paced.DBp99ms), Target: fmt.Sprintf("≤ %g ms", p99), Met: r.Paced.DBp99ms <= p99, NA: r.Paced.DBn == 0},
		{Name: "paced p99 produce → offset commit", Value: fmtMs(r.Paced.Offp99ms), Target: fmt.Sprintf("≤ %g ms", p99), Met: r.Paced.Offp99ms <= p99},
		{Name: "peak RSS", Value: fmt.Sprintf("%.1f MiB", r.RSSPeakMiB), Target: fmt.Sprintf("≤ %d MiB", targetRSS>>20), Met: r.RSSPeakMiB > 0 && r.RSSPeakMiB <= targetRSS>>20},
	}
	if t := &r.Targets[0]; !t.Met {
		t.Why = brokerShareNeeds(r.BrokerOnly.AssignedEPS, r.Consumer.CPUUsPer, r.Consumer.PGUsPer, r.Consumer.CPU.Cores)
	}
	if s := stolenShare(r.Paced.CPU); s >= stolenWarnShare {
		for i := 2; i <= 3; i++ { // the paced latencies
			if t := &r.Targets[i]; !t.Met && !t.NA {
				t.Why = fmt.Sprintf("the hypervisor took %.0f %% of the cores during the paced run", 100*s)
			}
		}
	}
	if p := r.Paced.CPU; p != nil && p.Paused != 0 {
		for i := 2; i <= 3; i++ { // met or not, the latencies are not the code's
			if t := &r.Targets[i]; !t.NA {
				t.Why = fmt.Sprintf("the machine stood still for %.1f s during the paced run", p.Paused)
			}
		}
	}
	if t := &r.Targets[1]; u.Paused != 0 && !t.NA {
		t.Why = fmt.Sprintf("the machine stood still for %.1f s during %s", u.Paused, window)
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
func writeBenchResults(dir string, run *Record) (string, error) {
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
func sanitize(run *Record) *Record {
	for _, c := range run.Consumers {
		for _, f := range []*float64{&c.Paced.DBp50ms, &c.Paced.DBp99ms, &c.Paced.DBmaxms, &c.Paced.Offp50ms, &c.Paced.Offp99ms, &c.Paced.Offmaxms} {
			if math.IsNaN(*f) {
				*f = -1
			}
		}
	}
	return run
}
