package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pin-platform/pin/internal/bench"
)

// TestBenchEndToEnd runs `pinctl bench` as `make bench` does — its own
// durable PostgreSQL, the in-process broker, the real consumer binary as a
// child process — with a tiny N on one consumer, and checks that every
// measure was taken and written. It asserts no speed. --sql-time, the bound
// of the pgbench SQL limit that was removed, is still accepted.
func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, the broker and a consumer")
	}
	bin := builtBinaries(t)
	results := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pinctl"), "bench",
		"--events", "300", "--only", "rewards", "--paced", "2s", "--paced-rate", "150", "--sql-time", "10s", "--results", results)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KAFKA_") && !strings.HasPrefix(kv, "CONSUMER_") && !strings.HasPrefix(kv, "DATABASE_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	runExpecting(t, cmd,
		"═══ rewards",
		"broker only",
		"consumer: assigned → last offset committed",
		"p50 / p99 produce → database commit",
		"p50 / p99 produce → offset commit",
		"peak RSS",
		"ceiling at this cost",
		"events/s ÷ ceiling on the cores left",
		"--sql-time is ignored",
	)

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
	r := file.Runs[0].Consumers[0]
	if r.Service != "rewards" || r.Events != 300 {
		t.Errorf("service %q events %d, want rewards 300", r.Service, r.Events)
	}
	marks := 0
	for _, n := range r.Consumer.Outcomes {
		marks += n
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"broker-only rate measured", r.BrokerOnly.AssignedEPS > 0},
		{"consumer rate measured", r.Consumer.EPS > 0 && r.Consumer.AssignedEPS > 0},
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
		{"targets evaluated", len(r.Targets) == 5},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no (%+v)", c.what, r)
		}
	}
}
