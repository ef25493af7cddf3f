package consumer

import (
	"context"
	"math"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"time"
)

// The garbage collector's defaults (docs/operations.md, "GOGC,
// GOMEMLIMIT"). A consumer's live heap is small (10–20 MiB under a backlog:
// the batches in hand and their transactions' rows) and it allocates
// fast, so at Go's GOGC=100 the collector runs every 10–20 MiB allocated
// and takes 15–25 % of the process's CPU. Unless the operator sets GOGC,
// the process instead lets its heap grow to a floor before collecting:
// GOGC=400 under a soft memory limit of max(GCHeapFloor, the live heap +
// GCHeapFloor/2), re-read every gcTuneInterval, and never above the
// operator's GOMEMLIMIT (the limit the process started with). The limit
// decides when the GC runs; a heap that grows past the floor (large
// records, a long transaction) keeps 14 MiB of room above what it holds,
// so the collector never runs back to back against a limit the heap
// outgrew.
// bench (N = 30k, the three consumers, one sitting): consumer CPU per
// event 20–25 % less than at GOGC=100 with a floor of 28–30 MiB; peak RSS
// 59–61 MiB at 24 (and the CPU back at GOGC=100's), 62–62.5 at 28, 63–65
// at 30; GOGC=400 alone took it to 103–116 MiB.
const (
	GCHeapFloor    = 28 << 20
	gcPercent      = 400
	gcTuneInterval = 250 * time.Millisecond
)

// gcPolicy reports whether the process applies its own GC defaults: unless
// the operator set GOGC. An operator's GOMEMLIMIT alone is the ceiling of
// the process's limit (gcLimit), not a reason to fall back to Go's
// GOGC=100 and its CPU: the Kubernetes manifests set one.
func gcPolicy(environ []string) bool {
	for _, kv := range environ {
		if strings.HasPrefix(kv, "GOGC=") {
			return false
		}
	}
	return true
}

// gcLimit is the soft memory limit for a live heap of live bytes, at most
// ceiling (the operator's GOMEMLIMIT; math.MaxInt64 when unset).
func gcLimit(live uint64, ceiling int64) int64 {
	l := int64(math.MaxInt64)
	if live <= math.MaxInt64-GCHeapFloor {
		l = max(GCHeapFloor, int64(live)+GCHeapFloor/2)
	}
	return min(l, ceiling)
}

// gcTuner is the process's one tuner: Main runs in tests beside other
// Mains, so the first to apply the defaults starts it and the last to end
// restores what the process had before.
var gcTuner gcTunerState

type gcTunerState struct {
	sync.Mutex
	users         int
	stop          chan struct{}
	oldPercent    int
	oldLimitBytes int64
}

// tuneGC applies the GC defaults unless environ sets GOGC, and keeps the
// limit at gcLimit of the live heap, under the limit the process had,
// until ctx ends. It reports whether it applied them.
func tuneGC(ctx context.Context, environ []string) bool {
	if !gcPolicy(environ) {
		return false
	}
	g := &gcTuner
	g.Lock()
	if g.users == 0 {
		g.oldLimitBytes = debug.SetMemoryLimit(-1)
		debug.SetMemoryLimit(gcLimit(liveHeap(), g.oldLimitBytes))
		g.oldPercent = debug.SetGCPercent(gcPercent)
		g.stop = make(chan struct{})
		go keepGCLimit(g.stop)
	}
	g.users++
	g.Unlock()
	go func() {
		<-ctx.Done()
		g.Lock()
		defer g.Unlock()
		if g.users--; g.users == 0 {
			close(g.stop)
			debug.SetGCPercent(g.oldPercent)
			debug.SetMemoryLimit(g.oldLimitBytes)
		}
	}()
	return true
}

// ceiling is the limit the process had before the tuner (GOMEMLIMIT's),
// the most the tuner sets.
func (g *gcTunerState) ceiling() int64 {
	g.Lock()
	defer g.Unlock()
	return g.oldLimitBytes
}

// keepGCLimit re-reads the live heap every gcTuneInterval and moves the
// soft limit with it, until stop closes.
func keepGCLimit(stop chan struct{}) {
	t := time.NewTicker(gcTuneInterval)
	defer t.Stop()
	last := int64(-1)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			gcTuner.Lock()
			select {
			case <-stop: // ended while this tick waited: the knobs are restored
				gcTuner.Unlock()
				return
			default:
			}
			if l := gcLimit(liveHeap(), gcTuner.oldLimitBytes); l != last {
				debug.SetMemoryLimit(l)
				last = l
			}
			gcTuner.Unlock()
		}
	}
}

// liveHeap is the heap the last GC cycle found live.
func liveHeap() uint64 {
	sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(sample)
	if sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}
