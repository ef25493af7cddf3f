package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/bench"
	"github.com/pin-platform/pin/internal/freeport"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// long is a retry-later schedule that does not run out during a test
// (1000 s × RETRY_TIME_SCALE 0.001 = 1 s per retry).
var long = []time.Duration{1000 * time.Second, 1000 * time.Second, 1000 * time.Second, 1000 * time.Second, 1000 * time.Second, 1000 * time.Second, 1000 * time.Second, 1000 * time.Second}

func TestCommitsOffsetsOnlyAfterTheDatabaseCommit(t *testing.T) {
	t.Parallel()
	onEachBroker(t, func(t *testing.T, e *env) {
		leadID := e.lead()
		const n = 30
		for i := 0; i < n; i++ {
			_, v := envelope(leadID, "")
			e.produce(int32(i%3), v)
		}
		r := e.start(probeService(long...), consumertest.Options{})
		e.waitCommitted(n)
		// Every committed offset has its effect and its mark in the database.
		if got := e.events(leadID); got != n {
			t.Fatalf("lead_events = %d, want %d", got, n)
		}
		if got := e.count(`SELECT count(*) FROM processed_messages WHERE outcome = 'applied' AND consumer_group = $1 AND topic = $2`, probeGroup, probeTopic); got != n {
			t.Fatalf("processed_messages = %d, want %d", got, n)
		}
		if got := r.Counter("pin_consumer_messages_total", map[string]string{"outcome": "applied"}); got != n {
			t.Fatalf("messages_total{applied} = %v, want %d", got, n)
		}
		// The offsets were committed right after they were stored, not by
		// librdkafka's auto-commit (which the counter leaves out).
		if got := r.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "stored", "result": "committed"}); got < 1 {
			t.Fatalf("offset_commits_total{stored,committed} = %v, want at least 1", got)
		}
	})
}

func TestRedeliveryAfterCrashBetweenDatabaseAndOffsetCommitIsSkipped(t *testing.T) {
	t.Parallel()
	onEachBroker(t, func(t *testing.T, e *env) {
		leadID := e.lead()
		id, v := envelope(leadID, "")
		e.produce(0, v)
		// The state a crash leaves between the two commits: effect and mark are
		// in the database, the offset was never committed.
		applyProbe(t, e.db, leadID) // the probe handler's effect
		if _, err := e.db.Exec(`INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome) VALUES ($1, $2, $3, 0, 0, 'applied')`, "probe:"+id.String(), probeGroup, probeTopic); err != nil {
			t.Fatal(err)
		}
		r := e.start(probeService(long...), consumertest.Options{})
		e.waitCommitted(1)
		if got := e.events(leadID); got != 1 {
			t.Fatalf("lead_events = %d, want 1 (no double effect)", got)
		}
		if got := r.Counter("pin_consumer_messages_total", map[string]string{"outcome": "skipped-duplicate"}); got != 1 {
			t.Fatalf("skipped-duplicate = %v, want 1", got)
		}
	})
}

func TestSameMessageTwiceHasOneEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	_, v := envelope(leadID, "")
	e.produce(1, v)
	e.produce(1, v) // same batch
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(2)
	e.produce(1, v) // a later batch
	e.waitCommitted(3)
	if got := e.events(leadID); got != 1 {
		t.Fatalf("lead_events = %d, want 1", got)
	}
}

func TestInvalidMessagesGoToTheDLQWithEveryHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	_, invalid := envelope(leadID, "invalid")
	_, panics := envelope(leadID, "panic")
	wrongType := []byte(`{"MessageId":"` + uuid.NewString() + `","EventType":"test.probe","ContractVersion":1,"Payload":{"LeadId":42}}`)
	noPayload := []byte(`{"messageId":"` + uuid.NewString() + `","eventType":"test.probe","contractVersion":1}`)
	cases := []struct {
		name  string
		value []byte
		code  string
	}{
		{"handler says invalid", invalid, "PROBE_INVALID"},
		{"not JSON", []byte("not json"), "EVENT_ENVELOPE_INVALID"},
		{"tombstone", nil, "EVENT_ENVELOPE_INVALID"},
		{"no MessageId", []byte(`{"EventType":"test.probe","Payload":{}}`), "EVENT_ENVELOPE_INVALID"},
		{"MessageId not a UUID", []byte(`{"MessageId":"42","EventType":"test.probe","Payload":{}}`), "EVENT_ENVELOPE_INVALID"},
		{"payload member of the wrong type", wrongType, "PROBE_INVALID"},
		{"payload missing", noPayload, "PROBE_INVALID"},
		{"handler panics", panics, "PROBE_INVALID"},
	}
	var produced []kafka.TopicPartition
	for i, c := range cases {
		produced = append(produced, e.cluster.Produce(t, probeTopic, kafkatest.Message{
			Partition: 2, Key: []byte("key-" + strconv.Itoa(i)), Value: c.value,
			Headers: map[string]string{"origin": c.name},
		})...)
	}
	_, ok := envelope(leadID, "")
	e.produce(2, ok) // after the bad ones: the partition goes on
	start := time.Now().Add(-time.Second)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(int64(len(cases) + 1))
	dlq := e.cluster.ReadAll(t, probeDLQ, len(cases), 10*time.Second)
	if len(dlq) != len(cases) {
		t.Fatalf("DLQ holds %d messages, want %d", len(dlq), len(cases))
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := dlq[i]
			if !bytes.Equal(m.Value, c.value) || string(m.Key) != "key-"+strconv.Itoa(i) {
				t.Errorf("key/value not kept byte for byte: %q %q", m.Key, m.Value)
			}
			if c.value == nil && m.Value != nil {
				t.Errorf("tombstone value became %q", m.Value)
			}
			if m.TopicPartition.Partition != 2 {
				t.Errorf("DLQ partition %d, want the original 2", m.TopicPartition.Partition)
			}
			want := map[string]string{
				"origin":               c.name,
				"x-dlq-error-code":     c.code,
				"x-source-topic":       probeTopic,
				"x-original-partition": "2",
				"x-original-offset":    strconv.FormatInt(int64(produced[i].Offset), 10),
				"x-consumer-group":     probeGroup,
				"x-attempts":           "1",
			}
			for k, v := range want {
				if got := kafkatest.Header(m, k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if kafkatest.Header(m, "x-dlq-reason") == "" {
				t.Error("x-dlq-reason is empty")
			}
			at, err := time.Parse(time.RFC3339, kafkatest.Header(m, "x-dlq-at"))
			if err != nil || at.Before(start.Truncate(time.Second)) {
				t.Errorf("x-dlq-at = %q (%v)", kafkatest.Header(m, "x-dlq-at"), err)
			}
		})
	}
	if got := e.events(leadID); got != 1 {
		t.Fatalf("lead_events = %d, want 1 (the good message after the bad ones)", got)
	}
	// A dead-lettered message gets no idempotency mark.
	if got := e.count(`SELECT count(*) FROM processed_messages`); got != 1 {
		t.Fatalf("processed_messages = %d, want 1", got)
	}
	if got := r.Counter("pin_consumer_dlq_total", nil); got != float64(len(cases)) {
		t.Fatalf("dlq_total = %v, want %d", got, len(cases))
	}
}

