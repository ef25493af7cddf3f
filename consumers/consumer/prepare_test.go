package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate/localpg"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// preparing is the probe with a Read that records what it was given and
// tags its view, and a Write that records what it wrote; the decisions
// count the runs on a tagged view.
type preparing struct {
	fail       atomic.Bool  // Read fails
	panics     atomic.Bool  // Read panics
	flushFail  atomic.Bool  // Write fails
	deadlock   atomic.Int32 // Read (or, with deadlockAt "flush", Write) loses a deadlock this many more times
	deadlockAt string
	lockLead   uuid.UUID // Read locks this lead row FOR KEY SHARE, as a service's Read locks what it reads
	raced      int       // the index in batches of the call that lost the deadlock, -1 until one did
	poison     uuid.UUID // Read fails for any transaction holding this message
	blame      bool      // and names it (FailMessage)
	// blameInWrite, when set, is a message Write blames (FailMessage) once.
	blameInWrite func(*consumer.Message) bool
	flushes      atomic.Int64
	flushed      atomic.Int64 // decisions seen by the writes
	early        atomic.Bool  // a write ran before its transaction's decisions had
	unmarked     atomic.Int64 // messages whose marks a write neither found in its transaction nor was given
	mu           sync.Mutex
	given        []uuid.UUID   // MessageIds passed to Read, over all transactions
	batches      [][]uuid.UUID // the same, per call
	calls        int
	withTag      atomic.Int64
	untagged     atomic.Int64
}

// loseDeadlock reports whether the hook at where loses a deadlock now,
// recording the Read call it happened in.
func (p *preparing) loseDeadlock(where string) bool {
	if p.deadlockAt != where || p.deadlock.Add(-1) < 0 {
		return false
	}
	p.mu.Lock()
	p.raced = len(p.batches) - 1
	p.mu.Unlock()
	return true
}

