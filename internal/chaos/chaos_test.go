package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pin-platform/pin/migrate/localpg"
)

// consumerBinaries returns a directory with the three consumer binaries:
// $PIN_CONSUMERS_BIN (make test sets it to the bin/ it just built), else
// the current source built into a temporary directory.
func consumerBinaries(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("PIN_CONSUMERS_BIN"); dir != "" {
		return dir
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/messenger-consumers", "./cmd/rewards-consumers", "./cmd/crm-consumers")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the consumers: %v\n%s", err, b)
	}
	return dir
}

// logWriter sends a run's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestShortRun is `make chaos` in small: a few hundred events per
// consumer, two instances per group, one of them killed, one read-only
// window; every consumer's database must match the model with every
// poison message in the DLQ.
func TestShortRun(t *testing.T) {
	o := Defaults()
	o.Seed, o.Events, o.Rate = 3, 300, 30
	o.Faults = Faults{Kills: 1, ReadOnly: true}
	o.RetryWindow, o.Timeout = 8*time.Second, 3*time.Minute
	res := runChecked(t, o, 5*time.Minute)
	for _, s := range res.Services {
		if s.poison == 0 {
			t.Errorf("%s: want poison among the events", s.Line())
		}
	}
}

// runChecked runs o with the consumers just built, within timeout, and
// fails the test unless each of the three consumers processed o.Events
// and matches its model, and the run saw no problem. The run's directory
// is removed at the end (o.Keep keeps it until then).
func runChecked(t *testing.T, o Options, timeout time.Duration) *Result {
	t.Helper()
	o.BinDir = consumerBinaries(t)
	o.Out = logWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.WorkDir != "" {
		t.Cleanup(func() { os.RemoveAll(res.WorkDir) })
	}
	if len(res.Services) != 3 {
		t.Fatalf("%d services checked, want 3", len(res.Services))
	}
	for _, s := range res.Services {
		t.Log(s.Line())
		if !s.OK() {
			t.Errorf("%s\n    %s", s.Line(), strings.Join(s.Notes(), "\n    "))
		}
		if s.events != o.Events {
			t.Errorf("%s: want %d events", s.Line(), o.Events)
		}
	}
	for _, p := range res.Problems {
		t.Error(p)
	}
	return res
}

// TestBehindPgBouncer runs 2,000 events per consumer through PgBouncer in
// transaction mode (Debian's 1.18: no prepared statement support; four
// server connections per service for two processes' pools) with the
// default settings, the statement cache on: every effect must match the
// model, exactly once, and only the poison in the DLQ.
func TestBehindPgBouncer(t *testing.T) { behindPgBouncer(t, nil) }

// TestBehindPgBouncerWithAFarDatabasesLanes is the same with the lanes a
// database 0.5 ms or more away gets (three transactions of up to 512
// messages a partition, distance.go), set: seven connections' worth of
// work per process (three lanes, the re-driver, mark checks) through four
// server connections per service.
func TestBehindPgBouncerWithAFarDatabasesLanes(t *testing.T) {
	behindPgBouncer(t, []string{"CONSUMER_TRANSACTIONS=3", "CONSUMER_BATCH_SIZE=512"})
}

func behindPgBouncer(t *testing.T, env []string) {
	if _, err := localpg.PgBouncerPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	o := Defaults()
	o.Seed, o.Events, o.Rate = 26, 2000, 200
	o.Faults = Faults{}
	o.Pooler = true
	o.Env = env
	o.Keep = true // for the consumers' logs
	o.RetryWindow, o.Timeout = 8*time.Second, 4*time.Minute
	res := runChecked(t, o, 6*time.Minute)
	// The pooler did share its server connections: some process met a
	// statement lost to it and turned its cache off.
	logs, _ := filepath.Glob(filepath.Join(res.WorkDir, "logs", "*.log"))
	warned := 0
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		warned += strings.Count(string(b), "most likely a pooler in transaction mode")
	}
	t.Logf("%d of %d consumer processes turned their statement cache off", warned, len(logs))
	if warned == 0 {
		t.Error("no consumer met a statement lost to the pooler: the run proves nothing about it")
	}
}

// TestLastLineIsWhatAProcessSaidLast: the line a run's finding quotes
// when a consumer exits by itself (its configuration error, its panic).
func TestLastLineIsWhatAProcessSaidLast(t *testing.T) {
	p := filepath.Join(t.TempDir(), "crm-1.log")
	long := strings.Repeat(`{"level":"info","message":"partitions assigned"}`+"\n", 200)
	last := "configuration: HTTP_ADDR: listen tcp 127.0.0.1:41234: bind: address already in use"
	if err := os.WriteFile(p, []byte(long+last+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lastLine(p); got != last {
		t.Errorf("lastLine = %q, want %q", got, last)
	}
	if err := os.WriteFile(p, []byte(last), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lastLine(p); got != last {
		t.Errorf("lastLine of a short log = %q, want %q", got, last)
	}
}