func TestRetryNowIsRetriedThreeTimesThenDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, v := envelope(e.lead(), "conflict")
	e.produce(0, v)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(1)
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dlq))
	}
	if c, a := kafkatest.Header(dlq[0], "x-dlq-error-code"), kafkatest.Header(dlq[0], "x-attempts"); c != "PROBE_CONFLICT" || a != "4" {
		t.Fatalf("code %q attempts %q, want PROBE_CONFLICT 4", c, a)
	}
	if got := r.Counter("pin_consumer_retries_total", map[string]string{"class": "retry-now"}); got != 3 {
		t.Fatalf("retry-now retries = %v, want 3", got)
	}
}

func TestAFailureInsideABatchCountsItsAttemptsExactly(t *testing.T) {
	// Not parallel: it counts the handler's runs of "conflict" messages.
	e := newEnv(t)
	leadID := e.lead()
	_, ok1 := envelope(leadID, "")
	_, conflict := envelope(leadID, "conflict")
	_, ok2 := envelope(leadID, "")
	for _, v := range [][]byte{ok1, conflict, ok2} {
		e.produce(1, v) // one partition: one batch
	}
	before := conflictRuns.Load()
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(3)
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 || kafkatest.Header(dlq[0], "x-attempts") != "4" {
		t.Fatalf("DLQ: %d messages, x-attempts %q; want 1 with 4", len(dlq), kafkatest.Header(dlq[0], "x-attempts"))
	}
	if runs := conflictRuns.Load() - before; runs != 4 {
		t.Fatalf("the failing handler ran %d times, want 4 (the batch attempt counts as the first)", runs)
	}
	if got := e.events(leadID); got != 2 {
		t.Fatalf("lead_events = %d, want 2 (the messages around the failure, once each)", got)
	}
}

func TestRetryLaterDoesNotBlockThePartitionAndAppliesWhenTheConditionClears(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	missing, present := uuid.New(), e.lead()
	_, waiting := envelope(missing, "")
	_, later := envelope(present, "")
	e.produce(0, waiting)
	e.produce(0, later)
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	// The later message of the same partition is applied while the first
	// waits, and both offsets are committed: the wait is in the database.
	e.waitCommitted(2)
	if got := e.events(present); got != 1 {
		t.Fatalf("later message: lead_events = %d, want 1", got)
	}
	if got := e.count(`SELECT count(*) FROM parked_messages WHERE error_code = 'PROBE_LEAD_NOT_FOUND'`); got != 1 {
		t.Fatalf("parked_messages = %d, want 1", got)
	}
	e.insertLead(missing)
	kafkatest.Eventually(t, 20*time.Second, func() bool { return e.events(missing) == 1 }, "the parked message to apply")
	kafkatest.Eventually(t, 5*time.Second, func() bool { return e.count(`SELECT count(*) FROM parked_messages`) == 0 }, "the parked row to go")
}

func TestRetryLaterSurvivesARestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	missing := uuid.New()
	_, v := envelope(missing, "")
	e.produce(1, v)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(1)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	e.insertLead(missing)
	if got := e.events(missing); got != 0 {
		t.Fatalf("applied before the restart")
	}
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	kafkatest.Eventually(t, 20*time.Second, func() bool { return e.events(missing) == 1 }, "the parked message to apply after the restart")
}

func TestRetryLaterIsDeadLetteredWhenTheScheduleIsSpent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, v := envelope(uuid.New(), "")
	tp := e.cluster.Produce(t, probeTopic, kafkatest.Message{Partition: 2, Key: []byte("k"), Value: v})
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(time.Second, 2*time.Second, 4*time.Second), consumertest.Options{})
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 30*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(dlq))
	}
	m := dlq[0]
	if c, a := kafkatest.Header(m, "x-dlq-error-code"), kafkatest.Header(m, "x-attempts"); c != "PROBE_LEAD_NOT_FOUND" || a != "4" {
		t.Fatalf("code %q attempts %q, want PROBE_LEAD_NOT_FOUND 4 (first attempt + 3 retries)", c, a)
	}
	if got := kafkatest.Header(m, "x-original-offset"); got != strconv.FormatInt(int64(tp[0].Offset), 10) {
		t.Fatalf("x-original-offset = %s", got)
	}
	if !bytes.Equal(m.Value, v) {
		t.Fatal("value changed")
	}
	kafkatest.Eventually(t, 5*time.Second, func() bool { return e.count(`SELECT count(*) FROM parked_messages`) == 0 }, "the parked row to go")
	if got := r.Counter("pin_consumer_retries_total", map[string]string{"class": "retry-later"}); got != 3 {
		t.Fatalf("retry-later retries = %v, want 3", got)
	}
}

func TestDatabaseOutagePausesWithoutDLQAndResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	p, viaProxy := newProxy(t, e.url)
	r := consumertest.Start(t, e.cluster.Bootstrap, viaProxy, probeService(long...),
		consumertest.Options{BatchSize: 1, QueueSize: 1})
	_, v := envelope(leadID, "")
	e.produce(0, v)
	e.waitCommitted(1)

	p.cut()
	const more = 6
	for i := 0; i < more; i++ {
		_, v := envelope(leadID, "")
		e.produce(0, v)
	}
	kafkatest.Eventually(t, 20*time.Second, func() bool {
		return r.Counter("pin_consumer_retries_total", map[string]string{"class": "infrastructure"}) >= 3
	}, "infrastructure retries")
	kafkatest.Eventually(t, 20*time.Second, func() bool {
		return r.Counter("pin_consumer_paused_partitions", nil) >= 1
	}, "the partition to be paused")
	if got := e.committed(); got != 1 {
		t.Fatalf("committed %d during the outage, want 1", got)
	}
	p.restore()
	e.waitCommitted(1 + more)
	if got := e.events(leadID); got != 1+more {
		t.Fatalf("lead_events = %d, want %d", got, 1+more)
	}
	if n := e.cluster.Count(t, probeDLQ); n != 0 {
		t.Fatalf("DLQ holds %d messages, want none", n)
	}
	kafkatest.Eventually(t, 10*time.Second, func() bool {
		return r.Counter("pin_consumer_paused_partitions", nil) == 0
	}, "the partition to be resumed")
}