func (p *preparing) service(reg prometheus.Registerer) consumer.Service {
	svc := probeService(long...)(reg)
	b := probeOf(svc)
	read, write, decide := b.Read, b.Write, b.Routes[0].Decide
	upTo := map[*probeView]int64{} // decisions in tagged views once the view's have run
	b.Read = func(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (*probeView, error) {
		p.mu.Lock()
		p.calls++
		var batch []uuid.UUID
		for _, m := range msgs {
			p.given = append(p.given, m.MessageID)
			batch = append(batch, m.MessageID)
		}
		p.batches = append(p.batches, batch)
		p.mu.Unlock()
		// It runs in the transaction.
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
			return nil, err
		}
		if p.fail.Load() {
			return nil, errors.New("read fails")
		}
		if p.loseDeadlock("prepare") {
			return nil, fmt.Errorf("lock the leads: %w", &pq.Error{Code: "40P01", Message: "deadlock detected"})
		}
		if p.panics.Load() {
			panic("read panics")
		}
		if p.lockLead != uuid.Nil {
			if _, err := tx.ExecContext(ctx, `SELECT 1 FROM leads WHERE id = $1 FOR KEY SHARE`, p.lockLead); err != nil {
				return nil, err
			}
		}
		for _, m := range msgs {
			if m.MessageID != p.poison {
				continue
			}
			if p.blame {
				return nil, consumer.FailMessage(m, errors.New("read cannot take this one"))
			}
			return nil, errors.New("read fails on a message it does not name")
		}
		v, err := read(ctx, tx, msgs)
		if err != nil {
			return nil, err
		}
		v.prepared = true
		p.mu.Lock()
		upTo[v] = int64(len(p.given))
		p.mu.Unlock()
		return v, nil
	}
	b.Write = func(ctx context.Context, tx *ent.Tx, v *probeView, marks *consumer.Marks) error {
		p.mu.Lock()
		want := upTo[v]
		delete(upTo, v)
		p.mu.Unlock()
		if p.withTag.Load() < want {
			p.early.Store(true)
		}
		p.flushes.Add(1)
		p.flushed.Add(int64(len(v.msgs)))
		given := map[string]bool{}
		for _, k := range marks.Keys() {
			given[k] = true
		}
		var keys []string
		for _, m := range v.msgs {
			if k := "probe:" + m.MessageID.String(); !given[k] {
				keys = append(keys, k)
			}
		}
		rows, err := tx.QueryContext(ctx, `SELECT count(*) FROM processed_messages WHERE idempotency_key = ANY($1)`, pq.Array(keys))
		if err != nil {
			return err
		}
		var marked int64
		for rows.Next() {
			if err := rows.Scan(&marked); err != nil {
				rows.Close()
				return err
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		p.unmarked.Add(int64(len(keys)) - marked)
		if p.flushFail.Load() {
			return errors.New("write fails")
		}
		if p.loseDeadlock("flush") {
			return fmt.Errorf("update the leads: %w", &pq.Error{Code: "40P01", Message: "deadlock detected"})
		}
		if p.blameInWrite != nil {
			for _, m := range v.msgs {
				if p.blameInWrite(m) {
					return consumer.FailMessage(m, probeConflict.Errorf("the write lost a race on it"))
				}
			}
		}
		return write(ctx, tx, v, marks)
	}
	b.Routes = []consumer.Route[*probeView]{b.Routes[0]}
	b.Routes[0].Decide = func(ctx context.Context, v *probeView, m *consumer.Message) (consumer.Outcome, error) {
		if v != nil && v.prepared {
			p.withTag.Add(1)
		} else {
			p.untagged.Add(1)
		}
		return decide(ctx, v, m)
	}
	svc.Handlers = b
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
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.waitCommitted(n + 1)

	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d", got, n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == 0 || len(p.given) < 2 {
		t.Fatalf("Prepare: %d calls with %d messages; want the pre-produced messages batched", p.calls, len(p.given))
	}
	for _, batch := range p.batches {
		seen := map[uuid.UUID]bool{}
		for _, id := range batch {
			if !ids[id] || seen[id] {
				t.Fatalf("Prepare was given %s: unknown, or twice in one batch (a repeat is left out)", id)
			}
			seen[id] = true
		}
	}
	// Every decision ran on its transaction's view. Each message is
	// decided once, unless the repeat's copies fell in two transactions:
	// the second then finds the first's mark, rolls back and runs again
	// without it (a processed-already re-run), deciding its other
	// messages once more.
	if got := p.withTag.Load(); got != int64(len(p.given)) {
		t.Fatalf("%d decisions on a view Read returned, want %d", got, len(p.given))
	}
	runs := p.withTag.Load() + p.untagged.Load()
	reruns := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "processed-already"})
	largest := 0
	for _, b := range p.batches {
		largest = max(largest, len(b))
	}
	switch {
	case reruns == 0 && runs != n:
		t.Fatalf("%d decisions without a re-run, want %d (one per message)", runs, n)
	case reruns > 0 && (runs < n || runs > int64(n)+int64(reruns)*int64(largest)):
		t.Fatalf("%d decisions with %v processed-already re-runs of at most %d messages, want %d to %d",
			runs, reruns, largest, n, int64(n)+int64(reruns)*int64(largest))
	}
}

// A hook that fails for every transaction (Read returning an error or
// panicking, a Write write failing) is a bug every message meets:
// the partition holds, nothing is dead-lettered, and once it is gone every
// message is applied once, each through Read.
func TestAHookFailingForEveryMessageHoldsThePartition(t *testing.T) {
	t.Parallel()
	for name, broken := range map[string]func(*preparing) *atomic.Bool{
		"prepare fails":       func(p *preparing) *atomic.Bool { return &p.fail },
		"prepare panics":      func(p *preparing) *atomic.Bool { return &p.panics },
		"before-commit fails": func(p *preparing) *atomic.Bool { return &p.flushFail },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			leadID := e.lead()
			const n = 8
			for i := 0; i < n; i++ {
				_, v := envelope(leadID, "")
				e.produce(1, v)
			}
			p := &preparing{}
			broken(p).Store(true)
			r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{HTTP: true, StuckAfter: faultStuckAfter})
			faultWatch{t: t, run: r}.held(1, "systemic")
			if got := e.events(leadID); got != 0 {
				t.Fatalf("lead_events = %d while the hook fails, want 0", got)
			}
			if got := e.cluster.Count(t, probeDLQ); got != 0 {
				t.Fatalf("DLQ holds %d while every message fails, want 0", got)
			}
			broken(p).Store(false)
			e.waitCommitted(n)
			if got := e.events(leadID); got != n {
				t.Fatalf("lead_events = %d, want %d (each message once)", got, n)
			}
			if got := p.untagged.Load(); got != 0 {
				t.Fatalf("%d handler runs without Prepare, want 0: every transaction is prepared", got)
			}
			checkOutcomes(t, r, map[consumer.Outcome]int{consumer.Applied: n})
		})
	}
}

