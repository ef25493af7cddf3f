package consumer

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCDefaultsApplyUnlessGOGCIsSet(t *testing.T) {
	for _, tc := range []struct {
		environ []string
		want    bool
	}{
		{nil, true},
		{[]string{"KAFKA_BROKERS=x", "GOGCX=1"}, true},
		{[]string{"GOGC=100"}, false},
		{[]string{"GOGC="}, false},           // set, if empty: the operator's
		{[]string{"GOMEMLIMIT=96MiB"}, true}, // a ceiling, not Go's GOGC=100 (the manifests)
		{[]string{"GOMEMLIMIT=96MiB", "GOGC=200"}, false},
	} {
		if got := gcPolicy(tc.environ); got != tc.want {
			t.Errorf("gcPolicy(%q) = %v, want %v", tc.environ, got, tc.want)
		}
	}
}

func TestGCLimitIsTheFloorThenFollowsTheLiveHeapUpToTheCeiling(t *testing.T) {
	const none = math.MaxInt64
	for _, tc := range []struct {
		live    uint64
		ceiling int64
		want    int64
	}{
		{0, none, GCHeapFloor},
		{GCHeapFloor / 2, none, GCHeapFloor},
		{40 << 20, none, 40<<20 + GCHeapFloor/2}, // a heap past the floor: never a limit it outgrew
		{math.MaxUint64, none, math.MaxInt64},
		{0, 96 << 20, GCHeapFloor},           // GOMEMLIMIT=96MiB: below it, the floor
		{90 << 20, 96 << 20, 96 << 20},       // past it, the operator's limit
		{0, 16 << 20, 16 << 20},              // a ceiling under the floor wins
		{math.MaxUint64, 96 << 20, 96 << 20}, // however large the heap
	} {
		if got := gcLimit(tc.live, tc.ceiling); got != tc.want {
			t.Errorf("gcLimit(%d, %d) = %d, want %d", tc.live, tc.ceiling, got, tc.want)
		}
	}
}

// TestTuneGCSetsAndRestoresTheKnobs runs the policy on this process's
// runtime: GOGC and the soft limit while ctx lasts, what it found after.
func TestTuneGCSetsAndRestoresTheKnobs(t *testing.T) {
	if !gcPolicy([]string{}) {
		t.Fatal("policy off for an empty environment")
	}
	before, beforeLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetGCPercent(before)
	defer debug.SetMemoryLimit(beforeLimit)

	if tuneGC(context.Background(), []string{"GOGC=50"}) {
		t.Fatal("tuneGC applied its defaults over the operator's GOGC")
	}
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC changed to %d with the operator's own set", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	if !tuneGC(ctx, nil) {
		t.Fatal("tuneGC did not apply its defaults with neither knob set")
	}
	if got := gogc(); got != gcPercent {
		t.Errorf("GOGC = %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(-1); got < GCHeapFloor || got == math.MaxInt64 {
		t.Errorf("memory limit = %d, want at least the floor %d", got, GCHeapFloor)
	}
	// A heap that outgrows the floor: the limit follows it.
	hold := liveMiB(48)
	awaitGC(t, func() bool { return debug.SetMemoryLimit(-1) >= 48<<20+GCHeapFloor/2 }, "the limit to follow a live heap of 48 MiB")
	runtime.KeepAlive(hold)

	cancel()
	awaitGC(t, func() bool { return gogc() == 100 && debug.SetMemoryLimit(-1) == math.MaxInt64 }, "the knobs restored")
}

// An operator's GOMEMLIMIT (here set on the runtime, as Go does from the
// environment at start) keeps the defaults on under it: GOGC=400 and a
// limit that follows the live heap but never passes the operator's, which
// is what the process has again after.
func TestTuneGCKeepsTheOperatorsMemoryLimitAsItsCeiling(t *testing.T) {
	const ceiling = 40 << 20
	before, beforeLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(ceiling)
	defer debug.SetGCPercent(before)
	defer debug.SetMemoryLimit(beforeLimit)

	ctx, cancel := context.WithCancel(context.Background())
	if !tuneGC(ctx, []string{"GOMEMLIMIT=40MiB"}) {
		t.Fatal("tuneGC did not apply its defaults under the operator's GOMEMLIMIT")
	}
	if got := gogc(); got != gcPercent {
		t.Errorf("GOGC = %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(-1); got > ceiling {
		t.Errorf("memory limit = %d, above the operator's %d", got, ceiling)
	}
	if got := gcTuner.ceiling(); got != ceiling {
		t.Errorf("ceiling = %d, want %d", got, ceiling)
	}
	// A heap past the floor: the limit follows it up to the ceiling only.
	hold := liveMiB(32)
	awaitGC(t, func() bool { return debug.SetMemoryLimit(-1) == ceiling }, "the limit at the ceiling with a live heap of 32 MiB")
	runtime.KeepAlive(hold)

	cancel()
	awaitGC(t, func() bool { return gogc() == 100 && debug.SetMemoryLimit(-1) == ceiling }, "the knobs restored")
}

// liveMiB allocates n MiB that the next collection finds live (keep the
// result alive), and runs that collection.
func liveMiB(n int) [][]byte {
	hold := make([][]byte, 0, n)
	for range n {
		hold = append(hold, make([]byte, 1<<20))
	}
	runtime.GC()
	return hold
}

// awaitGC waits up to 5 s for cond (the tuner acts every gcTuneInterval),
// failing the test with what it waited for and the limit it found.
func awaitGC(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s; memory limit %d, GOGC %d", what, debug.SetMemoryLimit(-1), gogc())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gogc reads GOGC (SetGCPercent has no read-only form).
func gogc() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// Two Mains in one process (tests): the defaults last until the last of
// them ends, and only then is what the process had restored.
func TestTuneGCLastToEndRestores(t *testing.T) {
	before, beforeLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetGCPercent(before)
	defer debug.SetMemoryLimit(beforeLimit)

	first, endFirst := context.WithCancel(context.Background())
	second, endSecond := context.WithCancel(context.Background())
	if !tuneGC(first, nil) || !tuneGC(second, nil) {
		t.Fatal("tuneGC did not apply its defaults with neither knob set")
	}
	endFirst()
	time.Sleep(100 * time.Millisecond) // the first's end is seen
	if got := gogc(); got != gcPercent {
		t.Fatalf("GOGC = %d after the first ended with the second running, want %d", got, gcPercent)
	}
	endSecond()
	awaitGC(t, func() bool { return gogc() == 100 && debug.SetMemoryLimit(-1) == math.MaxInt64 }, "the knobs restored after the last ended")
}