func TestTwoConsumersRebalanceWithoutLossOrDoubleEffects(t *testing.T) {
	t.Parallel()
	onEachBroker(t, func(t *testing.T, e *env) {
		checkRebalance(t, e, probeService(long...), probeService(long...), 4)
	})
}

// checkRebalance runs a through 300 messages, starts b meanwhile (a
// rebalance, waited for), stops a (another one), feeds 150 more and checks
// every message has one effect and one mark, and that b took part.
func checkRebalance(t *testing.T, e *env, buildA, buildB func(prometheus.Registerer) consumer.Service, batch int) {
	t.Helper()
	checkRebalanceWith(t, e, buildA, buildB, consumertest.Options{BatchSize: batch})
}

// checkRebalanceWith is checkRebalance with both members started with opts.
func checkRebalanceWith(t *testing.T, e *env, buildA, buildB func(prometheus.Registerer) consumer.Service, opts consumertest.Options) {
	t.Helper()
	leadID := e.lead()
	const first, second = 300, 150
	for i := 0; i < first; i++ {
		_, v := envelope(leadID, "")
		e.produce(int32(i%3), v)
	}
	a := e.start(buildA, opts)
	kafkatest.Eventually(t, 30*time.Second, func() bool { return e.events(leadID) > 20 }, "a to start")
	b := e.start(buildB, opts)
	// b's join revokes a's partitions while a runs (on kfake a may be
	// through the 300 by then: the rebalance is what is waited for).
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		return a.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "revoke"}) >= 1
	}, "b's join to revoke a's partitions")
	e.waitCommitted(first)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < second; i++ {
		_, v := envelope(leadID, "")
		e.produce(int32(i%3), v)
	}
	e.waitCommitted(first + second)
	if got := e.events(leadID); got != first+second {
		t.Fatalf("lead_events = %d, want %d: lost or doubled effects", got, first+second)
	}
	if got := e.count(`SELECT count(*) FROM processed_messages`); got != first+second {
		t.Fatalf("processed_messages = %d, want %d", got, first+second)
	}
	if b.Counter("pin_consumer_messages_total", nil) == 0 {
		t.Fatal("b processed nothing: no rebalance happened")
	}
	// kfake's coordinator, like Kafka's, accepts a member's commit while the
	// group prepares a rebalance: no revoke-time commit failed. (The mock
	// cluster refuses it with REBALANCE_IN_PROGRESS.)
	if e.cluster.Kfake() != nil {
		for name, r := range map[string]*consumertest.Running{"a": a, "b": b} {
			if got := r.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "revoke", "result": "failed"}); got != 0 {
				t.Errorf("%s: offset_commits_total{revoke,failed} = %v, want 0", name, got)
			}
		}
	}
}

func TestShutdownDrainsAndCommitsBeforeReturning(t *testing.T) {
	t.Parallel()
	onEachBroker(t, func(t *testing.T, e *env) {
		leadID := e.lead()
		const n = 50
		for i := 0; i < n; i++ {
			_, v := envelope(leadID, "")
			e.produce(int32(i%3), v)
		}
		// Auto-commit far away: only the shutdown commit can store the offsets.
		r := e.start(probeService(long...),
			consumertest.Options{Kafka: kafka.ConfigMap{"auto.commit.interval.ms": 600000}})
		kafkatest.Eventually(t, 30*time.Second, func() bool { return e.events(leadID) == n }, "all messages applied")
		if err := r.Stop(); err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
		if got := e.committed(); got != n {
			t.Fatalf("committed %d after shutdown, want %d", got, n)
		}
		// One commit at shutdown, after the workers stopped: it commits what
		// the eager commits had not yet, or finds nothing new.
		shutdown := map[string]string{"trigger": "shutdown"}
		if got := r.Counter("pin_consumer_offset_commits_total", shutdown); got != 1 {
			t.Fatalf("offset_commits_total{shutdown} = %v, want 1", got)
		}
		if got := r.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "shutdown", "result": "failed"}); got != 0 {
			t.Fatalf("offset_commits_total{shutdown,failed} = %v, want 0", got)
		}
	})
}

// On revoke the runtime commits the offsets stored since the last commit,
// synchronously, before the partitions go to another member (DESIGN.md,
// "Rebalance"). On kfake the eager commits of a's last messages are
// refused until a's revoke starts, so that the revoke's commit is the one
// that carries their offsets: it succeeds, as on Kafka, whose coordinator
// accepts a member's commit while the group prepares a rebalance, and b
// redelivers nothing. The mock cluster refuses commits during a rebalance
// and cannot refuse one commit and not another: there the eager commits
// carry the offsets, and the body checks that the rebalance loses and
// doubles nothing.
func TestARevokeCommitsTheOffsetsProcessedBeforeIt(t *testing.T) {
	t.Parallel()
	onEachBroker(t, func(t *testing.T, e *env) {
		leadID := e.lead()
		const first, second, third = 30, 30, 3
		for i := 0; i < first; i++ {
			_, v := envelope(leadID, "")
			e.produce(int32(i%3), v)
		}
		// revoking: a logged that its partitions are revoked, which it
		// does before it drains them and commits.
		var revoking atomic.Bool
		// Auto-commit far away: the runtime's own commits are the only ones.
		noAuto := kafka.ConfigMap{"auto.commit.interval.ms": 600000}
		a := e.start(probeService(long...), consumertest.Options{Kafka: noAuto, Logger: watchedLogger(`"partitions revoked"`, &revoking)})
		e.waitCommitted(first)

		eager := map[string]string{"trigger": "stored", "result": "committed"}
		eagerBefore := a.Counter("pin_consumer_offset_commits_total", eager)
		fc := e.cluster.Kfake()
		var refused *refusedCommits
		if fc != nil {
			refused = refuseCommits(fc, func() bool { return !revoking.Load() })
		}
		for i := 0; i < second; i++ {
			_, v := envelope(leadID, "")
			e.produce(int32(i%3), v)
		}
		kafkatest.Eventually(t, 30*time.Second, func() bool { return e.events(leadID) == first+second }, "a to apply the second batch")
		if refused != nil {
			// Every eager commit of the second batch was refused and
			// returned: a stored its offsets, nothing committed them. The
			// committer may hold one more request, asked for while a commit
			// was in flight, which fires as soon as that one returns: the
			// count must stay settled for a second before b joins, or that
			// request would reach the broker after the refusals end.
			var settledSince time.Time
			last := -1
			kafkatest.Eventually(t, 30*time.Second, func() bool {
				hits := refused.handle.Hits()
				if refused.carried() != first+second || hits !=
					int(a.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "stored", "result": "failed"})) {
					last = -1
					return false
				}
				if hits != last {
					last, settledSince = hits, time.Now()
				}
				return time.Since(settledSince) >= time.Second
			}, "a's eager commits of the second batch to be refused")
			if got := e.committed(); got != first {
				t.Fatalf("committed %d while the eager commits were refused, want %d", got, first)
			}
		} else {
			e.waitCommitted(first + second)
		}

		b := e.start(probeService(long...), consumertest.Options{Kafka: noAuto})
		kafkatest.Eventually(t, 30*time.Second, func() bool {
			return a.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "revoke"}) >= 1
		}, "b's join to revoke a's partitions")
		if fc != nil {
			if got := a.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "revoke", "result": "committed"}); got < 1 {
				t.Fatalf("offset_commits_total{revoke,committed} = %v, want at least 1 (failed: %v)", got,
					a.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "revoke", "result": "failed"}))
			}
			// The revoke's commit carried what a processed, and nothing
			// else committed it.
			if got := e.committed(); got != first+second {
				t.Fatalf("committed %d after a's revoke, want %d (every processed message)", got, first+second)
			}
			if got := a.Counter("pin_consumer_offset_commits_total", eager); got != eagerBefore {
				t.Fatalf("offset_commits_total{stored,committed} went from %v to %v: an eager commit got through", eagerBefore, got)
			}
		}
		// A few more messages: once they are committed, whatever the new
		// assignment redelivered from before them was processed too.
		for i := 0; i < third; i++ {
			_, v := envelope(leadID, "")
			e.produce(int32(i%3), v)
		}
		const total = first + second + third
		e.waitCommitted(total)
		if got := e.events(leadID); got != total {
			t.Fatalf("lead_events = %d, want %d", got, total)
		}
		if got := e.count(`SELECT count(*) FROM processed_messages`); got != total {
			t.Fatalf("processed_messages = %d, want %d", got, total)
		}
		// On kfake nothing was redelivered. (On the mock cluster the
		// rebalance may go on for rounds, in which the third batch's
		// commits can be refused and its messages redelivered.)
		dup := map[string]string{"outcome": "skipped-duplicate"}
		if got := a.Counter("pin_consumer_messages_total", dup) + b.Counter("pin_consumer_messages_total", dup); fc != nil && got != 0 {
			t.Fatalf("skipped-duplicate = %v, want 0: the rebalance redelivered processed messages", got)
		}
		if n := e.cluster.Count(t, probeDLQ); n != 0 {
			t.Fatalf("DLQ holds %d messages, want none", n)
		}
	})
}

