// Package kafkatest runs librdkafka's in-process mock cluster, a real
// Kafka-protocol broker on loopback, for tests: topics, producing, reading
// topics back (DLQs) and reading a group's committed offsets.
package kafkatest

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Cluster is a mock cluster with the topics a test asked for.
type Cluster struct {
	mc        *kafka.MockCluster
	Bootstrap string
	producer  *kafka.Producer
}

// NewCluster starts a one-broker mock cluster and creates topics (name →
// partitions). It is closed when the test ends.
func NewCluster(t testing.TB, topics map[string]int) *Cluster {
	t.Helper()
	mc, err := kafka.NewMockCluster(1)
	if err != nil {
		t.Fatalf("kafkatest: mock cluster: %v", err)
	}
	c := &Cluster{mc: mc, Bootstrap: mc.BootstrapServers()}
	for name, n := range topics {
		if err := mc.CreateTopic(name, n, 1); err != nil {
			mc.Close()
			t.Fatalf("kafkatest: create topic %s: %v", name, err)
		}
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  c.Bootstrap,
		"enable.idempotence": true,
		"linger.ms":          0,
		"message.max.bytes":  10 << 20, // tests may produce oversized messages
	})
	if err != nil {
		mc.Close()
		t.Fatalf("kafkatest: producer: %v", err)
	}
	go func() {
		for range p.Events() {
		}
	}()
	c.producer = p
	t.Cleanup(func() {
		p.Flush(5000)
		p.Close()
		mc.Close()
	})
	return c
}

// Message is what a test produces.
type Message struct {
	Partition int32 // -1: by key (librdkafka's default partitioner)
	Key       []byte
	Value     []byte
	Headers   map[string]string
}

// Produce writes messages to topic in order and waits until each is
// acknowledged; it returns their offsets.
func (c *Cluster) Produce(t testing.TB, topic string, msgs ...Message) []kafka.TopicPartition {
	t.Helper()
	out := make([]kafka.TopicPartition, 0, len(msgs))
	for _, m := range msgs {
		tp, err := c.produce(topic, m)
		if err != nil {
			t.Fatalf("kafkatest: produce to %s: %v", topic, err)
		}
		out = append(out, tp)
	}
	return out
}

func (c *Cluster) produce(topic string, m Message) (kafka.TopicPartition, error) {
	part := m.Partition
	if part < 0 {
		part = kafka.PartitionAny
	}
	km := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part},
		Key:            m.Key,
		Value:          m.Value,
	}
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		km.Headers = append(km.Headers, kafka.Header{Key: k, Value: []byte(m.Headers[k])})
	}
	ch := make(chan kafka.Event, 1)
	if err := c.producer.Produce(km, ch); err != nil {
		return kafka.TopicPartition{}, err
	}
	select {
	case ev := <-ch:
		r := ev.(*kafka.Message)
		return r.TopicPartition, r.TopicPartition.Error
	case <-time.After(30 * time.Second):
		return kafka.TopicPartition{}, fmt.Errorf("no delivery report in 30s")
	}
}

// ReadAll reads every message of topic from the beginning until want
// messages were read or timeout passed, and returns them.
func (c *Cluster) ReadAll(t testing.TB, topic string, want int, timeout time.Duration) []*kafka.Message {
	t.Helper()
	cons, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":    c.Bootstrap,
		"group.id":             "kafkatest-reader",
		"enable.auto.commit":   false,
		"enable.partition.eof": false,
	})
	if err != nil {
		t.Fatalf("kafkatest: reader: %v", err)
	}
	defer cons.Close()
	md, err := cons.GetMetadata(&topic, false, 5000)
	if err != nil {
		t.Fatalf("kafkatest: metadata of %s: %v", topic, err)
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
	}
	if err := cons.Assign(tps); err != nil {
		t.Fatalf("kafkatest: assign: %v", err)
	}
	var out []*kafka.Message
	deadline := time.Now().Add(timeout)
	for len(out) < want && time.Now().Before(deadline) {
		if m, ok := cons.Poll(100).(*kafka.Message); ok {
			out = append(out, m)
		}
	}
	return out
}

// Count returns how many messages topic holds (high watermarks minus low).
func (c *Cluster) Count(t testing.TB, topic string) int {
	t.Helper()
	cons, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.Bootstrap, "group.id": "kafkatest-count"})
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	defer cons.Close()
	md, err := cons.GetMetadata(&topic, false, 5000)
	if err != nil {
		t.Fatalf("kafkatest: metadata of %s: %v", topic, err)
	}
	n := 0
	for _, p := range md.Topics[topic].Partitions {
		lo, hi, err := cons.QueryWatermarkOffsets(topic, p.ID, 5000)
		if err != nil {
			t.Fatalf("kafkatest: watermarks: %v", err)
		}
		n += int(hi - lo)
	}
	return n
}

// Committed returns group's committed offset per partition of topic
// (partitions without a commit are absent).
func (c *Cluster) Committed(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	cons, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.Bootstrap, "group.id": group})
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	defer cons.Close()
	md, err := cons.GetMetadata(&topic, false, 5000)
	if err != nil {
		t.Fatalf("kafkatest: metadata of %s: %v", topic, err)
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID})
	}
	got, err := cons.Committed(tps, 5000)
	if err != nil {
		t.Fatalf("kafkatest: committed offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, tp := range got {
		if tp.Offset >= 0 {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out
}

// Header returns the value of header key of m ("" when absent).
func Header(m *kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Eventually polls cond every 20ms until it holds or timeout passes; then
// it fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
