package bench

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPacedRateIsHalfTheMeasuredOneUnlessGiven(t *testing.T) {
	r := &serviceResult{}
	r.Consumer.AssignedEPS = 9000
	if got := (&benchmark{}).pacedRate(r); got != 4500 {
		t.Errorf("default paced rate %v, want 4500", got)
	}
	if got := (&benchmark{Options: Options{Rate: 1234}}).pacedRate(r); got != 1234 {
		t.Errorf("--paced-rate 1234 gave %v", got)
	}
}

func TestSeriesWithMatchesOneLabelAmongOthers(t *testing.T) {
	m := map[string]float64{
		`pin_consumer_db_statement_cache_total{result="hit",service="rewards"}`:  7,
		`pin_consumer_db_statement_cache_total{result="miss",service="rewards"}`: 2,
		`pin_consumer_db_statement_cache_total{service="crm",result="hit"}`:      1,
		`pin_consumer_db_statement_cache_total_other{result="hit"}`:              100,
		`pin_consumer_db_statement_cache_total`:                                  10,
	}
	if got := seriesWith(m, "pin_consumer_db_statement_cache_total", `result="hit"`); got != 8 {
		t.Errorf("hits %v, want 8", got)
	}
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p50, p99, mx, n := percentiles(ds)
	if p50 != 50 || p99 != 99 || mx != 100 || n != 100 {
		t.Fatalf("p50 %v p99 %v max %v n %d", p50, p99, mx, n)
	}
}

// The per-second p99 tells a run whose p99 one stall made from a run slow
// throughout: each second's messages are ranked on their own, and the
// last, partial second is left out.
func TestPacedFillBySecond(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// n messages 10 ms apart (100/s); lat gives each one's latency, or
	// false for a message without an outcome line.
	run := func(n int, lat func(i int) (time.Duration, bool)) pacedRun {
		var recs []produced
		dbAt := map[msgPos]time.Time{}
		for i := range n {
			at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
			recs = append(recs, produced{at: at, partition: 0, offset: int64(i), ok: true})
			if d, ok := lat(i); ok {
				dbAt[msgPos{0, int64(i)}] = at.Add(d)
			}
		}
		pr := pacedRun{TargetEPS: 100}
		pr.fill(recs, nil, dbAt)
		return pr
	}
	values := func(ps []*float64) []float64 {
		var out []float64
		for _, p := range ps {
			if p == nil {
				out = append(out, -1)
			} else {
				out = append(out, *p)
			}
		}
		return out
	}

	// 3 whole seconds, then 5 messages of a fourth, partial one.
	pr := run(305, func(i int) (time.Duration, bool) {
		switch {
		case i >= 300:
			return time.Second, true // the partial second: not reported
		case i >= 100 && i < 200 && i%10 == 0:
			return 300 * time.Millisecond, true // second 1: a tenth of its messages stall
		}
		return 10 * time.Millisecond, true
	})
	if got, want := values(pr.DBp99BySecondMs), []float64{10, 300, 10}; !slices.Equal(got, want) {
		t.Fatalf("p99 by second %v, want %v", got, want)
	}
	if pr.DBn != 305 || pr.DBmaxms != 1000 {
		t.Fatalf("whole-run samples %d, max %v: every message counts there", pr.DBn, pr.DBmaxms)
	}
	got := summarizeSeconds(pr.DBp99BySecondMs, 50*time.Millisecond)
	if want := "median second 10.0 ms, worst 300 ms (second 1); 2 of 3 seconds ≤ 50.0 ms"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}

	// A run that ends on a second's boundary keeps its last second: its
	// last message was due one interval before the end.
	pr = run(300, func(int) (time.Duration, bool) { return 10 * time.Millisecond, true })
	if got, want := values(pr.DBp99BySecondMs), []float64{10, 10, 10}; !slices.Equal(got, want) {
		t.Fatalf("a run of 3 whole seconds gave %v, want %v", got, want)
	}

	// A second without outcome lines is null, and the summary leaves it out.
	pr = run(300, func(i int) (time.Duration, bool) { return 10 * time.Millisecond, i < 100 || i >= 200 })
	if got, want := values(pr.DBp99BySecondMs), []float64{10, -1, 10}; !slices.Equal(got, want) {
		t.Fatalf("a second without outcome lines gave %v, want %v", got, want)
	}
	got = summarizeSeconds(pr.DBp99BySecondMs, 50*time.Millisecond)
	if want := "median second 10.0 ms, worst 10.0 ms (second 0); 2 of 2 seconds ≤ 50.0 ms (1 without outcome lines)"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	if summarizeSeconds(nil, 50*time.Millisecond) != "" || summarizeSeconds([]*float64{nil}, 50*time.Millisecond) != "" {
		t.Fatal("a summary without measured seconds")
	}
}