// A commit that finds nothing stored since the last one is no failure: a
// member that joined and got no message stops with one shutdown commit
// counted as "nothing".
func TestAShutdownWithNothingStoredCountsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs consumertest.LogBuffer
	logger := zerolog.New(&logs)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{Logger: &logger})
	kafkatest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(logs.String(), `"partitions assigned"`) }, "the partitions assigned")
	if err := r.Stop(); err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	for result, want := range map[string]float64{"nothing": 1, "committed": 0, "failed": 0} {
		if got := r.Counter("pin_consumer_offset_commits_total", map[string]string{"trigger": "shutdown", "result": result}); got != want {
			t.Errorf("offset_commits_total{shutdown,%s} = %v, want %v", result, got, want)
		}
	}
	if strings.Contains(logs.String(), "offset commit failed") {
		t.Errorf("a commit with nothing to commit was logged as failed:\n%s", logs.String())
	}
}

func TestUnknownEventTypeIsSkippedAndContractMismatchProceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	unknown := []byte(`{"MessageId":"` + uuid.NewString() + `","EventType":"test.other","ContractVersion":1,"Payload":{}}`)
	mismatch := []byte(`{"MessageId":"` + uuid.NewString() + `","EventType":"test.probe","ContractVersion":2,"Payload":{"LeadId":"` + leadID.String() + `"}}`)
	e.produce(0, unknown)
	e.produce(0, mismatch)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(2)
	if got := e.events(leadID); got != 1 {
		t.Fatalf("lead_events = %d, want 1 (mismatch proceeds)", got)
	}
	if got := r.Counter("pin_consumer_unknown_event_types_total", map[string]string{"event_type": consumer.UnknownEventType}); got != 1 {
		t.Fatalf("unknown_event_types_total{event_type=unknown} = %v, want 1 (never the producer's text)", got)
	}
	if got := r.Counter("pin_consumer_contract_mismatch_total", nil); got != 1 {
		t.Fatalf("contract_mismatch_total = %v", got)
	}
	if n := e.cluster.Count(t, probeDLQ); n != 0 {
		t.Fatalf("DLQ holds %d", n)
	}
}

// An EventType that is present but not a JSON string is an EventType no
// route takes (docs/contract.md §4.3), not an unreadable envelope: skipped
// as a string one no route takes is — the same warning (its JSON text as
// the EventType, cut as any producer's text), counted under "unknown",
// acknowledged, no mark, never the DLQ.
func TestAnEventTypeThatIsNotAStringIsSkippedAsUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	huge := `["` + strings.Repeat("x", 300) + `"]`                        // logged cut
	eventTypes := []string{`"test.other"`, `42`, `{"a":1}`, `true`, huge} // the first a string no route takes
	ids := map[string]string{}                                            // MessageId → EventType as it came
	for _, et := range eventTypes {
		id := uuid.NewString()
		ids[id] = et
		e.produce(0, []byte(`{"MessageId":"`+id+`","EventType":`+et+`,"ContractVersion":1,"Payload":{"LeadId":"`+leadID.String()+`"}}`))
	}
	_, ok := envelope(leadID, "")
	e.produce(0, ok) // after them: the partition goes on
	var logs consumertest.LogBuffer
	logger := zerolog.New(&logs)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{Logger: &logger})
	e.waitCommitted(int64(len(eventTypes) + 1))
	n := float64(len(eventTypes))
	if got := r.Counter("pin_consumer_unknown_event_types_total", map[string]string{"event_type": consumer.UnknownEventType}); got != n {
		t.Errorf("unknown_event_types_total{event_type=unknown} = %v, want %v", got, n)
	}
	if got := r.Counter("pin_consumer_messages_total", map[string]string{"event_type": consumer.UnknownEventType, "outcome": string(consumer.SkippedUnknownEventType)}); got != n {
		t.Errorf("messages_total{unknown,skipped-unknown-event-type} = %v, want %v", got, n)
	}
	if got := r.Counter("pin_consumer_dlq_total", nil); got != 0 {
		t.Errorf("dlq_total = %v, want 0", got)
	}
	if got := e.cluster.Count(t, probeDLQ); got != 0 {
		t.Errorf("DLQ holds %d, want none", got)
	}
	if got := e.count(`SELECT count(*) FROM processed_messages`); got != 1 {
		t.Errorf("processed_messages = %d, want 1 (the probe event's; a skipped message leaves no mark)", got)
	}
	if got := e.events(leadID); got != 1 {
		t.Errorf("lead_events = %d, want 1", got)
	}
	lines := logs.Lines(func(l map[string]any) bool {
		_, ok := ids[fmt.Sprint(l["MessageId"])]
		return ok && l["message"] != "consumed"
	})
	if len(lines) != len(eventTypes) {
		t.Fatalf("%d log lines of the skipped messages, want one each: %v", len(lines), lines)
	}
	for _, l := range lines {
		et := ids[l["MessageId"].(string)]
		want := consumer.Cut(et)
		reason := "EventType is not a JSON string"
		if et[0] == '"' { // a string: its text
			want, reason = strings.Trim(et, `"`), ""
		}
		if got, _ := l["reason"].(string); got != reason {
			t.Errorf("EventType %.40s: reason %q, want %q", et, got, reason)
		}
		if l["level"] != "warn" || l["message"] != string(consumer.SkippedUnknownEventType) ||
			l["outcome"] != string(consumer.SkippedUnknownEventType) || l["EventType"] != want || l["code"] != nil {
			t.Errorf("EventType %.40s: line %v; want a warning %s with EventType %q and no code", et, l, consumer.SkippedUnknownEventType, want)
		}
	}
}

