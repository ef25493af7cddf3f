package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// overlap wraps the probe's handler to record how many transactions ran at
// once: handlers of one transaction run one after the other on its
// worker, so concurrent handlers are concurrent transactions.
type overlap struct{ now, peak atomic.Int64 }

func (o *overlap) build(base func(prometheus.Registerer) consumer.Service) func(prometheus.Registerer) consumer.Service {
	return func(reg prometheus.Registerer) consumer.Service {
		s := base(reg)
		b := probeOf(s)
		h := b.Routes[0].Decide
		b.Routes = []consumer.Route[*probeView]{b.Routes[0]}
		b.Routes[0].Decide = func(ctx context.Context, v *probeView, m *consumer.Message) (consumer.Outcome, error) {
			n := o.now.Add(1)
			defer o.now.Add(-1)
			for p := o.peak.Load(); n > p && !o.peak.CompareAndSwap(p, n); p = o.peak.Load() {
			}
			time.Sleep(3 * time.Millisecond)
			return h(ctx, v, m)
		}
		s.Handlers = b
		return s
	}
}

// CONSUMER_TRANSACTIONS caps the transactions that run at once, whatever
// the partitions: one runs them one after the other; three let them
// overlap.
func TestTransactionsCapConcurrentTransactions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cap      int
		wantPeak func(int64) bool
		want     string
	}{
		{1, func(p int64) bool { return p == 1 }, "exactly 1"},
		{3, func(p int64) bool { return p >= 2 && p <= 3 }, "2 or 3 (the partitions overlap, at most the cap)"},
	} {
		e := newEnv(t)
		l := e.lead()
		for i := 0; i < 60; i++ {
			_, v := envelope(l, "")
			e.produce(int32(i%3), v)
		}
		var o overlap
		r := consumertest.Start(t, e.cluster.Bootstrap, e.url, o.build(probeService(long...)),
			consumertest.Options{BatchSize: 4, Transactions: tc.cap})
		e.waitCommitted(60)
		if err := r.Stop(); err != nil {
			t.Fatalf("cap %d: stop: %v", tc.cap, err)
		}
		if n := e.events(l); n != 60 {
			t.Fatalf("cap %d: %d feed entries, want 60", tc.cap, n)
		}
		if p := o.peak.Load(); !tc.wantPeak(p) {
			t.Fatalf("cap %d: %d transactions at once, want %s", tc.cap, p, tc.want)
		}
	}
}

// A worker that backs off in place (a blocking service's RetryLater, an
// outage) holds no lane while it waits: with one, the other partitions
// still go on.
func TestAWorkerBackingOffHoldsNoLane(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	blocking := func(reg prometheus.Registerer) consumer.Service {
		s := probeService(1000 * time.Hour)(reg) // × RETRY_TIME_SCALE 0.001: an hour
		s.Blocking = true
		return s
	}
	_, missing := envelope(e.lead(), "")
	if _, err := e.db.Exec(`DELETE FROM leads`); err != nil { // its lead is gone: RetryLater, waited out in place
		t.Fatal(err)
	}
	e.produce(0, missing)
	l := e.lead()
	for i := 0; i < 5; i++ {
		_, v := envelope(l, "")
		e.produce(1, v)
		_, v = envelope(l, "")
		e.produce(2, v)
	}
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, blocking, consumertest.Options{Transactions: 1})
	kafkatest.Eventually(t, 30*time.Second, func() bool { return e.events(l) == 10 },
		"the other partitions' 10 events applied while partition 0 backs off (have %d)", e.events(l))
	if got := e.cluster.Committed(t, probeGroup, probeTopic)[0]; got > 0 {
		t.Fatalf("partition 0 committed offset %d: its message should still be waiting", got)
	}
	if err := r.Stop(); err != nil { // the waiting worker is interrupted, not waited for
		t.Fatalf("stop: %v", err)
	}
}