// The paced run's transactions are the metrics' counts after it less the
// max run's.
func TestPacedBatches(t *testing.T) {
	maxRun := &consumerRun{BatchedEvents: 30000, Batches: 250, OffsetCommits: 200}
	var pr pacedRun
	pr.setFromMetrics(map[string]float64{"pin_consumer_batch_size_sum": 90000, "pin_consumer_batch_size_count": 3250,
		`pin_consumer_offset_commits_total{result="committed",service="rewards",trigger="stored"}`: 3000,
		`pin_consumer_offset_commits_total{result="nothing",service="rewards",trigger="stored"}`:   100,
		`pin_consumer_offset_commits_total{result="failed",service="rewards",trigger="stored"}`:    4,
		`pin_consumer_offset_commits_total{result="committed",service="rewards",trigger="revoke"}`: 7,
	}, maxRun)
	if pr.Batches != 3000 || pr.MeanBatch != 20 {
		t.Fatalf("paced batches %v (mean %v), want 3000 (mean 20)", pr.Batches, pr.MeanBatch)
	}
	if pr.OffsetCommits != 2800 {
		t.Fatalf("paced offset commits %v, want 2800 (3000 stored and committed after it, less 200 before)", pr.OffsetCommits)
	}
	var none pacedRun
	none.setFromMetrics(map[string]float64{"pin_consumer_batch_size_sum": 30000, "pin_consumer_batch_size_count": 250}, maxRun)
	if none.Batches != 0 || none.MeanBatch != 0 {
		t.Fatalf("no paced transactions gave %v (mean %v)", none.Batches, none.MeanBatch)
	}
}

// A missed broker-only share says what it would take: the target's rate
// at the run's CPU per event, in cores.
func TestBrokerShareNeeds(t *testing.T) {
	got := brokerShareNeeds(150000, 60, 50, 2)
	if want := "45,000 ev/s at this run's 60 + 50 µs of consumer + PostgreSQL CPU per event need 5.0 cores, of 2 (PostgreSQL's share alone 2.2)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := brokerShareNeeds(10000, 60, 50, 2); got != "3,000 ev/s at this run's 60 + 50 µs of consumer + PostgreSQL CPU per event need 0.3 cores, of 2" {
		t.Fatalf("a reachable share: %q", got)
	}
	if brokerShareNeeds(0, 60, 50, 2) != "" || brokerShareNeeds(150000, 0, 0, 2) != "" {
		t.Fatal("a reason without a measure")
	}
	r := &serviceResult{}
	r.BrokerOnly.AssignedEPS, r.Consumer.AssignedEPS = 150000, 10000
	r.Consumer.CPUUsPer, r.Consumer.PGUsPer, r.Consumer.CPU.Cores = 60, 50, 2
	r.evaluate()
	if r.Targets[0].Met || !strings.Contains(r.Targets[0].Why, "need 5.0 cores, of 2") {
		t.Fatalf("broker-only target %+v", r.Targets[0])
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*max(1, math.Abs(b)) }