func TestTraceparentIsContinued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	lead := e.lead()
	_, first := envelope(lead, "")
	id, v := envelope(lead, "")
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	e.produce(1, first) // the traced message is the partition's second: offset 1
	e.cluster.Produce(t, probeTopic, kafkatest.Message{Partition: 1, Key: []byte("k"), Value: v,
		Headers: map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{TracerProvider: tp})
	e.waitCommitted(2)
	var span sdktrace.ReadOnlySpan
	kafkatest.Eventually(t, 5*time.Second, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "process "+probeTopic && s.SpanContext().TraceID().String() == traceID &&
				s.Parent().SpanID().String() == parentID {
				span = s
				return true
			}
		}
		return false
	}, "a consumer span continuing the trace")
	if k := span.SpanKind(); k != trace.SpanKindConsumer {
		t.Errorf("span kind %v, want consumer", k)
	}
	attrs := map[string]string{}
	for _, a := range span.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, want := range map[string]string{
		"messaging.system": "kafka", "messaging.destination.name": probeTopic, "messaging.consumer.group.name": probeGroup,
		"messaging.destination.partition.id": "1", "messaging.kafka.offset": "1",
		"messaging.message.id": id.String(), "pin.event_type": probeType, "pin.outcome": "applied",
	} {
		if attrs[k] != want {
			t.Errorf("span attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	// Nested: consume → handle → db.transaction (linked to the batch's
	// db.batch when it ran in a batch with the partition's first).
	if _, err := consumertest.FindTrace(rec.Ended(), probeTopic, traceID, parentID); err != nil {
		t.Fatal(err)
	}
}

func TestHealthReadinessAndMetricsEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{HTTP: true})
	get := func(path string) (int, string) {
		addr := r.Runtime.HTTPAddr()
		if addr == "" {
			return 0, ""
		}
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	kafkatest.Eventually(t, 20*time.Second, func() bool { c, _ := get("/healthz"); return c == 200 }, "/healthz")
	kafkatest.Eventually(t, 30*time.Second, func() bool { c, _ := get("/readyz"); return c == 200 }, "/readyz 200 once joined")
	_, v := envelope(e.lead(), "")
	e.produce(0, v)
	e.waitCommitted(1)
	_, body := get("/metrics")
	for _, family := range []string{"pin_consumer_messages_total", "pin_consumer_message_duration_seconds", "pin_consumer_paused_partitions", "pin_consumer_in_flight_messages"} {
		if !strings.Contains(body, family) {
			t.Errorf("/metrics lacks %s", family)
		}
	}
	if err := r.Runtime.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if c, _ := get("/debug/pprof/"); c != http.StatusNotFound {
		t.Errorf("/debug/pprof/ answered %d without CONSUMER_PPROF, want 404", c)
	}
}

func TestMainExitsTwoOnBadConfigurationBeforeTouchingKafka(t *testing.T) {
	cases := map[string][]string{
		"brokers missing":        {"DATABASE_URL=postgres://x/y"},
		"database missing":       {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1"},
		"scale zero":             {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "RETRY_TIME_SCALE=0"},
		"scale not a number":     {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "RETRY_TIME_SCALE=fast"},
		"log level":              {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "LOG_LEVEL=loud"},
		"duration":               {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "CONSUMER_DRAIN_TIMEOUT=soon"},
		"unknown kafka property": {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "KAFKA_NO_SUCH_PROPERTY=1"},
		"kafka property value":   {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "KAFKA_SESSION_TIMEOUT_MS=soon"},
		"kafka property range":   {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "KAFKA_SESSION_TIMEOUT_MS=0"},
		// A consumer's settings against each other: librdkafka checks them
		// only as it creates a consumer, after the broker check's 30 s.
		"kafka consumer settings": {"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "DATABASE_URL=postgres://x/y", "KAFKA_MAX_POLL_INTERVAL_MS=1000"},
	}
	// A librdkafka property it refuses is named by its variable.
	named := map[string]string{"unknown kafka property": "KAFKA_NO_SUCH_PROPERTY", "kafka property value": "KAFKA_SESSION_TIMEOUT_MS", "kafka property range": "KAFKA_SESSION_TIMEOUT_MS"}
	for name, environ := range cases {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := consumer.Main(ctx, environ, &stderr, "127.0.0.1:0", probeService(long...))
			if code != consumer.ExitConfig {
				t.Fatalf("exit %d, want 2; stderr: %s", code, stderr.String())
			}
			if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); lines != 0 || !strings.Contains(stderr.String(), "configuration") {
				t.Fatalf("want one line naming the variable, got %q", stderr.String())
			}
			if v := named[name]; v != "" && !strings.Contains(stderr.String(), "configuration: "+v+": ") {
				t.Fatalf("want a line naming %s, got %q", v, stderr.String())
			}
		})
	}
}

