package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/internal/bench"
	"github.com/pin-platform/pin/migrate/localpg"
)

// TestBenchEndToEnd runs `pinctl bench` as `make bench` does — its own
// durable PostgreSQL, the in-process broker, the real consumer binary as a
// child process — with a small N on one consumer, and checks that every
// measure was taken and written (N = 5,000: a max run of a few hundred
// milliseconds, long enough for /proc's CPU ticks; 300 events took 30 ms
// once the group started from committed offsets). It asserts no speed. --sql-time, the bound
// of the pgbench SQL limit that was removed, is still accepted. The server
// gets the bench's min_wal_size, 1 GB of segments made ready, and the
// database is settled before the max run and again before the paced one.
func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, the broker and a consumer")
	}
	bin := builtBinaries(t)
	results := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pinctl"), "bench",
		"--events", "5000", "--only", "rewards", "--paced", "2s", "--paced-rate", "150", "--sql-time", "10s", "--results", results)
	cmd.Env = benchEnv()
	out := runExpecting(t, cmd,
		"═══ rewards",
		"broker only",
		"database settled in",
		"database settled again in",
		"consumer: assigned → last offset committed",
		"p50 / p99 produce → database commit",
		"p50 / p99 produce → offset commit",
		"peak RSS",
		"ceiling at this cost",
		"events/s ÷ ceiling on the cores left",
		"steady window (5 → 95 % of the events committed",
		"--sql-time is ignored",
		"segments ready for reuse (min_wal_size 1GB)",
	)

	// The max run's maintenance is done before the paced run's clock
	// starts, not inside it.
	if settled, paced := strings.Index(out, "database settled again in"), strings.Index(out, "paced at 150 events/s"); settled < 0 || paced < settled {
		t.Errorf("the second settle (at %d) is not before the paced run (at %d)", settled, paced)
	}

	r := oneBenchRun(t, results).Consumers[0]
	if r.Service != "rewards" || r.Events != 5000 {
		t.Errorf("service %q events %d, want rewards 5000", r.Service, r.Events)
	}
	marks := 0
	for _, n := range r.Consumer.Outcomes {
		marks += n
	}
	// The steady window's ends are found by polls 20 ms apart: at N =
	// 5,000 the first may come late by a few hundred events.
	s := r.Consumer.Steady
	steady := s != nil && s.From == 0.05 && s.To == 0.95 && s.Events >= int64(r.Events)/2 && s.Events <= int64(r.Events)*95/100 &&
		s.Seconds > 0 && s.EPS > 0 && s.CPUUsPer > 0 && s.PGUsPer > 0 && s.CPU.Cores > 0
	why := r.Targets[1].Why
	onSteady := steady && strings.HasPrefix(why, "in the steady window")
	onWhole := steady && strings.HasPrefix(why, "on the whole run: the steady window lasted")
	checks := []struct {
		what string
		ok   bool
	}{
		{"broker-only rate measured", r.BrokerOnly.AssignedEPS > 0},
		{"consumer rate measured", r.Consumer.EPS > 0 && r.Consumer.AssignedEPS > 0},
		{"the database settled before each run, the max run's maintenance measured", r.Consumer.SettleS > 0 && r.Paced.SettleS > 0 && r.Consumer.MaintenancePGUsPer > 0},
		{"paced at --paced-rate", r.Paced.FixedRate && r.Paced.TargetEPS == 150 && r.Paced.Events == 300},
		{"CPU of the paced run measured", r.Paced.CPU != nil && r.Paced.CPU.Consumer > 0 && r.Paced.CPU.Postgres > 0},
		{"every paced message has a database commit time", r.Paced.DBn == r.Paced.Events},
		{"every paced message has an offset commit time", r.Paced.Offn == r.Paced.Events},
		{"peak RSS read", r.RSSPeakMiB > 0},
		{"statement cache counted", r.StatementCache.Misses > 0 && r.StatementCache.Hits > 0},
		{"a mark for every event of both runs", marks == r.Events+r.Paced.Events},
		{"nothing dead-lettered", r.Consumer.DLQ == 0},
		{"the consumer exited cleanly", r.ExitCode == 0},
		{"ceiling computed", r.Consumer.Ceiling != nil && r.Consumer.Ceiling.EPS > 0 && r.Consumer.Ceiling.EPSOnCoresLeft > 0},
		{"machine idle share measured", r.Consumer.CPU.Idle > 0 && r.Consumer.CPU.Idle < 1},
		{"the steady window measured, 5 → 95 % of the events committed", steady},
		{"the ceiling target on the steady window when it lasted a second, else on the whole run, and it says which", steady && onSteady == (s.Seconds >= 1) && onWhole == !onSteady && (s.Ceiling != nil) == onSteady},
		{"targets evaluated", len(r.Targets) == 5},
		{"the bench's min_wal_size recorded", oneBenchRun(t, results).Knobs["postgres min_wal_size"] == "1GB"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no (%+v)", c.what, r)
		}
	}
}

