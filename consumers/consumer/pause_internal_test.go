package consumer

import (
	"testing"
	"time"
)

// A partition paused because its worker's queue is full is resumed by the
// poll loop once the queue is down to half. Poll returns early only for an
// event, and a paused partition fetches none: the loop must poll with a
// short timeout while such a partition waits, or the worker empties its
// queue while the loop sleeps (runtime.go, backPressurePoll). A partition
// held on a failure waits far longer and needs no haste.
func TestThePollLoopLooksAgainSoonWhileAQueueIsFull(t *testing.T) {
	r := &Runtime{cfg: Config{QueueBytes: 1 << 20}, workers: map[int32]*worker{}}
	if got := r.pollTimeout(); got != idlePoll {
		t.Fatalf("no partition paused: timeout %d ms, want %d", got, idlePoll)
	}

	held := &worker{in: make(chan queued, 4)}
	held.paused.Store(true)
	held.hold("connection", errString("database away"))
	r.workers[0] = held
	if got := r.pollTimeout(); got != idlePoll {
		t.Fatalf("a partition held on a failure: timeout %d ms, want %d", got, idlePoll)
	}

	full := &worker{in: make(chan queued, 4)}
	for range cap(full.in) {
		full.in <- queued{at: time.Now()}
	}
	full.paused.Store(true)
	r.workers[1] = full
	if got := r.pollTimeout(); got != backPressurePoll {
		t.Fatalf("a partition paused for a full queue: timeout %d ms, want %d", got, backPressurePoll)
	}
	if !full.paused.Load() {
		t.Fatal("a full queue was resumed")
	}
}

type errString string

func (e errString) Error() string { return string(e) }