// The machine's idle share is what /proc/stat's busy time left of all the
// cores over the span; other processes are the busy time no party of the
// measure took.
func TestCPUBetweenIdle(t *testing.T) {
	a := cpuSnapshot{consumer: 10, postgres: 20, pinctl: 5, busy: 100, total: 200}
	b := cpuSnapshot{consumer: 10.5, postgres: 20.4, pinctl: 5.2, busy: 101.24, total: 202} // 1 s on 2 cores
	u := cpuBetween(a, b, 1, 2)
	if !near(u.Machine, 1.24) || !near(u.Others, 0.14) || !near(u.Idle, 0.38) {
		t.Fatalf("machine %v, others %v, idle %v; want 1.24, 0.14, 0.38", u.Machine, u.Others, u.Idle)
	}
	// /proc/stat ticks and the processes' ticks are read at slightly
	// different instants: the shares never go below 0.
	b.busy = 104.5
	if u := cpuBetween(a, b, 1, 2); u.Idle != 0 {
		t.Fatalf("a machine busier than its cores is idle %v", u.Idle)
	}
	if u := cpuBetween(a, a, 0, 2); u != (cpuUse{}) {
		t.Fatalf("no span gave %+v", u)
	}
	// Steal is busy time of no process: the hypervisor's, not other
	// processes'.
	b.busy, b.steal = 101.24, 0.1
	if u := cpuBetween(a, b, 1, 2); !near(u.Stolen, 0.1) || !near(u.Others, 0.04) || !near(u.Idle, 0.38) {
		t.Fatalf("stolen %v, others %v, idle %v; want 0.1, 0.04, 0.38", u.Stolen, u.Others, u.Idle)
	}
}

// A run on a host whose hypervisor took a share of the cores says so: the
// ceiling leaves those cores out, the table warns, and a missed paced
// latency names the steal.
func TestStolenCores(t *testing.T) {
	u := cpuUse{Consumer: 0.5, Postgres: 0.4, Pinctl: 0.2, Others: 0.06, Stolen: 0.5, Machine: 1.66, Idle: 0.17, Cores: 2}
	c := ceilingOf(5000, 80, 66, u)
	if !near(c.CoresLeft, 1.24) {
		t.Fatalf("cores left %v, want 1.24", c.CoresLeft)
	}
	if l := ceilingLine(c, u); !strings.Contains(l, "on the 1.24 cores the broker and other processes (and the hypervisor, 0.50) left") {
		t.Fatalf("line %q", l)
	}
	if n := stolenNote("paced run", &u); !strings.Contains(n, "the hypervisor took 25 % of the cores (steal time) during the paced run") {
		t.Fatalf("note %q", n)
	}
	if n := stolenNote("paced run", &cpuUse{Stolen: 0.09, Cores: 2}); n != "" {
		t.Fatalf("4.5 %% of steal noted: %q", n)
	}
	if n := stolenNote("paced run", nil); n != "" {
		t.Fatalf("no measure noted: %q", n)
	}
	r := &serviceResult{}
	r.Paced.CPU, r.Paced.DBn, r.Paced.DBp99ms, r.Paced.Offp99ms = &u, 100, 120, 130
	r.evaluate()
	for _, i := range []int{2, 3} {
		if tc := r.Targets[i]; tc.Met || tc.Why != "the hypervisor took 25 % of the cores during the paced run" {
			t.Fatalf("target %+v", tc)
		}
	}
}

// A run during which the host paused the machine says so: the wall clock
// moved more than the monotonic one (2026-12-03: 22.6 s in a rewards max
// run, whose rate from the log's times came out at a sixth), and the
// latency and ceiling targets name the pause, met or not.
func TestPausedMachine(t *testing.T) {
	if g := clockGap(30*time.Second, 7400*time.Millisecond); !near(g, 22.6) {
		t.Fatalf("gap %v, want 22.6", g)
	}
	if g := clockGap(10*time.Second+50*time.Millisecond, 10*time.Second); g != 0 {
		t.Fatalf("50 ms (a slewing clock's reach) taken as a pause: %v", g)
	}
	if g := clockGap(10*time.Second, 11*time.Second); !near(g, -1) {
		t.Fatalf("a step back: %v, want -1", g)
	}
	now := time.Now()
	if g := pausedBetween(now, now.Add(time.Minute)); g != 0 {
		t.Fatalf("clocks in step: %v", g)
	}
	maxRun := cpuUse{Consumer: 0.7, Cores: 2, Paused: 22.6}
	paced := cpuUse{Consumer: 0.5, Cores: 2, Paused: 0.4}
	if n := pausedNote("max run", &maxRun); !strings.Contains(n, "stood still for 22.6 s during the max run") {
		t.Fatalf("note %q", n)
	}
	if n := pausedNote("paced run", &cpuUse{Cores: 2}); n != "" {
		t.Fatalf("no pause noted: %q", n)
	}
	r := &serviceResult{}
	r.Consumer.AssignedEPS, r.Consumer.CPUUsPer, r.Consumer.PGUsPer, r.Consumer.CPU = 20000, 40, 40, maxRun
	r.Paced.CPU, r.Paced.DBn, r.Paced.DBp99ms, r.Paced.Offp99ms = &paced, 100, 20, 30
	r.evaluate()
	if tc := r.Targets[1]; tc.Why != "the machine stood still for 22.6 s during the max run" {
		t.Fatalf("ceiling target %+v", tc)
	}
	for _, i := range []int{2, 3} {
		if tc := r.Targets[i]; !tc.Met || tc.Why != "the machine stood still for 0.4 s during the paced run" {
			t.Fatalf("target %+v", tc)
		}
	}
}

