package consumer_test

import (
	"bytes"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// A record the source topic took can be too large for the DLQ (its
// producer's message.max.bytes, 1,000,000 by default) for its headers or
// its key alone. Its dead letter still goes, without what does not fit,
// each omission recorded; the partition goes on. Before, the retry
// without the value failed again and counted as the world's, forever.
func TestADeadLetterAlwaysFitsTheDLQ(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("h", 1100*1024)
	for _, c := range []struct {
		name                         string
		key                          []byte
		headers                      map[string]string
		wantKey                      int // bytes of the dead letter's key
		valueKept, headersKept       bool
		wantHeadersOmitted, wantKeyT string
	}{
		{name: "headers too large", key: []byte(uuid.NewString()), headers: map[string]string{"big": big, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			wantKey: 36, valueKept: true, wantHeadersOmitted: strconv.Itoa(len("big") + len(big) + len("traceparent") + 55)},
		{name: "key too large", key: bytes.Repeat([]byte("k"), 1100*1024), headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			wantKey: 1024, valueKept: true, headersKept: true, wantKeyT: strconv.Itoa(1100 * 1024)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			leadID := e.lead()
			poison := []byte("not an envelope")
			e.cluster.Produce(t, probeTopic, kafkatest.Message{Partition: 1, Key: c.key, Value: poison, Headers: c.headers})
			_, ok := envelope(leadID, "")
			e.produce(1, ok)
			r := e.start(probeService(long...), consumertest.Options{})
			e.waitCommitted(2)
			if got := e.events(leadID); got != 1 {
				t.Fatalf("lead_events = %d, want 1 (the partition went on)", got)
			}
			dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
			if len(dlq) != 1 {
				t.Fatalf("DLQ holds %d, want 1", len(dlq))
			}
			m := dlq[0]
			if got := kafkatest.Header(m, consumer.HeaderErrorCode); got != "EVENT_ENVELOPE_INVALID" {
				t.Fatalf("x-dlq-error-code %q", got)
			}
			if len(m.Key) != c.wantKey || !bytes.Equal(m.Key, c.key[:c.wantKey]) {
				t.Fatalf("key %d bytes, want the first %d of the original", len(m.Key), c.wantKey)
			}
			if c.valueKept != bytes.Equal(m.Value, poison) {
				t.Fatalf("value %q, kept = %v", m.Value, c.valueKept)
			}
			if got := kafkatest.Header(m, "traceparent") != ""; got != c.headersKept {
				t.Fatalf("original headers kept = %v, want %v", got, c.headersKept)
			}
			if got := kafkatest.Header(m, consumer.HeaderHeadersOmitted); got != c.wantHeadersOmitted {
				t.Fatalf("%s = %q, want %q", consumer.HeaderHeadersOmitted, got, c.wantHeadersOmitted)
			}
			if got := kafkatest.Header(m, consumer.HeaderKeyTruncated); got != c.wantKeyT {
				t.Fatalf("%s = %q, want %q", consumer.HeaderKeyTruncated, got, c.wantKeyT)
			}
			if got := r.Counter("pin_consumer_retries_total", map[string]string{"code": "DLQ_PUBLISH"}); got != 0 {
				t.Fatalf("retries{DLQ_PUBLISH} = %v, want 0: a record's size is its own fault", got)
			}
		})
	}
}

// A source topic grown from 3 to 5 partitions with its DLQ left at 3 (the
// usual oversight: `kafka-topics --alter` on the source only): the
// consumer takes the new partitions, and their poison messages go to DLQ
// partition (number mod 3) instead of holding the partition for good;
// the mismatch is a gauge and a warning. The old partitions keep their
// own numbers.
func TestADeadLetterOfAPartitionTheDLQLacksGoesToOneItHas(t *testing.T) {
	t.Parallel()
	e := kfakeEnv(t)
	leadID := e.lead()
	r := e.start(probeService(long...), consumertest.Options{HTTP: true})
	e.produceN(leadID, 3)
	e.waitCommitted(3)
	if got := r.Counter("pin_consumer_dlq_partitions_missing", nil); got != 0 {
		t.Fatalf("dlq_partitions_missing = %v before the source grew, want 0", got)
	}
	e.cluster.AddPartitions(t, probeTopic, 5)
	kafkatest.Eventually(t, 60*time.Second, func() bool {
		return len(e.cluster.Committed(t, probeGroup, probeTopic)) == 5 || r.Counter("pin_consumer_dlq_partitions_missing", nil) == 2
	}, "the consumer to take the new partitions")
	for _, p := range []int32{3, 4, 0} {
		e.produce(p, []byte("not an envelope"))
		_, ok := envelope(leadID, "")
		e.produce(p, ok)
	}
	e.waitCommitted(9)
	if got := e.events(leadID); got != 6 {
		t.Fatalf("lead_events = %d, want 6", got)
	}
	if got := r.Counter("pin_consumer_dlq_partitions_missing", nil); got != 2 {
		t.Fatalf("dlq_partitions_missing = %v, want 2", got)
	}
	want := map[string]int32{"3": 0, "4": 1, "0": 0} // source partition → DLQ partition
	for _, m := range e.cluster.ReadAll(t, probeDLQ, 3, 10*time.Second) {
		src := kafkatest.Header(m, consumer.HeaderOriginalPartition)
		p, ok := want[src]
		if !ok || m.TopicPartition.Partition != p {
			t.Fatalf("dead letter of source partition %s in DLQ partition %d, want %d", src, m.TopicPartition.Partition, p)
		}
		delete(want, src)
	}
	if len(want) != 0 {
		t.Fatalf("no dead letter of source partitions %v", want)
	}
	if err := r.Runtime.Ready(t.Context()); err != nil {
		t.Fatalf("Ready = %v, want ready", err)
	}
}

// A DLQ created with fewer partitions than its source does not keep the
// consumer from starting: it starts, reports the mismatch, and dead-letters
// into the partitions the DLQ has.
func TestADLQSmallerThanItsSourceIsReportedNotRefused(t *testing.T) {
	t.Parallel()
	cl := kafkatest.NewCluster(t, map[string]int{probeTopic: 3, probeDLQ: 2})
	u := pgtest.NewDB(t)
	db, err := sql.Open("postgres", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &env{t: t, cluster: cl, url: u, db: db}
	r := e.start(probeService(long...), consumertest.Options{})
	e.produce(2, []byte("not an envelope"))
	e.waitCommitted(1)
	if got := r.Counter("pin_consumer_dlq_partitions_missing", nil); got != 1 {
		t.Fatalf("dlq_partitions_missing = %v, want 1", got)
	}
	dlq := e.cluster.ReadAll(t, probeDLQ, 1, 10*time.Second)
	if len(dlq) != 1 || dlq[0].TopicPartition.Partition != 0 {
		t.Fatalf("DLQ holds %d (partition %v), want 1 in partition 2 mod 2 = 0", len(dlq), dlq)
	}
}
