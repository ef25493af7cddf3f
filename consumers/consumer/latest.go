package consumer

import (
	"sync/atomic"
	"time"
)

// Latest is the newest of the times it was shown, for concurrent use: the
// event time a lag gauge measures from (the runtime's newest CreatedAt
// processed, a service's newest write).
type Latest struct{ n atomic.Int64 } // unix nanos; 0: none yet

// Observe takes t if it is newer than the newest so far; a zero t is none.
func (l *Latest) Observe(t time.Time) {
	if t.IsZero() {
		return
	}
	n := t.UnixNano()
	for {
		old := l.n.Load()
		if n <= old || l.n.CompareAndSwap(old, n) {
			return
		}
	}
}

// Load returns the newest time observed; ok is false before any.
func (l *Latest) Load() (t time.Time, ok bool) {
	n := l.n.Load()
	if n == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}