// The ceiling is the rate the cores allow at the run's CPU per event, on
// the whole machine and on the cores pinctl (with the broker) and other
// processes left; the target is on the latter.
func TestCeiling(t *testing.T) {
	u := cpuUse{Consumer: 0.56, Postgres: 0.46, Pinctl: 0.2, Others: 0.06, Machine: 1.24, Idle: 0.38, Cores: 2}
	c := ceilingOf(7000, 80, 66, u)
	if c == nil || c.CPUUsPer != 146 || c.Cores != 2 || !near(c.EPS, 2/146e-6) || !near(c.Reached, 7000*146e-6/2) ||
		!near(c.CoresLeft, 1.74) || !near(c.EPSOnCoresLeft, 1.74/146e-6) || !near(c.ReachedOnCoresLeft, 7000*146e-6/1.74) {
		t.Fatalf("ceiling %+v", c)
	}
	want := "ceiling at this cost: 13,699 ev/s on 2 cores (reached 51 %); 11,918 ev/s on the 1.74 cores the broker and other processes left (reached 59 %); machine idle 38 %"
	if got := ceilingLine(c, u); got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
	if ceilingOf(7000, 0, 0, u) != nil || ceilingOf(7000, 80, 66, cpuUse{}) != nil || ceilingLine(nil, u) != "" {
		t.Fatal("a ceiling without a CPU measure")
	}
	if c := ceilingOf(7000, 80, 66, cpuUse{Cores: 2, Pinctl: 1.5, Others: 0.7}); c.CoresLeft != 0 || c.EPSOnCoresLeft != 0 || c.ReachedOnCoresLeft != 0 {
		t.Fatalf("no cores left: %+v", c)
	}

	r := &serviceResult{}
	r.BrokerOnly.AssignedEPS, r.Consumer.AssignedEPS = 80000, 7000
	r.Consumer.CPUUsPer, r.Consumer.PGUsPer, r.Consumer.CPU = 80, 66, u
	r.evaluate()
	tc := r.Targets[1]
	if tc.Name != targetCeilingName || tc.Met || tc.NA || tc.Value != "58.7 %" || tc.Target != "≥ 85 %" ||
		tc.Why != "7,000 of 11,918 ev/s on 1.74 cores; the machine was 38 % idle: waits, not cores, held the rate" {
		t.Fatalf("ceiling target %+v", tc)
	}
	if r.Consumer.Ceiling == nil || r.Consumer.Ceiling.EPS != c.EPS {
		t.Fatalf("the consumer's ceiling %+v", r.Consumer.Ceiling)
	}
	r.Consumer.AssignedEPS = 10500 // 88 % of the cores left
	r.evaluate()
	if tc := r.Targets[1]; !tc.Met || tc.Why != "" {
		t.Fatalf("a met ceiling target %+v", tc)
	}
	r.Consumer.CPUUsPer, r.Consumer.PGUsPer = 0, 0
	r.evaluate()
	if tc := r.Targets[1]; !tc.NA || r.Consumer.Ceiling != nil {
		t.Fatalf("without a CPU measure: %+v", tc)
	}
}