// A Read that fails on one message of the transaction: when it names it
// (FailMessage), that message alone fails; when it does not, the messages
// run in smaller transactions until it is alone. Either way the others
// are applied through Read and the poison one, its failure its own (the
// others commit), reaches the DLQ.
func TestAPrepareFailingOnOneMessageDeadLettersThatMessageAlone(t *testing.T) {
	t.Parallel()
	for name, blame := range map[string]bool{"named": true, "not named": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			leadID := e.lead()
			const n = 9
			p := &preparing{blame: blame}
			p.poison = e.produceOneAmong(leadID, n, 4, "")
			r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
			e.waitCommitted(n)
			dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
			if len(dlq) != 1 || kafkatest.Header(dlq[0], "x-dlq-error-code") != consumer.ProcessingFailed.Name {
				t.Fatalf("DLQ: %d records, want the poison message with %s", len(dlq), consumer.ProcessingFailed.Name)
			}
			if got := e.events(leadID); got != n-1 {
				t.Fatalf("lead_events = %d, want %d", got, n-1)
			}
			if got := p.untagged.Load(); got != 0 {
				t.Fatalf("%d handler runs without Prepare, want 0", got)
			}
			checkOutcomes(t, r, map[consumer.Outcome]int{consumer.Applied: n - 1, consumer.DeadLettered: 1})
		})
	}
}

func TestBeforeCommitRunsAfterTheBatchsHandlers(t *testing.T) {
	t.Parallel()
	p := &preparing{}
	runBatch(t, 12, 2, p.service)
	if p.flushes.Load() == 0 {
		t.Fatal("BeforeCommit never ran: the messages were not batched")
	}
	// One flush per Read, each after all of its batch's handlers.
	p.mu.Lock()
	calls, given := p.calls, len(p.given)
	p.mu.Unlock()
	if got := p.flushes.Load(); got != int64(calls) {
		t.Fatalf("%d flushes for %d batches", got, calls)
	}
	if p.early.Load() {
		t.Fatal("a BeforeCommit function ran before its batch's handlers")
	}
	// With the marks, for its first statement, or after them: a lock
	// taken only in Write is held the least.
	if n := p.unmarked.Load(); n != 0 {
		t.Fatalf("Write ran before the marks of %d of its messages, and was not given them", n)
	}
	if got := p.flushed.Load(); got != int64(given) || p.withTag.Load() != int64(given) {
		t.Fatalf("flushes covered %d messages, handlers ran %d in batches; want %d", got, p.withTag.Load(), given)
	}
}

func TestABeforeCommitFailureOfOneMessageIsThatMessagesFirstAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 9
	var failing uuid.UUID
	for i := 0; i < n; i++ {
		mode := ""
		if i == 4 {
			mode = "flush-conflict" // the handler applies it; the batch's flush blames it
		}
		id, v := envelope(leadID, mode)
		if i == 4 {
			failing = id
		}
		e.produce(1, v)
	}
	var blamedOnce atomic.Bool // the write loses its race once
	p := &preparing{blameInWrite: func(m *consumer.Message) bool {
		return m.MessageID == failing && !blamedOnce.Swap(true)
	}}
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.waitCommitted(n)

	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d (each message once)", got, n)
	}
	// The blamed message went on alone: one retry-now of its code, then
	// applied (prepared, as every transaction is); the others in batches.
	if got := r.Counter("pin_consumer_retries_total", map[string]string{"code": probeConflict.Name}); got != 1 {
		t.Fatalf("retries{%s} = %v, want 1 (the flush's failure was its first attempt)", probeConflict.Name, got)
	}
	if got := p.untagged.Load(); got != 0 {
		t.Fatalf("%d handler runs without Prepare, want 0", got)
	}
	if got := r.Counter("pin_consumer_messages_total", map[string]string{"outcome": "applied"}); got != n {
		t.Fatalf("messages_total{applied} = %v, want %d", got, n)
	}
}