func TestReDriverLosingARaceToARedeliveryHasNoEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	id, v := envelope(leadID, "")
	// M is parked and due; a redelivery of M holds its mark, uncommitted.
	if _, err := e.db.Exec(`INSERT INTO parked_messages (consumer_group, topic, "partition", "offset", value, message_id, event_type, error_code, reason, attempts, next_attempt_at)
		VALUES ($1, $2, 0, 0, $3, $4, $5, 'PROBE_LEAD_NOT_FOUND', 'waiting', 1, now())`, probeGroup, probeTopic, v, id, probeType); err != nil {
		t.Fatal(err)
	}
	racer := e.holdMark(id, 0, 0)
	applyProbe(t, racer, leadID) // the probe handler's effect
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	// The re-driver blocks on the mark; let it, then commit the racer.
	e.awaitLockWait("the re-driver to wait on the racer's mark")
	if err := racer.Commit(); err != nil {
		t.Fatal(err)
	}
	kafkatest.Eventually(t, 20*time.Second, func() bool { return e.count(`SELECT count(*) FROM parked_messages`) == 0 }, "the parked row to go")
	if got := e.events(leadID); got != 1 {
		t.Fatalf("lead_events = %d, want 1: the re-driver must not apply a message another processor applied", got)
	}
}

// A parked message whose redelivered copy was applied meanwhile (a restart
// before the offset commit) fails on the state that copy left — here its
// lead is gone — but its mark is there: the row is done as a duplicate,
// never re-parked until its schedule ends in the DLQ.
func TestAParkedMessageAppliedMeanwhileIsADuplicateNotADeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, v := envelope(uuid.New(), "") // a lead that does not exist: PROBE_LEAD_NOT_FOUND
	if _, err := e.db.Exec(`INSERT INTO parked_messages (consumer_group, topic, "partition", "offset", value, message_id, event_type, error_code, reason, attempts, next_attempt_at)
		VALUES ($1, $2, 0, 0, $3, $4, $5, 'PROBE_LEAD_NOT_FOUND', 'waiting', 1, now())`, probeGroup, probeTopic, v, id, probeType); err != nil {
		t.Fatal(err)
	}
	if err := e.holdMark(id, 0, 0).Commit(); err != nil { // the redelivered copy's mark
		t.Fatal(err)
	}
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(10*time.Millisecond), consumertest.Options{})
	kafkatest.Eventually(t, 20*time.Second, func() bool { return e.count(`SELECT count(*) FROM parked_messages`) == 0 }, "the parked row to go")
	if got := e.cluster.Count(t, probeDLQ); got != 0 {
		t.Fatalf("DLQ holds %d, want 0: the message was applied", got)
	}
	if got := r.Counter("pin_consumer_messages_total", map[string]string{"outcome": string(consumer.SkippedDuplicate)}); got != 1 {
		t.Fatalf("messages{skipped-duplicate} = %v, want 1", got)
	}
}

// A parked message whose EventType no route of this release takes: a
// release that routes it parked it (a new pod during a rolling update, or
// one since rolled back), and only such a release can finish it. This one
// puts the row back for later, untouched otherwise: never deleted (its
// offset was committed when it was parked), never a dead letter (it is
// valid), no mark; a warning says so.
func TestAParkedMessageOfAnEventTypeThisReleaseDoesNotRouteIsLeftForOneThatDoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := uuid.New()
	v := []byte(`{"MessageId":"` + id.String() + `","EventType":"test.dropped","ContractVersion":1,"Payload":{"LeadId":"` + uuid.NewString() + `"}}`)
	if _, err := e.db.Exec(`INSERT INTO parked_messages (consumer_group, topic, "partition", "offset", value, message_id, event_type, error_code, reason, attempts, schedule_step, next_attempt_at)
		VALUES ($1, $2, 0, 0, $3, $4, 'test.dropped', 'PROBE_LEAD_NOT_FOUND', 'waiting', 3, 2, now())`, probeGroup, probeTopic, v, id); err != nil {
		t.Fatal(err)
	}
	var warned atomic.Bool
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(10*time.Millisecond),
		consumertest.Options{Logger: watchedLogger("left for a release that does", &warned)})
	kafkatest.Eventually(t, 20*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM parked_messages WHERE next_attempt_at > now()`) == 1
	}, "the parked row to be put back for later")
	if !warned.Load() {
		t.Error("no warning for the row put back")
	}
	if n := e.count(`SELECT count(*) FROM parked_messages WHERE attempts = 3 AND schedule_step = 2 AND error_code = 'PROBE_LEAD_NOT_FOUND'`); n != 1 {
		t.Errorf("the row's attempts, schedule or code changed (%d rows as parked)", n)
	}
	if n := e.count(`SELECT count(*) FROM processed_messages`); n != 0 {
		t.Errorf("%d marks, want none", n)
	}
	time.Sleep(time.Second) // a dead letter would be on its way by now
	if got := e.cluster.Count(t, probeDLQ); got != 0 {
		t.Fatalf("DLQ holds %d, want 0: the message is valid", got)
	}
}

func TestAParkedRowThatKeepsFailingDoesNotHoldUpTheOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	badID, bad := envelope(leadID, "bug")
	goodID, good := envelope(leadID, "")
	for i, row := range []struct {
		id  uuid.UUID
		v   []byte
		due string
	}{{badID, bad, "now() - interval '1 minute'"}, {goodID, good, "now()"}} {
		if _, err := e.db.Exec(`INSERT INTO parked_messages (consumer_group, topic, "partition", "offset", value, message_id, event_type, error_code, reason, attempts, next_attempt_at)
			VALUES ($1, $2, 0, $3, $4, $5, $6, 'PROBE_LEAD_NOT_FOUND', 'waiting', 1, `+row.due+`)`, probeGroup, probeTopic, i, row.v, row.id, probeType); err != nil {
			t.Fatal(err)
		}
	}
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	kafkatest.Eventually(t, 20*time.Second, func() bool { return e.events(leadID) == 1 }, "the healthy row behind the failing one to apply")
	var attempts int
	if err := e.db.QueryRow(`SELECT attempts FROM parked_messages WHERE message_id = $1`, badID).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts < 2 {
		t.Fatalf("the failing row has %d attempts: it was not re-driven", attempts)
	}
}

func TestAnUnexpectedErrorIsDeadLetteredWhenTheMessageBehindItSucceedsAsAProbe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	_, bug := envelope(leadID, "bug")
	_, ok := envelope(leadID, "")
	e.produce(0, bug)
	e.produce(0, ok)
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(2)
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(dlq))
	}
	// Five failures; the message behind it succeeds as a probe; the sixth
	// attempt fails again, after that success: the failure is its own.
	if c, a := kafkatest.Header(dlq[0], "x-dlq-error-code"), kafkatest.Header(dlq[0], "x-attempts"); c != "EVENT_PROCESSING_FAILED" || a != "6" {
		t.Fatalf("code %q attempts %q, want EVENT_PROCESSING_FAILED 6", c, a)
	}
	if got := e.events(leadID); got != 1 {
		t.Fatalf("lead_events = %d, want 1 (the partition went on)", got)
	}
}

func TestADeadLetterTooLargeForTheDLQIsPublishedWithoutItsValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	huge := append([]byte(`{"MessageId":"`+uuid.NewString()+`","EventType":"test.probe","Payload":{"LeadId":"x","Pad":"`), bytes.Repeat([]byte("a"), 1500*1024)...)
	huge = append(huge, []byte(`"}}`)...)
	e.produce(1, huge)
	_, ok := envelope(leadID, "")
	e.produce(1, ok)
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(2)
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(dlq))
	}
	m := dlq[0]
	if len(m.Value) != 0 || kafkatest.Header(m, consumer.HeaderValueOmitted) != strconv.Itoa(len(huge)) ||
		kafkatest.Header(m, "x-dlq-error-code") != "PROBE_INVALID" {
		t.Fatalf("value %d bytes, omitted %q, code %q", len(m.Value), kafkatest.Header(m, consumer.HeaderValueOmitted), kafkatest.Header(m, "x-dlq-error-code"))
	}
	if got := e.events(leadID); got != 1 {
		t.Fatalf("lead_events = %d, want 1 (the partition went on)", got)
	}
}

