package consumer_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// A failure is the message's own or the world's (failure.go): these tests
// hold the runtime to both sides — a poison message among good ones still
// reaches the DLQ in bounded time, and a failure that every message meets
// pauses the partitions and dead-letters nothing.

func TestAPoisonMessageAmongGoodOnesIsDeadLetteredOnceOthersSucceed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	_, bug := envelope(leadID, "bug")
	e.produce(0, bug) // alone on its partition: no message behind it to probe
	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	// Until others commit, nothing tells its failure from one that every
	// message meets: from its fifth attempt it waits as for one, its
	// partition paused.
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		return run.Counter("pin_consumer_infrastructure_errors_total", map[string]string{"cause": "systemic"}) >= 1
	}, "the poison message to wait as systemic, for want of evidence")
	// Then good messages of the same event type on the other partitions:
	// their commits are the evidence that the failure is the poison's own.
	for i := 0; i < 4; i++ {
		_, ok := envelope(leadID, "")
		e.produce(int32(1+i%2), ok)
	}
	e.waitCommitted(5)
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(dlq))
	}
	// It waited for evidence (no message behind it, none of its type
	// committed yet) past its fifth attempt: every attempt is counted.
	c, a := kafkatest.Header(dlq[0], "x-dlq-error-code"), kafkatest.Header(dlq[0], "x-attempts")
	if n, err := strconv.Atoi(a); c != "EVENT_PROCESSING_FAILED" || err != nil || n < 5 {
		t.Fatalf("code %q attempts %q, want EVENT_PROCESSING_FAILED after at least 5", c, a)
	}
	if got := e.events(leadID); got != 4 {
		t.Fatalf("lead_events = %d, want 4", got)
	}
	kafkatest.Eventually(t, 10*time.Second, func() bool { return run.Counter("pin_consumer_paused_partitions", nil) == 0 },
		"the partition resumed once its message was dead-lettered")
}

// A failure that every message meets and that the runtime does not know (a
// trigger raising an error on every insert, as a bug in a statement would)
// holds every partition: no dead letter, each partition paused, /readyz 503
// naming it; once it is gone, every message is applied exactly once.
func TestAFailureThatHitsEveryMessagePausesAndDeadLettersNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.failEveryFeedInsert("boom")
	leads := map[uuid.UUID]int{}
	for p := int32(0); p < 3; p++ {
		for i := 0; i < 3; i++ {
			l := e.lead()
			leads[l]++
			_, v := envelope(l, "")
			e.produce(p, v)
		}
	}
	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{HTTP: true, StuckAfter: faultStuckAfter})
	f := faultWatch{t: t, run: run}
	f.held(3, "systemic")
	if n := e.cluster.Count(t, probeDLQ); n != 0 {
		t.Fatalf("DLQ holds %d while every message fails, want 0", n)
	}
	if _, err := e.db.Exec(`DROP TRIGGER boom ON lead_events`); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(9)
	f.recovered()
	for l, n := range leads {
		if got := e.events(l); got != n {
			t.Fatalf("lead %s: %d lead_events, want %d", l, got, n)
		}
	}
	if n := e.cluster.Count(t, probeDLQ); n != 0 {
		t.Fatalf("DLQ holds %d, want 0", n)
	}
}

