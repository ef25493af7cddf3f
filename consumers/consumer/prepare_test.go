package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/consumers/consumers/consumer"
	"github.com/pin-platform/consumers/consumers/consumer/consumertest"
	"github.com/pin-platform/consumers/ent"
)

type preparedKey struct{}

// preparing is the probe with a Service.Prepare that records what it was
// given and tags the context; the handler counts the runs that saw the tag.
type preparing struct {
	fail     bool
	mu       sync.Mutex
	given    []uuid.UUID // MessageIds passed to Prepare, over all batches
	calls    int
	withTag  atomic.Int64
	untagged atomic.Int64
}

func (p *preparing) service(reg prometheus.Registerer) consumer.Service {
	svc := probeService(long...)(reg)
	svc.Prepare = func(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
		p.mu.Lock()
		p.calls++
		for _, m := range msgs {
			p.given = append(p.given, m.MessageID)
		}
		p.mu.Unlock()
		// It runs in the batch's transaction.
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
			return nil, err
		}
		if p.fail {
			return nil, errors.New("prepare fails")
		}
		return context.WithValue(ctx, preparedKey{}, true), nil
	}
	handle := svc.Routes[0].Handle
	svc.Routes[0].Handle = func(ctx context.Context, tx *ent.Tx, m *consumer.Message) (consumer.Outcome, error) {
		if ctx.Value(preparedKey{}) != nil {
			p.withTag.Add(1)
		} else {
			p.untagged.Add(1)
		}
		return handle(ctx, tx, m)
	}
	return svc
}

func TestPrepareRunsOncePerBatchWithTheMessagesToHandle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 20
	ids := map[uuid.UUID]bool{}
	for i := 0; i < n; i++ {
		id, v := envelope(leadID, "")
		ids[id] = true
		e.produce(1, v)
		if i == 3 {
			e.produce(1, v) // the same message again, in the same batch
		}
	}
	p := &preparing{}
	consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.waitCommitted(n + 1)

	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d", got, n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == 0 || len(p.given) < 2 {
		t.Fatalf("Prepare: %d calls with %d messages; want the pre-produced messages batched", p.calls, len(p.given))
	}
	seen := map[uuid.UUID]bool{}
	for _, id := range p.given {
		if !ids[id] || seen[id] {
			t.Fatalf("Prepare was given %s: unknown or twice (a duplicate is left out)", id)
		}
		seen[id] = true
	}
	// Every handler run of a prepared batch saw Prepare's context; the
	// others ran on their own.
	if got := p.withTag.Load(); got != int64(len(p.given)) {
		t.Fatalf("%d handler runs saw Prepare's context, want %d", got, len(p.given))
	}
	if got := p.withTag.Load() + p.untagged.Load(); got != n {
		t.Fatalf("%d handler runs, want %d (one per message)", got, n)
	}
}

func TestAFailingPrepareReplaysTheBatchOneMessageAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 10
	for i := 0; i < n; i++ {
		_, v := envelope(leadID, "")
		e.produce(2, v)
	}
	p := &preparing{fail: true}
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.waitCommitted(n)

	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d (each message once)", got, n)
	}
	p.mu.Lock()
	calls := p.calls
	p.mu.Unlock()
	if calls == 0 {
		t.Fatal("Prepare was never called: the messages were not batched")
	}
	if got := p.withTag.Load(); got != 0 {
		t.Fatalf("%d handler runs saw the context of a failed Prepare", got)
	}
	if got := p.untagged.Load(); got != n {
		t.Fatalf("%d handler runs, want %d: one each, without Prepare", got, n)
	}
	if got := r.Counter("pin_consumer_messages_total", map[string]string{"outcome": "applied"}); got != n {
		t.Fatalf("messages_total{applied} = %v, want %d", got, n)
	}
}