// The batch path keeps the runtime's guarantees through a rebalance: a
// member joins and another leaves while batches with Read and
// Write are in flight; every message has one effect and one mark.
func TestPreparedBatchesThroughARebalanceNeitherLoseNorDouble(t *testing.T) {
	t.Parallel()
	pa, pb := &preparing{}, &preparing{}
	checkRebalance(t, newEnv(t), pa.service, pb.service, 16)
	if pa.flushes.Load() == 0 || pb.flushes.Load() == 0 {
		t.Fatalf("prepared batches committed: a %d, b %d; want both", pa.flushes.Load(), pb.flushes.Load())
	}
}

// runBatch produces n probe messages on one partition, runs the service
// built by build until their offsets are committed, and checks that each
// message had exactly one effect.
func runBatch(t *testing.T, n int, partition int32, build func(prometheus.Registerer) consumer.Service) *consumertest.Running {
	t.Helper()
	e := newEnv(t)
	leadID := e.lead()
	for i := 0; i < n; i++ {
		_, v := envelope(leadID, "")
		e.produce(partition, v)
	}
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, build, consumertest.Options{})
	e.waitCommitted(int64(n))
	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d (each message once)", got, n)
	}
	return r
}

// produceOneAmong produces n probe messages of leadID on partition 1, the
// one at offset k with mode; it returns that one's MessageId.
func (e *env) produceOneAmong(leadID uuid.UUID, n, k int, mode string) uuid.UUID {
	e.t.Helper()
	var special uuid.UUID
	for i := 0; i < n; i++ {
		m := ""
		if i == k {
			m = mode
		}
		id, v := envelope(leadID, m)
		if i == k {
			special = id
		}
		e.produce(1, v)
	}
	return special
}

// checkOutcomes checks pin_consumer_messages_total by outcome.
func checkOutcomes(t *testing.T, r *consumertest.Running, want map[consumer.Outcome]int) {
	t.Helper()
	for out, n := range want {
		if got := r.Counter("pin_consumer_messages_total", map[string]string{"outcome": string(out)}); got != float64(n) {
			t.Errorf("messages_total{%s} = %v, want %d", out, got, n)
		}
	}
}

// A batch inserts its marks after its routes. A redelivered message whose mark exists
// is taken out and the batch run again without it: the message is
// acknowledged as a duplicate with no second effect, and the others are
// still committed in batches, not one at a time.
func TestABatchTakesOutAProcessedMessageAndCommitsTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 8
	processed := e.produceOneAmong(leadID, n, 3, "")
	// processed before a crash, its offset never committed
	e.markProcessed(processed, 1, 3)
	applyProbe(t, e.db, leadID) // the probe handler's effect
	p := &preparing{}
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.waitCommitted(n)

	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d (the processed message's effect once)", got, n)
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.SkippedDuplicate: 1, consumer.Applied: n - 1})
	if got := p.untagged.Load(); got != 0 {
		t.Fatalf("%d handler runs on their own, want 0: the batch runs again without the duplicate", got)
	}
	if got := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "processed-already"}); got != 1 {
		t.Fatalf("batch_reruns{processed-already} = %v, want 1", got)
	}
	// It went through a batch (its handler ran on the state it had left),
	// and that batch was rolled back and run again without it.
	p.mu.Lock()
	defer p.mu.Unlock()
	given := 0
	for _, id := range p.given {
		if id == processed {
			given++
		}
	}
	if given != 1 {
		t.Fatalf("the processed message was given to Prepare %d times, want 1 (then left out)", given)
	}
	// The partition's first transaction since its assignment looked for
	// the marks it inserted: no plain insert met the existing one.
	if got := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "mark-exists"}); got != 0 {
		t.Fatalf("batch_reruns{mark-exists} = %v, want 0", got)
	}
}

// Once a partition committed its first 2 × CONSUMER_BATCH_SIZE messages,
// its marks go in with a plain INSERT. A mark that exists all the same (a
// producer that sent a message twice; another processor's) fails it: the
// transaction runs again to find which, and then without that message, a
// duplicate with no second effect. Having met one, the partition looks
// for its marks again for as many messages: a second duplicate close
// behind is found at once.
func TestASettledPartitionsPlainMarksMeetingOneRunAgainToFindIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plainMarksMeetingOne(t, e, e.url, consumertest.Options{})
}

