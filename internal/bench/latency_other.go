//go:build !linux

package bench

// newSleeper waits with time.Timer outside Linux (no timerfd).
func newSleeper() sleeper { return newTimerSleeper() }
