package consumer

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCDefaultsApplyOnlyWhenNeitherKnobIsSet(t *testing.T) {
	for _, tc := range []struct {
		environ []string
		want    bool
	}{
		{nil, true},
		{[]string{"KAFKA_BROKERS=x", "GOGCX=1"}, true},
		{[]string{"GOGC=100"}, false},
		{[]string{"GOGC="}, false}, // set, if empty: the operator's
		{[]string{"GOMEMLIMIT=96MiB"}, false},
	} {
		if got := gcPolicy(tc.environ); got != tc.want {
			t.Errorf("gcPolicy(%q) = %v, want %v", tc.environ, got, tc.want)
		}
	}
}

func TestGCLimitIsTheFloorThenFollowsTheLiveHeap(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int64
	}{
		{0, GCHeapFloor},
		{GCHeapFloor / 2, GCHeapFloor},
		{40 << 20, 40<<20 + GCHeapFloor/2}, // a heap past the floor: never a limit it outgrew
		{math.MaxUint64, math.MaxInt64},
	} {
		if got := gcLimit(tc.live); got != tc.want {
			t.Errorf("gcLimit(%d) = %d, want %d", tc.live, got, tc.want)
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
	hold := make([][]byte, 0, 64)
	for range 48 {
		hold = append(hold, make([]byte, 1<<20))
	}
	runtime.GC()
	deadline := time.Now().Add(5 * time.Second)
	for debug.SetMemoryLimit(-1) < 48<<20+GCHeapFloor/2 {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d did not follow a live heap of 48 MiB", debug.SetMemoryLimit(-1))
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(hold)

	cancel()
	for gogc() != 100 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		if time.Now().After(deadline) {
			t.Fatalf("knobs not restored: GOGC %d, limit %d", gogc(), debug.SetMemoryLimit(-1))
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
	deadline := time.Now().Add(5 * time.Second)
	for gogc() != 100 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		if time.Now().After(deadline) {
			t.Fatalf("knobs not restored after the last ended: GOGC %d, limit %d", gogc(), debug.SetMemoryLimit(-1))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