// /readyz answers 200 once the member joined and PostgreSQL answers, and
// fails a partition only once it made no progress past
// CONSUMER_STUCK_AFTER (the contract): a partition that waits on the world
// for less leaves the instance ready, and one whose wait passes it fails
// it, naming the cause.
func TestReadyzFailsAWaitingPartitionOnlyPastItsThreshold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.failEveryFeedInsert("boom_ready")
	const threshold = 6 * time.Second
	_, f := e.startOneWithStuckAfter(threshold)
	kafkatest.Eventually(t, 60*time.Second, func() bool {
		return f.run.Counter("pin_consumer_paused_partitions", nil) == 1 &&
			f.run.Counter("pin_consumer_infrastructure_errors_total", map[string]string{"cause": "systemic"}) > 0
	}, "the partition to wait on cause systemic")
	waiting := time.Now()
	if code, body := f.get("/readyz"); code != http.StatusOK && time.Since(waiting) < threshold/2 {
		t.Fatalf("/readyz %d %q while a partition has waited under CONSUMER_STUCK_AFTER, want 200", code, body)
	}
	var code int
	var body string
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		code, body = f.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "cause systemic")
	}, "/readyz %d %q past CONSUMER_STUCK_AFTER, want 503 naming cause systemic", code, body)
	if time.Since(waiting) < threshold/2 {
		t.Fatalf("/readyz failed %s into the wait, under CONSUMER_STUCK_AFTER %s", time.Since(waiting), threshold)
	}
	if _, err := e.db.Exec(`DROP TRIGGER boom_ready ON lead_events`); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(1)
	f.recovered()
}

// A partition idle past CONSUMER_STUCK_AFTER is not stuck the moment a
// message arrives: its idle time is not time without progress.
func TestAnIdlePartitionIsNotStuckWhenAMessageArrives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const threshold = 2 * time.Second
	l, f := e.startOneWithStuckAfter(threshold)
	e.waitCommitted(1)
	time.Sleep(2 * threshold) // idle
	id, held := envelope(l, "hold")
	h := holdMessage(t, id)
	e.produce(0, held)
	h.awaitStarted(t)
	arrived := time.Now()
	if code, body := f.get("/readyz"); code != http.StatusOK && time.Since(arrived) < threshold/2 {
		t.Fatalf("/readyz %d %q just after a message reached a partition idle past CONSUMER_STUCK_AFTER, want 200", code, body)
	}
	h.Release()
	e.waitCommitted(2)
}

// startOneWithStuckAfter produces a message of a new lead to partition 0
// and starts the probe service on it with /readyz and CONSUMER_STUCK_AFTER
// at threshold; it returns the lead and a watch of the run.
func (e *env) startOneWithStuckAfter(threshold time.Duration) (uuid.UUID, faultWatch) {
	e.t.Helper()
	l := e.lead()
	_, v := envelope(l, "")
	e.produce(0, v)
	run := consumertest.Start(e.t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{HTTP: true, StuckAfter: threshold})
	return l, faultWatch{t: e.t, run: run}
}

// A service's outcome fields (Message.LogFields) that panic, for an
// applied message and for one dead-lettered as invalid: the panic is
// logged and the message ends as it would have, once. Unrecovered, it
// took the process down after the commit or the dead letter and before
// the offset: the message came back, and did it again.
func TestOutcomeFieldsThatPanicDoNotTakeTheConsumerDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.lead()
	_, applied := envelope(l, "fields-panic")
	_, invalid := envelope(l, "invalid-fields-panic")
	e.produce(0, applied)
	e.produce(0, invalid)
	var panicked atomic.Bool
	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...),
		consumertest.Options{Logger: watchedLogger("the outcome line's fields panicked", &panicked)})
	e.waitCommitted(2)
	if !panicked.Load() {
		t.Fatal("no line for the panic of the outcome fields")
	}
	if got := e.events(l); got != 1 {
		t.Fatalf("lead_events = %d, want 1", got)
	}
	time.Sleep(time.Second) // a second dead letter would be on its way
	if n := e.cluster.Count(t, probeDLQ); n != 1 {
		t.Fatalf("DLQ holds %d, want the invalid message once", n)
	}
	f := faultWatch{t: t, run: run}
	f.running()
}

// faultWatch checks what a consumer shows while it waits on a failure that
// is not its messages' own, and once it is gone.
type faultWatch struct {
	t   *testing.T
	run *consumertest.Running
}

// faultStuckAfter is CONSUMER_STUCK_AFTER in the runs a faultWatch
// watches: /readyz fails a partition that waits this long.
const faultStuckAfter = 2 * time.Second