func TestAHandlerReportedDuplicateIsMarked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, v := envelope(e.lead(), "second-layer")
	e.produce(2, v) // alone: the one-message path
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	e.waitCommitted(1)
	if n := e.count(`SELECT count(*) FROM processed_messages WHERE idempotency_key = $1 AND outcome = 'skipped-duplicate'`, "probe:"+id.String()); n != 1 {
		t.Fatalf("marks with outcome skipped-duplicate = %d, want 1", n)
	}
}

// mainProcess is consumer.Main of the probe service running in the test,
// as a process runs it.
type mainProcess struct {
	stderr consumertest.LogBuffer
	cancel context.CancelFunc
	exit   chan int
}

// startMain runs consumer.Main with environ until stop, and, when until is
// not empty, waits (30 s at most) for a log line holding it.
func startMain(t *testing.T, environ []string, until string) *mainProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &mainProcess{cancel: cancel, exit: make(chan int, 1)}
	t.Cleanup(cancel)
	go func() { m.exit <- consumer.Main(ctx, environ, &m.stderr, "127.0.0.1:0", probeService(long...)) }()
	deadline := time.Now().Add(30 * time.Second)
	for until != "" && !strings.Contains(m.stderr.String(), until) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no %s in 30 s; stderr:\n%s", until, m.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

// stop ends the process as SIGTERM does and returns its exit code.
func (m *mainProcess) stop() int {
	m.cancel()
	return <-m.exit
}

// The HTTP endpoints come first: while the broker is still being checked
// (here: nothing listens at its address), /healthz answers and /readyz
// says the member is not in its group; a taken HTTP_ADDR fails the start
// at once with exit 2, not after the broker's 30 s.
func TestHTTPServesBeforeTheBrokerIsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noBroker, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{"KAFKA_BOOTSTRAP_SERVERS=" + noBroker, "DATABASE_URL=" + e.url, "HTTP_ADDR=" + addr}
	m := startMain(t, environ, "")
	get := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(10 * time.Second)
	for get("/healthz") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz did not answer in 10 s while the broker was checked; stderr:\n%s", m.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d before the member joined, want 503", code)
	}
	m.stop()

	// The address taken: exit 2 at once, naming HTTP_ADDR.
	held, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// Behind the broker's check it would end with exit 1 and the broker's
	// error, 30 s later.
	var taken consumertest.LogBuffer
	code := consumer.Main(context.Background(), environ, &taken, "127.0.0.1:0", probeService(long...))
	if code != consumer.ExitConfig || !strings.Contains(taken.String(), "HTTP_ADDR") {
		t.Fatalf("HTTP_ADDR taken: exit %d, want %d naming HTTP_ADDR; stderr:\n%s", code, consumer.ExitConfig, taken.String())
	}
}

// The lanes follow the database's distance when neither knob is set: a
// PostgreSQL 2 ms away (a delaying proxy) gets three transactions of up to
// 512 messages a partition (the log line reports the scheduler's lanes);
// a knob set keeps its value whatever the distance. Far, every lane opens
// for any run, not for a backlog only (lane_backlog 0). (Loopback's two
// of 256 and its backlog: TestLanesFollowTheDatabasesDistance,
// TestTheBacklogThatOpensALaneFollowsTheDistance; a loopback ping on a
// loaded machine is no fixed distance to test a process against.)
func TestTheLanesFollowTheDatabasesDistance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := bench.LatencyProxy(u.Host, 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	far := *u
	far.Host = addr
	for _, tc := range []struct {
		name, url string
		extra     []string
		want      string
	}{
		{"far", far.String(), nil, `"transactions":3,"batch_size":512,"queue_size":512,"far":true,"lane_backlog":0`},
		{"far, chosen", far.String(), []string{"CONSUMER_TRANSACTIONS=2"}, `"transactions":2,"batch_size":256,"queue_size":512,"far":true,"lane_backlog":0`},
	} {
		environ := append([]string{"KAFKA_BOOTSTRAP_SERVERS=" + e.cluster.Bootstrap, "DATABASE_URL=" + tc.url, "HTTP_ADDR=127.0.0.1:0"}, tc.extra...)
		m := startMain(t, environ, `"consumer started"`) // after the measure
		if code := m.stop(); code != consumer.ExitOK {
			t.Fatalf("%s: exit %d; stderr:\n%s", tc.name, code, m.stderr.String())
		}
		if stderr := m.stderr.String(); !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: want %s in the distance's line; stderr:\n%s", tc.name, tc.want, stderr)
		}
	}
}

// Every log line of a consumer process is one JSON object naming its
// service once (a key written twice is legal JSON that many log pipelines
// reject or keep the wrong one of).
func TestMainLogsEachFieldOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	environ := []string{"KAFKA_BOOTSTRAP_SERVERS=" + e.cluster.Bootstrap, "DATABASE_URL=" + e.url, "HTTP_ADDR=127.0.0.1:0"}
	m := startMain(t, environ, `"partitions assigned"`)
	if code := m.stop(); code != consumer.ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, m.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(m.stderr.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("want at least started, assigned, stopped; got %q", lines)
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		dec := json.NewDecoder(strings.NewReader(l))
		seen := map[string]bool{}
		if _, err := dec.Token(); err != nil { // {
			t.Fatal(err)
		}
		for dec.More() {
			k, _ := dec.Token()
			key := k.(string)
			if seen[key] {
				t.Fatalf("key %q twice in %s", key, l)
			}
			seen[key] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatal(err)
			}
		}
		if m["service"] != "probe" {
			t.Fatalf("service %v in %s", m["service"], l)
		}
	}
}