// The same behind PgBouncer in transaction mode, with the statement cache
// off as docs/operations.md says to run there (a statement the pooler
// lost would add an attempt of its own): the plain insert's unique
// violation ends its transaction on the pooler's server connection, and
// the reruns go on, on whichever they get.
func TestASettledPartitionsPlainMarksMeetingOneBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plainMarksMeetingOne(t, e, pgtest.Bouncer(t, e.url, localpg.BouncerOptions{}), consumertest.Options{NoStatementCache: true})
}

// A Write that builds its marks' insert (Marks.Item) and never sends it
// would commit its rows without their marks, and a redelivery would apply
// them again. The runtime fails such a transaction instead: the message
// whose Write drops them never commits its row nor a mark, the messages
// around it commit with theirs, and, their successes the evidence, it is
// dead-lettered as EVENT_PROCESSING_FAILED.
func TestAWriteThatDoesNotSendItsMarksCommitsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const batch = 2 // past a partition's first 2 × 2 messages the marks go to Write
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(), consumertest.Options{BatchSize: batch})
	for i := 0; i < 2*batch; i++ {
		_, v := envelope(leadID, "")
		e.produce(1, v)
	}
	e.waitCommitted(2 * batch)

	const n = 5
	dropped := e.produceOneAmong(leadID, n, 2, "drop-marks")
	e.waitCommitted(2*batch + n)
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 || kafkatest.Header(dlq[0], "x-dlq-error-code") != consumer.ProcessingFailed.Name {
		t.Fatalf("DLQ: %d records, want the message whose Write dropped its marks, with %s", len(dlq), consumer.ProcessingFailed.Name)
	}
	if reason := kafkatest.Header(dlq[0], consumer.HeaderReason); !strings.Contains(reason, "did not send it") {
		t.Fatalf("dead letter's reason %q does not say the marks were not sent", reason)
	}
	if got := e.events(leadID); got != 2*batch+n-1 {
		t.Fatalf("lead_events = %d, want %d (none for the message whose Write dropped its marks)", got, 2*batch+n-1)
	}
	if got := e.count(`SELECT count(*) FROM processed_messages WHERE idempotency_key = $1`, "probe:"+dropped.String()); got != 0 {
		t.Fatalf("%d marks of the dropped message", got)
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.Applied: 2*batch + n - 1, consumer.DeadLettered: 1})
}

// plainMarksMeetingOne runs the probe service on dbURL (e.url, or a pooler
// in front of it) with o and checks what the tests above say.
func plainMarksMeetingOne(t *testing.T, e *env, dbURL string, o consumertest.Options) {
	leadID := e.lead()
	p := &preparing{}
	const batch = 2 // the first 2 × 2 messages of a partition look for their marks
	o.BatchSize = batch
	r := consumertest.Start(t, e.cluster.Bootstrap, dbURL, p.service, o)
	for i := 0; i < 2*batch; i++ {
		_, v := envelope(leadID, "")
		e.produce(1, v)
	}
	e.waitCommitted(2 * batch)

	// Two messages processed already, as copies of them at other offsets
	// were: the 4th and the 6th of n. Whatever the batches, fewer than
	// 2 × batch messages commit between the first's transaction and the
	// second's.
	const n = 8
	dup := map[int]uuid.UUID{}
	for i := 0; i < n; i++ {
		id, v := envelope(leadID, "")
		if i == 3 || i == 5 {
			dup[i] = id
			e.markProcessed(id, 1, 1)
			applyProbe(t, e.db, leadID)
		}
		e.produce(1, v)
	}
	e.waitCommitted(2*batch + n)

	if got := e.events(leadID); got != 2*batch+n {
		t.Fatalf("lead_events = %d, want %d (each processed message's effect once)", got, 2*batch+n)
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.SkippedDuplicate: 2, consumer.Applied: 2*batch + n - 2})
	for reason, want := range map[string]float64{"mark-exists": 1, "processed-already": 2, "lost-race": 0} {
		if got := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("batch_reruns{%s} = %v, want %v", reason, got, want)
		}
	}
	if got := p.untagged.Load(); got != 0 {
		t.Fatalf("%d handler runs on their own, want 0: the batch runs again as a batch", got)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	given := map[uuid.UUID]int{}
	for _, g := range p.given {
		given[g]++
	}
	if got := given[dup[3]]; got != 2 {
		t.Fatalf("the first processed message was given to Prepare %d times, want 2 (the plain insert, the one that found its mark; then left out)", got)
	}
	if got := given[dup[5]]; got != 1 {
		t.Fatalf("the second processed message was given to Prepare %d times, want 1 (found at once; then left out)", got)
	}
}