// held waits until partitions partitions are paused, the cause has been
// counted and, once they waited past CONSUMER_STUCK_AFTER (the run's
// faultStuckAfter), /readyz answers 503 naming it.
func (f faultWatch) held(partitions int, cause string) {
	f.t.Helper()
	kafkatest.Eventually(f.t, 60*time.Second, func() bool {
		return f.run.Counter("pin_consumer_paused_partitions", nil) == float64(partitions) &&
			f.run.Counter("pin_consumer_infrastructure_errors_total", map[string]string{"cause": cause}) > 0
	}, "%d partitions paused on cause %s (paused %v, counted %v)", partitions, cause,
		f.run.Counter("pin_consumer_paused_partitions", nil),
		f.run.Counter("pin_consumer_infrastructure_errors_total", map[string]string{"cause": cause}))
	var code int
	var body string
	kafkatest.Eventually(f.t, 30*time.Second, func() bool {
		code, body = f.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "cause "+cause)
	}, "/readyz while held: %d %q, want 503 naming cause %s", code, body, cause)
	if code, _ := f.get("/healthz"); code != http.StatusOK {
		f.t.Fatalf("/healthz while held: %d, want 200 (the process is fine)", code)
	}
	f.running()
}

// recovered waits until nothing is paused and /readyz answers 200.
func (f faultWatch) recovered() {
	f.t.Helper()
	kafkatest.Eventually(f.t, 60*time.Second, func() bool {
		code, _ := f.get("/readyz")
		return f.run.Counter("pin_consumer_paused_partitions", nil) == 0 && code == http.StatusOK
	}, "partitions resumed and /readyz 200")
	f.running()
}

// running fails the test if the runtime ended: a fault must never restart
// the consumer.
func (f faultWatch) running() {
	f.t.Helper()
	select {
	case err := <-f.run.Done():
		f.t.Fatalf("the runtime ended (%v): a fault restarted the consumer", err)
	default:
	}
}

func (f faultWatch) get(path string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s%s", f.run.Runtime.HTTPAddr(), path), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A parked message whose re-drives fail unexpectedly has them counted on
// its row: while nothing else of its type commits it keeps waiting; once
// others commit between its failures, it is dead-lettered instead of
// being re-driven forever.
func TestAParkedMessageThatKeepsFailingUnexpectedlyReachesTheDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	id, flaky := envelope(leadID, "flaky")
	e.produce(0, flaky)
	run := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(time.Second), consumertest.Options{})
	unexpected := func() int {
		return e.count(`SELECT coalesce(max(unexpected_failures), 0) FROM parked_messages WHERE message_id = $1`, id)
	}
	kafkatest.Eventually(t, 30*time.Second, func() bool { return unexpected() >= 6 },
		"the parked message's unexpected failures counted on its row (have %d)", unexpected())
	if n := e.cluster.Count(t, probeDLQ); n != 0 {
		t.Fatalf("DLQ holds %d while nothing else of its type committed, want 0", n)
	}
	good := 0
	kafkatest.Eventually(t, 60*time.Second, func() bool {
		_, ok := envelope(leadID, "")
		e.produce(1, ok)
		good++
		return e.count(`SELECT count(*) FROM parked_messages WHERE message_id = $1`, id) == 0
	}, "the parked message dead-lettered")
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if c := kafkatest.Header(dlq[0], "x-dlq-error-code"); c != "EVENT_PROCESSING_FAILED" {
		t.Fatalf("dead-lettered as %q, want EVENT_PROCESSING_FAILED", c)
	}
	kafkatest.Eventually(t, 30*time.Second, func() bool { return e.events(leadID) == good },
		"the %d good messages applied (have %d)", good, e.events(leadID))
	if n := run.Counter("pin_consumer_dlq_total", nil); n != 1 {
		t.Fatalf("dead letters: %v, want 1", n)
	}
}
