package consumer_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// queueBehindAHold starts the preparing probe with one shared transaction
// at a time, holds that transaction (a "hold" message on partition 0), and
// produces messages with the given modes on partitions 1 and 2 behind it.
// It returns once a run of each partition waits for the lane (how many of
// its messages the first run took depends on the fetches), and the hold,
// to be released by the test.
func queueBehindAHold(t *testing.T, e *env, leadID uuid.UUID, p1, p2 []string) (*consumertest.Running, hold) {
	t.Helper()
	id, v := envelope(leadID, "hold")
	h := holdMessage(t, id)
	e.produce(0, v)
	r := consumertest.Start(t, e.cluster.Bootstrap, e.url, (&preparing{}).service, consumertest.Options{Transactions: 1})
	h.awaitStarted(t)
	for p, modes := range map[int32][]string{1: p1, 2: p2} {
		for _, mode := range modes {
			_, v := envelope(leadID, mode)
			e.produce(p, v)
		}
	}
	kafkatest.Eventually(t, 30*time.Second, func() bool { return r.Runtime.SharedWaiting() == 2 },
		"a run of partitions 1 and 2 waiting behind the held transaction (%d waiting)", r.Runtime.SharedWaiting())
	return r, h
}

// transactionsOf returns, per partition, the transactions (xmin) that
// inserted its probe marks.
func (e *env) transactionsOf() map[int32]map[string]bool {
	e.t.Helper()
	rows, err := e.db.Query(`SELECT "partition", xmin::text FROM processed_messages WHERE consumer_group = $1`, probeGroup)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	txs := map[int32]map[string]bool{}
	for rows.Next() {
		var p int32
		var x string
		if err := rows.Scan(&p, &x); err != nil {
			e.t.Fatal(err)
		}
		if txs[p] == nil {
			txs[p] = map[string]bool{}
		}
		txs[p][x] = true
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return txs
}

// Runs of partitions that become ready while the one shared transaction
// runs wait for it, then are committed together, in one transaction.
// (Without sharing, each partition's batch has a transaction of its own.)
func TestRunsReadyMeanwhileShareTheNextTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.lead()
	r, h := queueBehindAHold(t, e, l, []string{"", "", ""}, []string{"", ""})
	h.Release()
	e.waitCommitted(6)

	if n := e.events(l); n != 6 {
		t.Fatalf("lead_events = %d, want 6 (each message once)", n)
	}
	// The first runs of partitions 1 and 2 (their later messages, if
	// fetched after them, go into later transactions) share one.
	txs := e.transactionsOf()
	shared := 0
	for x := range txs[1] {
		if txs[2][x] {
			shared++
		}
		if txs[0][x] {
			t.Fatalf("the held transaction %v also carried runs that arrived after it started", x)
		}
	}
	if shared != 1 {
		t.Fatalf("partitions 1 and 2 committed in transactions %v and %v: want one shared by both", txs[1], txs[2])
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.Applied: 6})
	if got := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "shared-failed"}); got != 0 {
		t.Fatalf("batch_reruns{shared-failed} = %v, want 0", got)
	}
}

// A handler's failure in a shared transaction rolls the whole transaction
// back. The failing message's run goes on as in a batch of its own: the
// messages before it commit, the failure counts as its first attempt
// (retry-now: three more runs, then the DLQ with x-attempts 4), the rest
// commit. The other partition's run commits on its own. Nothing is lost or
// applied twice.
func TestAFailureInASharedTransactionIsItsMessagesFirstAttemptAlone(t *testing.T) {
	// Not parallel: it counts the handler's runs of "conflict" messages.
	e := newEnv(t)
	l := e.lead()
	before := conflictRuns.Load()
	r, h := queueBehindAHold(t, e, l, []string{"", "", ""}, []string{"conflict", "", ""})
	h.Release()
	e.waitCommitted(7)

	e.oneDeadLetter(probeConflict, 4)
	if runs := conflictRuns.Load() - before; runs != 4 {
		t.Fatalf("the failing handler ran %d times, want 4 (the shared attempt counts as the first)", runs)
	}
	if n := e.events(l); n != 6 {
		t.Fatalf("lead_events = %d, want 6 (every other message once)", n)
	}
	if got := r.Counter("pin_consumer_batch_reruns_total", map[string]string{"reason": "shared-failed"}); got != 1 {
		t.Fatalf("batch_reruns{shared-failed} = %v, want 1", got)
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.Applied: 6, consumer.DeadLettered: 1})
}

// A value its column cannot hold that only the Write finds (a data
// exception, class 22, from a statement that names no message) is the
// data's all the same: the shared transaction's messages go one at a
// time, the one that holds it is dead-lettered with the service's invalid
// code at its first attempt alone, every other message commits, and
// nothing waits for the evidence or holds its partition.
func TestAValueOnlyTheWriteRefusesIsItsMessagesInvalidity(t *testing.T) {
	e := newEnv(t)
	l := e.lead()
	r, h := queueBehindAHold(t, e, l, []string{"", "", ""}, []string{"", "unstorable", ""})
	h.Release()
	e.waitCommitted(7)

	if reason := kafkatest.Header(e.oneDeadLetter(probeInvalid, 1), consumer.HeaderReason); !strings.Contains(reason, "22009") {
		t.Fatalf("dead letter's reason %q does not carry the server's refusal", reason)
	}
	if n := e.events(l); n != 6 {
		t.Fatalf("lead_events = %d, want 6 (every other message once)", n)
	}
	checkOutcomes(t, r, map[consumer.Outcome]int{consumer.Applied: 6, consumer.DeadLettered: 1})
	if n := r.Counter("pin_consumer_dlq_total", map[string]string{"code": consumer.ProcessingFailed.Name}); n != 0 {
		t.Fatalf("%v messages dead-lettered as %s", n, consumer.ProcessingFailed.Name)
	}
}

// oneDeadLetter reads the probe's DLQ, which must hold one message, of
// code and with x-attempts attempts, and returns it.
func (e *env) oneDeadLetter(code consumer.Code, attempts int) *kafka.Message {
	e.t.Helper()
	dlq := e.cluster.ReadAll(e.t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 {
		e.t.Fatalf("DLQ holds %d messages, want 1", len(dlq))
	}
	if c, a := kafkatest.Header(dlq[0], "x-dlq-error-code"), kafkatest.Header(dlq[0], "x-attempts"); c != code.Name || a != strconv.Itoa(attempts) {
		e.t.Fatalf("dead letter: code %q, x-attempts %q (%s); want %s, %d", c, a, kafkatest.Header(dlq[0], consumer.HeaderReason), code.Name, attempts)
	}
	return dlq[0]
}