// The steady window is the max run between 5 and 95 % of its events
// committed, with its own rate, CPU per event and ceiling; the ceiling
// target is on it when it lasted steadyMin, else on the whole run.
func TestSteadyWindow(t *testing.T) {
	t0 := time.Now()
	a := steadyPoint{cpuSnapshot{consumer: 10, postgres: 20, pinctl: 1, busy: 100, total: 200}, t0, 5000}
	z := steadyPoint{cpuSnapshot{consumer: 11.6, postgres: 21.2, pinctl: 1.8, busy: 103.6, total: 204}, t0.Add(2 * time.Second), 85000}
	s := steadyBetween(a, z, 2)
	if s == nil || s.Events != 80000 || !near(s.Seconds, 2) || !near(s.EPS, 40000) || !near(s.CPUUsPer, 20) || !near(s.PGUsPer, 15) ||
		!near(s.CPU.Consumer, 0.8) || !near(s.CPU.Postgres, 0.6) || !near(s.CPU.Pinctl, 0.4) || !near(s.CPU.Idle, 0.1) || s.From != steadyFrom || s.To != steadyTo {
		t.Fatalf("steady window %+v", s)
	}
	still := z
	still.got = a.got // time passed, no event committed
	for _, e := range [][2]steadyPoint{{{}, z}, {a, {}}, {a, a}, {z, a}, {a, still}} {
		if s := steadyBetween(e[0], e[1], 2); s != nil {
			t.Fatalf("a window without two ends in order: %+v", s)
		}
	}

	// The whole run: 30,000 ev/s at 25 + 20 µs, the machine 20 % idle
	// (81 % of its cores left); the steady window: 40,000 at 20 + 15 µs on
	// 2 − 0.4 − 0.1 cores (93.3 %).
	r := &serviceResult{}
	r.Consumer.AssignedEPS, r.Consumer.CPUUsPer, r.Consumer.PGUsPer = 30000, 25, 20
	r.Consumer.CPU = cpuUse{Consumer: 0.75, Postgres: 0.6, Pinctl: 0.3, Others: 0.05, Machine: 1.6, Idle: 0.2, Cores: 2}
	s.CPU.Others = 0.1
	r.Consumer.Steady = s
	r.evaluate()
	if tc := r.Targets[1]; !tc.Met || tc.Value != "93.3 %" || tc.Why != "in the steady window" {
		t.Fatalf("ceiling target %+v", tc)
	}
	if c := r.Consumer.Ceiling; c == nil || !near(c.ReachedOnCoresLeft, 30000*45e-6/1.65) {
		t.Fatalf("the whole run's ceiling %+v", c)
	}
	if l := steadyLine(s); !strings.HasPrefix(l, "steady window (5 → 95 % of the events committed, 2.00 s): 40,000 ev/s at 20 + 15 µs of consumer + PostgreSQL CPU per event; ceiling at this cost: 57,143 ev/s on 2 cores (reached 70 %); 42,857 ev/s on the 1.50 cores") {
		t.Fatalf("line %q", l)
	}
	s.EPS = 30000 // 70 % of its cores left
	r.evaluate()
	if tc := r.Targets[1]; tc.Met || tc.Value != "70.0 %" ||
		tc.Why != "in the steady window, 30,000 of 42,857 ev/s on 1.50 cores; the machine was 10 % idle: waits, not cores, held the rate" {
		t.Fatalf("ceiling target %+v", tc)
	}
	s.CPU.Paused = 3
	r.evaluate()
	if tc := r.Targets[1]; tc.Why != "the machine stood still for 3.0 s during the max run's steady window" {
		t.Fatalf("ceiling target %+v", tc)
	}

	// Too short a window is kept and said, and the target is the whole
	// run's.
	s.Seconds, s.CPU.Paused, s.Ceiling = 0.4, 0, nil
	r.evaluate()
	if tc := r.Targets[1]; tc.Met || tc.Value != "81.8 %" || s.Ceiling != nil ||
		tc.Why != "on the whole run: the steady window lasted 0.40 s, under 1 s; 30,000 of 36,667 ev/s on 1.65 cores; the machine was 20 % idle: waits, not cores, held the rate" {
		t.Fatalf("ceiling target %+v, window's ceiling %+v", tc, s.Ceiling)
	}
	r.Consumer.AssignedEPS = 33000 // 90 % of the whole run's cores left
	r.evaluate()
	if tc := r.Targets[1]; !tc.Met || tc.Why != "on the whole run: the steady window lasted 0.40 s, under 1 s" {
		t.Fatalf("ceiling target %+v", tc)
	}
	if l := steadyLine(s); !strings.HasSuffix(l, "shorter than 1 s, too short to measure: the target is on the whole run") {
		t.Fatalf("line %q", l)
	}
	s.Seconds = 1 // a window of exactly steadyMin is measured
	r.evaluate()
	if tc := r.Targets[1]; tc.Why != "in the steady window, 30,000 of 42,857 ev/s on 1.50 cores; the machine was 10 % idle: waits, not cores, held the rate" || s.Ceiling == nil {
		t.Fatalf("a window of %g s: target %+v", s.Seconds, tc)
	}
	if steadyLine(nil) != "" {
		t.Fatal("a line without a window")
	}
}

