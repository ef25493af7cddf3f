package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pin-platform/pin/migrate/pgtest"
)

// TestDevOnceReachesTheScenarioOutcome runs `pinctl dev --once` as make run
// does — the real consumer binaries as child processes, the in-process
// broker — against a fresh database, and checks the run ends with the
// scenario's expected outcome (which the command verifies against the
// database and the DLQs: every path of the three consumers).
func TestDevOnceReachesTheScenarioOutcome(t *testing.T) {
	bin := builtBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pinctl"), "dev", "--once", "--events", "300", "--data", t.TempDir(), "--yes")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KAFKA_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	// A URL with a password (not checked by the test server): what pinctl
	// dev prints must not hold it.
	pw := "dev-" + tricky
	cmd.Env = append(env, "DATABASE_URL="+withPassword(pgtest.NewDB(t), pw))
	out := runExpecting(t, cmd,
		"the scenario reached its expected outcome",
		"REWARDS_BOND_EVENT_ORPHAN_CLOSED",
		"CRM_SELECTION_UNKNOWN_ACTION",
		"MSG_LEAD_PARTICIPANTS_INVALID",
		"skipped-duplicate",
		"skipped-stale",
		"parked",
	)
	if l := leaks(out, pw); len(l) > 0 {
		t.Errorf("pinctl dev prints the database password (%q)", l)
	}
}