// A message's duration counts its wait in its partition's queue: a
// message that arrives while the one before it is being handled for 3 s
// waits most of that before its own transaction starts.
func TestMessageDurationCountsTheWaitInTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	slow, v := envelope(leadID, "slow")
	e.produce(0, v)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	kafkatest.Eventually(t, 20*time.Second, func() bool { _, ok := slowStarted.Load(slow); return ok }, "the slow handler to start")
	_, quick := envelope(leadID, "")
	e.produce(0, quick) // queued behind the slow one
	e.waitCommitted(2)

	mfs, err := r.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, mf := range mfs {
		if mf.GetName() == "pin_consumer_message_duration_seconds" {
			h = mf.GetMetric()[0].GetHistogram()
		}
	}
	if h == nil || h.GetSampleCount() != 2 {
		t.Fatalf("message_duration_seconds: %v, want 2 samples", h)
	}
	found := false
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 1 {
			found = true
			if b.GetCumulativeCount() != 0 {
				t.Fatalf("%d of 2 messages took at most 1 s; want both over it (the second waited most of %s for the first)", b.GetCumulativeCount(), slowFor)
			}
		}
	}
	if !found {
		t.Fatal("message_duration_seconds has no 1 s bucket")
	}
}

// Where the time goes (pin_consumer_wait_seconds,
// pin_consumer_transaction_stage_seconds): a message queued behind a
// transaction whose handler takes 3 s waits that long at its partition,
// not for a lane; the slow transaction's 3 s are in its decide stage; and
// every committed transaction counts each of its stages once.
func TestStageMetricsTellWhereTheTimeGoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	leadID := e.lead()
	slow, v := envelope(leadID, "slow")
	e.produce(0, v)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...), consumertest.Options{})
	kafkatest.Eventually(t, 20*time.Second, func() bool { _, ok := slowStarted.Load(slow); return ok }, "the slow handler to start")
	_, quick := envelope(leadID, "")
	e.produce(0, quick) // queued behind the slow one
	e.waitCommitted(2)

	mfs, err := r.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]map[string]*dto.Histogram{}
	var transactions uint64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "pin_consumer_wait_seconds", "pin_consumer_transaction_stage_seconds":
			stages[mf.GetName()] = map[string]*dto.Histogram{}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "stage" {
						stages[mf.GetName()][l.GetValue()] = m.GetHistogram()
					}
				}
			}
		case "pin_consumer_batch_size":
			transactions = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	// over is how many of h's samples exceeded 1 s.
	over := func(h *dto.Histogram) uint64 {
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 1 {
				return h.GetSampleCount() - b.GetCumulativeCount()
			}
		}
		t.Fatal("no 1 s bucket")
		return 0
	}
	waits := stages["pin_consumer_wait_seconds"]
	for _, stage := range []string{"partition", "lane"} {
		if h := waits[stage]; h == nil || h.GetSampleCount() != 2 {
			t.Fatalf("wait_seconds{stage=%q}: %v, want 2 samples (one per message)", stage, h)
		}
	}
	if n := over(waits["partition"]); n != 1 {
		t.Fatalf("%d of 2 messages waited over 1 s at their partition; want 1 (the second, behind the first's %s)", n, slowFor)
	}
	if n := over(waits["lane"]); n != 0 {
		t.Fatalf("%d messages waited over 1 s for a lane; want 0 (the lanes were free)", n)
	}
	if transactions < 2 {
		t.Fatalf("batch_size counted %d transactions, want at least 2", transactions)
	}
	tx := stages["pin_consumer_transaction_stage_seconds"]
	for _, stage := range []string{"begin", "read", "decide", "marks", "write", "commit"} {
		if h := tx[stage]; h == nil || h.GetSampleCount() != transactions {
			t.Fatalf("transaction_stage_seconds{stage=%q}: %v, want %d samples (one per committed transaction)", stage, h, transactions)
		}
	}
	for stage, h := range tx {
		want := uint64(0)
		if stage == "decide" {
			want = 1 // the slow handler's
		}
		if n := over(h); n != want {
			t.Fatalf("transaction_stage_seconds{stage=%q}: %d transactions over 1 s, want %d", stage, n, want)
		}
	}
}

// A parked row of another message at the coordinates of this one (the
// topic was deleted and recreated, or a replay put another message at an
// offset a row still holds) is not this message: this one, which cannot
// be parked beside it, waits in line (unacknowledged), applies when its
// lead comes, and the stale row stays for its own re-drive — neither
// message is lost, and the schema stays as older binaries know it.
func TestAParkedRowOfAnotherMessageAtTheSameOffsetIsNotThisOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	staleID, staleValue := envelope(uuid.New(), "")
	if _, err := e.db.Exec(`INSERT INTO parked_messages (consumer_group, topic, "partition", "offset", value, message_id, event_type, error_code, reason, attempts, next_attempt_at)
		VALUES ($1, $2, 0, 0, $3, $4, $5, 'PROBE_LEAD_NOT_FOUND', 'waiting', 1, now() + interval '1 hour')`, probeGroup, probeTopic, staleValue, staleID, probeType); err != nil {
		t.Fatal(err)
	}
	missing := uuid.New()
	id, v := envelope(missing, "")
	if tp := e.cluster.Produce(t, probeTopic, kafkatest.Message{Partition: 0, Key: []byte("k"), Value: v}); tp[0].Offset != 0 {
		t.Fatalf("produced at offset %d, want 0 (the stale row's)", tp[0].Offset)
	}
	var inLine atomic.Bool
	consumertest.Start(t, e.cluster.Bootstrap, e.url, probeService(long...),
		consumertest.Options{Logger: watchedLogger(`"message":"cannot park: waiting in line instead"`, &inLine)})
	kafkatest.Eventually(t, 30*time.Second, inLine.Load, "the message to wait in line")
	// Not taken for the stale row: not acknowledged, not lost.
	if c := e.committed(); c != 0 {
		t.Fatalf("committed %d while the message waits in line, want 0", c)
	}
	e.insertLead(missing)
	kafkatest.Eventually(t, 20*time.Second, func() bool { return e.events(missing) == 1 }, "the message to apply once its lead exists")
	e.waitCommitted(1)
	if n := e.count(`SELECT count(*) FROM parked_messages WHERE message_id = '` + staleID.String() + `'`); n != 1 {
		t.Fatalf("the stale row: %d, want 1 (kept for its own re-drive)", n)
	}
	if n := e.count(`SELECT count(*) FROM parked_messages WHERE message_id = '` + id.String() + `'`); n != 0 {
		t.Fatalf("the message's parked rows: %d, want 0 (it waited in line)", n)
	}
}