// TestBenchLatencyAndProfile runs `pinctl bench` with PostgreSQL 1 ms
// away and the profiles: the consumer works through the proxy, and the
// CPU and heap profiles and the statements are taken and kept.
func TestBenchLatencyAndProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, the broker and a consumer")
	}
	if dir, err := localpg.LibDir(); err != nil {
		t.Skip(err)
	} else if _, err := os.Stat(filepath.Join(dir, "pg_stat_statements.so")); err != nil {
		t.Skip("no pg_stat_statements: ", err)
	}
	bin := builtBinaries(t)
	results := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pinctl"), "bench",
		"--events", "300", "--only", "rewards", "--paced", "2s", "--paced-rate", "150", "--results", results,
		"--db-latency", "1ms", "--profile", "--profile-seconds", "1", "--pg", "shared_buffers=64MB", "--pg", "min_wal_size=32MB", "--ids", "v7")
	cmd.Env = benchEnv()
	out := runExpecting(t, cmd,
		"PostgreSQL 1ms away (--db-latency)",
		"with pg_stat_statements (--profile), shared_buffers=64MB, min_wal_size=32MB",
		"segments ready for reuse (min_wal_size 32MB)",
		"consumer knobs: CONSUMER_PPROF=true KAFKA_FETCH_WAIT_MAX_MS=5 db_latency_ms=1 ids=v7",
		"with pg_stat_statements (--profile)",
		"profiles of the max run (--profile)",
		"PostgreSQL over the max run, per event:",
	)
	const kept = "work directory (kept: --profile writes its profiles there): "
	i := strings.Index(out, kept)
	if i < 0 {
		t.Fatal("no kept work directory")
	}
	work, _, _ := strings.Cut(out[i+len(kept):], "\n")
	t.Cleanup(func() { os.RemoveAll(work) })
	for _, f := range []string{"rewards-consumer-cpu.pprof", "rewards-consumer-allocs.pprof", "rewards-statements.txt"} {
		if st, err := os.Stat(filepath.Join(work, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// --ids v7: the consumer was given time-ordered MessageIds.
	consumed, err := os.ReadFile(filepath.Join(work, "rewards-consumer.log"))
	if err != nil {
		t.Fatal(err)
	}
	ids := regexp.MustCompile(`"MessageId":"([0-9a-f-]{36})"`).FindAllSubmatch(consumed, -1)
	if len(ids) == 0 {
		t.Fatal("no MessageId in the consumer's log")
	}
	for _, m := range ids {
		if id := uuid.MustParse(string(m[1])); id.Version() != 7 {
			t.Fatalf("--ids v7: the consumer logged MessageId %s, a v%d", id, id.Version())
		}
	}
	run := oneBenchRun(t, results)
	r := run.Consumers[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"db_latency_ms recorded", run.DBLatencyMs == 1 && run.Knobs["db_latency_ms"] == "1"},
		{"profile_seconds recorded", run.Profile == 1},
		{"--pg recorded", run.Knobs["postgres shared_buffers"] == "64MB"},
		{"--ids recorded", run.Knobs["ids"] == "v7"},
		{"a --pg min_wal_size wins over the bench's", run.Knobs["postgres min_wal_size"] == "32MB"},
		{"the proxy forwarded the consumer's statements", r.Consumer.DBProxy != nil && r.Consumer.DBProxy.ToPostgres > 0 && r.Consumer.DBProxy.FromPostgres > 0},
		{"statements per event counted", r.Consumer.StatementsPerEvent > 0},
		{"WAL per event counted", r.Consumer.WALBytesPerEvent > 0 && r.Consumer.ServerWALBytesPerEvent > 0},
		{"every event of both runs has a mark", r.ExitCode == 0 && r.Paced.DBn == r.Paced.Events},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no (%+v)", c.what, r)
		}
	}
}

// A server setting that gives up durability is refused: the benchmark
// measures what a durable commit costs.
func TestBenchRefusesAServerThatIsNotDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	bin := builtBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pinctl"), "bench",
		"--events", "10", "--only", "rewards", "--results", t.TempDir(), "--pg", "full_page_writes=off")
	cmd.Env = benchEnv()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "needs fsync, synchronous_commit and full_page_writes on") {
		t.Fatalf("bench with full_page_writes=off: %v\n%s", err, out)
	}
}

// A --pg setting that would move the server the run connects to, or
// replace what --profile preloads, is refused before anything starts.
func TestBenchRefusesSettingsTheRunOwns(t *testing.T) {
	bin := builtBinaries(t)
	for _, kv := range []string{"port=5433", "Shared_Preload_Libraries=auto_explain", "unix_socket_directories=/run"} {
		cmd := exec.Command(filepath.Join(bin, "pinctl"), "bench", "--events", "10", "--results", t.TempDir(), "--pg", kv)
		cmd.Env = benchEnv()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "not a --pg setting") || strings.Contains(string(out), "▸") {
			t.Fatalf("bench --pg %s: %v\n%s", kv, err, out)
		}
	}
}

// An --ids the load cannot mint is refused before anything starts.
func TestBenchRefusesUnknownIDs(t *testing.T) {
	bin := builtBinaries(t)
	cmd := exec.Command(filepath.Join(bin, "pinctl"), "bench", "--events", "10", "--results", t.TempDir(), "--ids", "v5")
	cmd.Env = benchEnv()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"v5" is neither v4 nor v7`) || strings.Contains(string(out), "▸") {
		t.Fatalf("bench --ids v5: %v\n%s", err, out)
	}
}

// benchEnv is the test's environment without the knobs of a consumer.
func benchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KAFKA_") && !strings.HasPrefix(kv, "CONSUMER_") && !strings.HasPrefix(kv, "DATABASE_") {
			env = append(env, kv)
		}
	}
	return env
}

// oneBenchRun reads the one run of one consumer in results/<date>.json.
func oneBenchRun(t *testing.T, results string) bench.Record {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(results, "*.json"))
	if len(files) != 1 {
		t.Fatalf("results: %v, want one <date>.json", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Runs []bench.Record `json:"runs"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatalf("%s: %v", files[0], err)
	}
	if len(file.Runs) != 1 || len(file.Runs[0].Consumers) != 1 {
		t.Fatalf("want one run of one consumer, got %+v", file.Runs)
	}
	return file.Runs[0]
}