// The handler of a redelivered, processed message runs on the state it
// left, and may fail there. That failure is no attempt of a message that
// needs none: it is skipped as a duplicate, not dead-lettered.
func TestAProcessedMessageFailingInABatchIsADuplicateNotADeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 5
	id := e.produceOneAmong(leadID, n, 2, "invalid") // fails whenever its handler runs
	e.markProcessed(id, 1, 2)
	p := &preparing{}
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.waitCommitted(n)

	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.DeadLettered: 0, consumer.SkippedDuplicate: 1})
	if got := e.events(leadID); got != n-1 {
		t.Fatalf("lead_events = %d, want %d", got, n-1)
	}
}

// startWaiting starts p's service and returns once it waits for a lock
// that a transaction of the test holds.
func (e *env) startWaiting(p *preparing, what string) *consumertest.Running {
	e.t.Helper()
	r := consumertest.Start(e.t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.awaitLockWait(what)
	return r
}

// A batch whose message another processor holds, uncommitted (a parked
// re-drive, a member that lost its assignment), waits at its marks for
// that transaction; when it commits, the batch runs again without the
// message: one effect.
func TestABatchRacingAnUncommittedMarkWaitsAndSkipsTheMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 6
	raced := e.produceOneAmong(leadID, n, 4, "")
	racer := e.holdMark(raced, 1, 4)
	applyProbe(t, racer, leadID) // the probe handler's effect
	p := &preparing{}
	r := e.startWaiting(p, "the batch to wait on the racer's mark")
	if err := racer.Commit(); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(n)

	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d (the raced message's effect once)", got, n)
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.SkippedDuplicate: 1})
}

// A message whose handler fails in a batch while another processor holds
// its key uncommitted is not dead-lettered on that failure: the runtime
// waits for the holder, as a claim does, and finds the message processed.
func TestAFailureInABatchWaitsForAnUncommittedHolderOfTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 4
	held := e.produceOneAmong(leadID, n, 1, "invalid") // fails on the state the holder has not committed yet
	holder := e.holdMark(held, 1, 1)
	p := &preparing{}
	r := e.startWaiting(p, "the runtime to wait on the holder's key")
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(n)

	// Not dead-lettered: the holder processed the message.
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.DeadLettered: 0, consumer.SkippedDuplicate: 1})
	if got := e.events(leadID); got != n-1 {
		t.Fatalf("lead_events = %d, want %d", got, n-1)
	}
}

// A batch whose marks' insert is a deadlock's victim runs again at once,
// as a batch: here another processor holds one of its keys and then wants
// the lead row the batch's Read locked (KEY SHARE), as rewards' Read
// locks its bonds before the marks.
func TestABatchWhoseMarksLoseADeadlockRunsAgainAsABatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	const n = 5
	held := e.produceOneAmong(leadID, n, 2, "")
	holder := e.holdMark(held, 1, 2)
	// Only the batch's session looks for the deadlock within the test:
	// which of two waiters PostgreSQL picks otherwise depends on whose
	// deadlock_timeout fires first, which a loaded machine can reorder.
	if _, err := holder.Exec(`SET LOCAL deadlock_timeout = '10min'`); err != nil {
		t.Fatal(err)
	}
	p := &preparing{lockLead: leadID}
	r := e.startWaiting(p, "the batch to wait at its marks on the holder's key")
	// The cycle: the holder now waits on the batch, whose deadlock check
	// (after the server's deadlock_timeout) finds it: it is the victim.
	if _, err := holder.Exec(`SELECT 1 FROM leads WHERE id = $1 FOR UPDATE`, leadID); err != nil {
		t.Fatalf("the holder lost the deadlock, not the batch: %v", err)
	}
	applyProbe(t, holder, leadID) // the probe handler's effect
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(n)

	// Once at least; again when the batch's rerun takes the lead's row lock
	// before the woken holder does (row locks are not granted in queue
	// order), and the cycle forms anew — within the immediate re-runs.
	lost := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "lost-race"})
	if lost < 1 || lost > 3 {
		t.Fatalf("batch_reruns{lost-race} = %v, want 1 to 3 (the immediate re-runs)", lost)
	}
	if got := r.Counter("pin_consumer_retries_total", map[string]string{"code": "40P01"}); got != lost {
		t.Fatalf("retries{40P01} = %v, want %v: each lost race is a rerun of the batch", got, lost)
	}
	if got := p.untagged.Load(); got != 0 {
		t.Fatalf("%d handler runs on their own, want 0: the batch runs again as a batch", got)
	}
	if got := e.events(leadID); got != n {
		t.Fatalf("lead_events = %d, want %d (the held message's effect once)", got, n)
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.SkippedDuplicate: 1})
}