// The statements file names a statement by its text on one line, cut; a
// shape sums its entries.
func TestStatementText(t *testing.T) {
	if got := oneLine("SELECT a,\n\t  b FROM  t", 160); got != "SELECT a, b FROM t" {
		t.Fatalf("one line: %q", got)
	}
	if got := oneLine("INSERT INTO é VALUES ($1)", 12); got != "INSERT INTO…" {
		t.Fatalf("cut: %q", got)
	}
	var shape stmtStat
	shape.add(stmtStat{calls: 2, rows: 20, totalMs: 1.5, walB: 100})
	shape.add(stmtStat{calls: 3, rows: 30, totalMs: 2.5, walB: 50})
	if shape.calls != 5 || shape.rows != 50 || shape.totalMs != 4 || shape.walB != 150 || shape.variants != 2 {
		t.Fatalf("shape %+v", shape)
	}
}

// A backend that exits within a window keeps its CPU in the server's sum:
// the postmaster's reaped children count (cutime, cstime). Here a shell's
// subshell burns CPU and exits, then the shell becomes sleep (exec keeps
// the reaped children's times): the tree's CPU still holds the burn.
func TestTreeCPUKeepsReapedChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", `(i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done); exec sleep 30`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shell did not become sleep within a minute")
		}
	}
	if own := processCPU(pid); own >= 0.02 {
		t.Fatalf("sleep's own CPU %v s: the burn was the child's, the test measures nothing", own)
	}
	if got := treeCPU(pid); got < 0.02 {
		t.Fatalf("tree CPU %v s after the child exited, want its burn (≥ 0.02 s)", got)
	}
}

