package consumer

import (
	"context"
	"testing"
	"time"
)

// newTurnWorker is a worker with only what the turn mechanics use.
func newTurnWorker(r *Runtime) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &worker{r: r, quit: make(chan struct{}), ctx: ctx, cancel: cancel}
}

func TestTurnsAreHeldOnlyAroundTransactions(t *testing.T) {
	r := &Runtime{turns: make(chan struct{}, 1)}
	a, b := newTurnWorker(r), newTurnWorker(r)
	defer a.cancel()
	defer b.cancel()

	for i := 0; i < 2; i++ { // the second time, holding it already
		if !a.takeTurn(nil) {
			t.Fatalf("a: takeTurn #%d should succeed", i+1)
		}
	}
	if len(r.turns) != 1 {
		t.Fatalf("%d turns taken after a took one twice, want 1", len(r.turns))
	}

	// b waits while a holds the only turn; a stop ends the wait.
	got := make(chan bool, 1)
	go func() { got <- b.takeTurn(b.quit) }()
	select {
	case ok := <-got:
		t.Fatalf("b got a turn (%v) while a holds the only one", ok)
	case <-time.After(50 * time.Millisecond):
	}
	close(b.quit)
	if ok := <-got; ok {
		t.Fatal("b: a stop should end the wait without a turn")
	}

	// Backing off gives the turn up; the next transaction takes one again.
	if !a.sleep(time.Millisecond) {
		t.Fatal("a: sleep should go on")
	}
	if a.hasTurn.Load() || len(r.turns) != 0 {
		t.Fatal("a kept its turn through a backoff")
	}
	if !a.takeTurn(nil) {
		t.Fatal("a: takeTurn after the backoff")
	}

	// A worker left behind has its turn given back by whoever is first;
	// the second give is a no-op, not a second release.
	done := make(chan struct{})
	go func() { a.giveTurn(); close(done) }()
	a.giveTurn()
	<-done
	if len(r.turns) != 0 || a.hasTurn.Load() {
		t.Fatalf("after two gives: %d turns taken, hasTurn %v", len(r.turns), a.hasTurn.Load())
	}

	// Once the drain budget is spent no turn is taken, even a free one.
	a.cancel()
	if a.takeTurn(nil) {
		t.Fatal("a took a turn after its context was cancelled")
	}

	// Without a cap everything is at once.
	free := newTurnWorker(&Runtime{})
	defer free.cancel()
	if !free.takeTurn(nil) || free.hasTurn.Load() {
		t.Fatal("without a cap takeTurn should succeed without holding anything")
	}
}