// A deadlock or serialization failure in Read's locks or in a write
// registered with Write is a lost race, like one in the marks: the
// transaction runs again at once with the same messages, as a whole (not
// split into single messages), and nothing is dead-lettered.
func TestAHookLosingADeadlockRunsTheTransactionAgainAsAWhole(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"prepare", "flush"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			leadID := e.lead()
			const n = 6
			for i := 0; i < n; i++ {
				_, v := envelope(leadID, "")
				e.produce(1, v)
			}
			p := &preparing{deadlockAt: where, raced: -1}
			p.deadlock.Store(1)
			r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
			e.waitCommitted(n)

			p.mu.Lock()
			k, batches := p.raced, slices.Clone(p.batches)
			p.mu.Unlock()
			if k < 0 || k+1 >= len(batches) {
				t.Fatalf("Prepare calls %d, the deadlock in call %d: want a call after it", len(batches), k)
			}
			if !slices.Equal(batches[k], batches[k+1]) {
				t.Fatalf("after the deadlock Prepare got %v, want the same messages again %v", batches[k+1], batches[k])
			}
			if got := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "lost-race"}); got != 1 {
				t.Fatalf("batch_reruns{lost-race} = %v, want 1", got)
			}
			if got := r.Counter("pin_consumer_retries_total", map[string]string{"code": "40P01"}); got != 1 {
				t.Fatalf("retries{40P01} = %v, want 1", got)
			}
			if got := e.cluster.Count(t, probeDLQ); got != 0 {
				t.Fatalf("DLQ holds %d, want 0", got)
			}
			if got := e.events(leadID); got != n {
				t.Fatalf("lead_events = %d, want %d (each message once)", got, n)
			}
			checkOutcomes(t, r, map[consumer.Outcome]int{consumer.Applied: n})
		})
	}
}

// A deadlock that outlasts the immediate re-runs costs the message
// 1 + lostRaceRetries transactions, then the infrastructure backoff: the
// lost races are counted once (runTx), not again per attempt. With the
// deadlock lasting 8 transactions, a lone message takes 4 (its first, shared
// one and its re-runs), 4 more on its own, a wait (cause 40), and commits
// with the 9th.
func TestALastingDeadlockCostsItsRerunsThenBacksOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	_, v := envelope(leadID, "")
	e.produce(1, v)
	p := &preparing{deadlockAt: "prepare", raced: -1}
	p.deadlock.Store(8)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, p.service, consumertest.Options{})
	e.waitCommitted(1)

	p.mu.Lock()
	calls := len(p.batches)
	p.mu.Unlock()
	if calls != 9 {
		t.Fatalf("%d transactions, want 9: 2 × (1 + %d re-runs), then the one that commits after the backoff", calls, 3)
	}
	if got := r.Counter("pin_consumer_infrastructure_errors_total", map[string]string{"cause": "40"}); got != 1 {
		t.Fatalf("infrastructure_errors{cause=40} = %v, want 1 (one backoff)", got)
	}
	if got := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "lost-race"}); got != 6 {
		t.Fatalf("batch_reruns{lost-race} = %v, want 6", got)
	}
	if got := e.events(leadID); got != 1 {
		t.Fatalf("lead_events = %d, want 1", got)
	}
}