// The stage histograms of a scrape, less an earlier one's: means from
// _sum and _count, the p99 interpolated in its bucket as
// histogram_quantile does; a stage observed in neither run is left out.
func TestStageTimes(t *testing.T) {
	series := func(family, stage string, sum, count float64, buckets map[string]float64) map[string]float64 {
		m := map[string]float64{
			family + `_sum{service="crm",stage="` + stage + `"}`:   sum,
			family + `_count{service="crm",stage="` + stage + `"}`: count,
		}
		for le, n := range buckets {
			m[family+`_bucket{le="`+le+`",service="crm",stage="`+stage+`"}`] = n
		}
		return m
	}
	merge := func(ms ...map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	before := merge(
		series(waitFamily, "lane", 1, 100, map[string]float64{"0.001": 0, "0.01": 100, "0.1": 100, "+Inf": 100}),
		series(txStageFamily, "commit", 0.2, 100, map[string]float64{"0.001": 50, "0.01": 100, "0.1": 100, "+Inf": 100}),
	)
	after := merge(
		// 200 more lane waits, 4 s in all: 100 in (1, 10] ms, 100 in (10, 100] ms.
		series(waitFamily, "lane", 5, 300, map[string]float64{"0.001": 0, "0.01": 200, "0.1": 300, "+Inf": 300}),
		series(txStageFamily, "commit", 0.2, 100, map[string]float64{"0.001": 50, "0.01": 100, "0.1": 100, "+Inf": 100}),
		series(txStageFamily, "read", 3, 10, map[string]float64{"0.001": 0, "0.01": 0, "0.1": 9, "+Inf": 10}),
	)
	got := stageTimes(after, before)
	lane := got["lane"]
	if lane.Count != 200 || math.Abs(lane.MeanMs-20) > 1e-9 {
		t.Fatalf("lane: %+v, want 200 observations, mean 20 ms", lane)
	}
	// rank 198 of 200: the second bucket (10, 100] ms holds ranks 101–200.
	if want := 10 + 90*(198.0-100)/100; math.Abs(lane.P99Ms-want) > 1e-9 {
		t.Fatalf("lane p99 %.3f ms, want %.3f", lane.P99Ms, want)
	}
	if _, ok := got["commit"]; ok {
		t.Fatalf("commit: %+v, want none (no transaction since the earlier scrape)", got["commit"])
	}
	// From the process's start; the p99 falls in +Inf: the highest finite bound.
	if r := got["read"]; r.Count != 10 || math.Abs(r.MeanMs-300) > 1e-9 || r.P99Ms != 100 {
		t.Fatalf("read: %+v, want 10, mean 300 ms, p99 100 ms (the highest finite bound)", r)
	}
	if stageTimes(map[string]float64{"pin_consumer_batch_size_count": 3}, nil) != nil {
		t.Fatal("a binary without the histograms should give no stages")
	}
	if line := stageLine(got); line != "waits lane 20 / 98; transaction read 300 / 100" {
		t.Fatalf("stage line %q", line)
	}
}

// procStatus reads the process's memory lines in bytes: the peak, and the
// RSS split into anonymous memory and files' pages, which add up to it.
func TestProcStatusSplitsTheRSS(t *testing.T) {
	st, ok := procStatus(os.Getpid())
	if !ok {
		t.Fatal("no /proc/self/status")
	}
	if st["VmHWM"] < st["VmRSS"] || st["RssAnon"] <= 0 || st["RssFile"] <= 0 {
		t.Fatalf("VmHWM %d, VmRSS %d, RssAnon %d, RssFile %d: want a peak at least the RSS, and both parts", st["VmHWM"], st["VmRSS"], st["RssAnon"], st["RssFile"])
	}
	if sum := st["RssAnon"] + st["RssFile"] + st["RssShmem"]; sum != st["VmRSS"] {
		t.Fatalf("RssAnon + RssFile + RssShmem = %d, VmRSS %d", sum, st["VmRSS"])
	}
	// The peak only grows between the reads.
	if peak, ok := peakRSS(os.Getpid()); !ok || peak < st["VmHWM"] {
		t.Fatalf("peakRSS %d, %v; VmHWM %d", peak, ok, st["VmHWM"])
	}
}

// A stall is a gap of 50 ms or more between two commits that a message
// waited through; a gap no message waited through (a low rate: nothing
// to do) is not one.
func TestPacedRunCountsStalls(t *testing.T) {
	t0 := time.Now()
	var recs []produced
	dbAt := map[msgPos]time.Time{}
	add := func(at, committed time.Duration) {
		i := int64(len(recs))
		recs = append(recs, produced{at: t0.Add(at), partition: int32(i % 3), offset: i, ok: true})
		dbAt[msgPos{int32(i % 3), i}] = t0.Add(committed)
	}
	// Every 5 ms a message, committed 5 ms later, but those produced in
	// [200 ms, 320 ms) wait for a commit at 330 ms: none from 200 ms
	// (the message of 195 ms) to 330 ms, a 130 ms stall.
	for ms := 0; ms < 600; ms += 5 {
		p := time.Duration(ms) * time.Millisecond
		switch {
		case ms >= 200 && ms < 320:
			add(p, 330*time.Millisecond)
		case ms >= 320 && ms < 330:
			add(p, 331*time.Millisecond)
		default:
			add(p, p+5*time.Millisecond)
		}
	}
	// Then an idle 100 ms (nothing produced), and one more message.
	add(700*time.Millisecond, 705*time.Millisecond)
	n, longest := stalls(recs, dbAt)
	if n != 1 || longest != 130 {
		t.Fatalf("stalls %d, longest %v ms; want 1 of 130 ms (the idle 100 ms before the last message is not one)", n, longest)
	}
}

// The consumers' Go knobs in the environment are theirs: pinctl, which
// runs the broker and the paced producer, goes back to Go's defaults.
func TestTheConsumersGoKnobsAreNotPinctls(t *testing.T) {
	before, beforeLimit, beforeProcs := debug.SetGCPercent(400), debug.SetMemoryLimit(96<<20), runtime.GOMAXPROCS(1)
	defer func() {
		debug.SetGCPercent(before)
		debug.SetMemoryLimit(beforeLimit)
		runtime.GOMAXPROCS(beforeProcs)
	}()
	ownGoDefaults([]string{"KAFKA_X=1", "GOMEMLIMIT=96MiB", "GOGC=400", "GOMAXPROCS=1"})
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("pinctl's memory limit %d, want none", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("pinctl's GOGC %d, want 100", got)
	}
	if got := runtime.GOMAXPROCS(0); got != runtime.NumCPU() {
		t.Errorf("pinctl's GOMAXPROCS %d, want %d", got, runtime.NumCPU())
	}
}
