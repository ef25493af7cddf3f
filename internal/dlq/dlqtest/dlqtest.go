// Package dlqtest puts dead letters, as the consumers' runtime writes them
// (docs/contract.md §5), on an in-process broker: the fixtures of the
// tests of internal/dlq and of `pinctl dlq`.
package dlqtest

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// The topics and the group of the dead letters.
const (
	Source = "pin.test.source.v1"     // the source topic (3 partitions)
	DLQ    = "pin.test.source-dlq.v1" // its DLQ topic (3 partitions)
	Group  = "pin-test-group"         // the group that dead-lettered them
)

// DeadLetter is a DLQ message as the runtime writes it.
type DeadLetter struct {
	DLQPartition int32
	SrcPartition int32
	SrcOffset    int64
	Code         string
	Attempts     int
	At           time.Time         // x-dlq-at; zero: now
	ID           uuid.UUID         // MessageId; uuid.Nil: a value that is not an envelope
	Key          string            //
	Extra        map[string]string // original headers, x-replay-count, …
	NoSource     bool              // without x-source-topic
	NoValue      bool              // published without its value (a null value)
}

// Value is the message's value: an envelope of MessageId ID, or text that
// is none.
func (d DeadLetter) Value() []byte {
	if d.ID == uuid.Nil {
		return []byte("not json at all")
	}
	b, err := json.Marshal(map[string]any{
		"MessageId": d.ID.String(), "EventType": "pin.test.happened", "ContractVersion": 1,
		"CreatedAt": "2026-11-30T10:00:00Z", "Payload": map[string]any{"N": 1},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// Message is the dead letter as it is produced to DLQ: its value and the
// x-dlq-* headers, then Extra's.
func (d DeadLetter) Message() kafkatest.Message {
	if d.At.IsZero() {
		d.At = time.Now()
	}
	h := map[string]string{
		consumer.HeaderReason:            "the " + d.Code + " reason",
		consumer.HeaderErrorCode:         d.Code,
		consumer.HeaderSourceTopic:       Source,
		consumer.HeaderOriginalPartition: strconv.Itoa(int(d.SrcPartition)),
		consumer.HeaderOriginalOffset:    strconv.FormatInt(d.SrcOffset, 10),
		consumer.HeaderConsumerGroup:     Group,
		consumer.HeaderAttempts:          strconv.Itoa(d.Attempts),
		consumer.HeaderDLQAt:             d.At.UTC().Format(time.RFC3339),
	}
	if d.NoSource {
		delete(h, consumer.HeaderSourceTopic)
	}
	for k, v := range d.Extra {
		h[k] = v
	}
	m := kafkatest.Message{Partition: d.DLQPartition, Key: []byte(d.Key), Value: d.Value(), Headers: h}
	if d.NoValue {
		m.Value = nil
	}
	return m
}

// NewCluster starts librdkafka's mock cluster with Source and DLQ and
// produces dls to DLQ, in order.
func NewCluster(t testing.TB, dls ...DeadLetter) *kafkatest.Cluster {
	t.Helper()
	kc := kafkatest.NewCluster(t, map[string]int{Source: 3, DLQ: 3})
	for _, d := range dls {
		kc.Produce(t, DLQ, d.Message())
	}
	return kc
}

// ReadSource reads the n messages of the source topic (failing if there
// are more or fewer).
func ReadSource(t testing.TB, kc *kafkatest.Cluster, n int) []*kafka.Message {
	t.Helper()
	if got := kc.Count(t, Source); got != n {
		t.Fatalf("source topic holds %d messages, want %d", got, n)
	}
	if n == 0 {
		return nil
	}
	ms := kc.ReadAll(t, Source, n, 30*time.Second)
	if len(ms) != n {
		t.Fatalf("read %d messages of the source topic, want %d", len(ms), n)
	}
	return ms
}
