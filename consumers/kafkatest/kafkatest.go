// Package kafkatest runs an in-process Kafka-protocol broker on loopback
// for tests — librdkafka's mock cluster or franz-go's kfake — with topics,
// producing, reading topics back (DLQs) and reading a group's committed
// offsets, the same on both.
//
// The mock cluster is the default (NewCluster): it starts fast and is what
// most tests run on. Its group coordinator is partial: it describes no
// groups, it refuses a commit from outside a group that ever had members,
// and it refuses a member's commit while the group rebalances. kfake
// (NewKfake) has a group coordinator that behaves like Kafka's, answers the
// AdminClient's group requests, and lets a test inject broker-side faults
// (Cluster.Kfake: Fault, ControlKey, MoveTopicPartition). Tests of the
// delivery guarantees run on both (Brokers, EachBroker).
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is an in-process broker with the topics a test asked for.
type Cluster struct {
	Bootstrap string
	// Name is the broker's kind: "mock" or "kfake".
	Name     string
	mc       *kafka.MockCluster
	fake     *kfake.Cluster
	sasl     kafka.ConfigMap // the clients' SASL settings (NewKfakeSASL)
	producer *kafka.Producer
}

// Broker is a kind of in-process broker: its name and its constructor.
type Broker struct {
	Name string
	New  func(t testing.TB, topics map[string]int) *Cluster
}

// Brokers are the brokers a test of the delivery guarantees runs on: the
// mock cluster and kfake (one broker).
var Brokers = []Broker{
	{Name: "mock", New: NewCluster},
	{Name: "kfake", New: func(t testing.TB, topics map[string]int) *Cluster { return NewKfake(t, topics) }},
}

// EachBroker runs body as a subtest named after each of Brokers, one after
// the other; body calls t.Parallel itself when it may run in parallel.
func EachBroker(t *testing.T, body func(t *testing.T, b Broker)) {
	t.Helper()
	for _, b := range Brokers {
		t.Run(b.Name, func(t *testing.T) { body(t, b) })
	}
}

// NewCluster starts a one-broker mock cluster and creates topics (name →
// partitions). It is closed when the test ends.
func NewCluster(t testing.TB, topics map[string]int) *Cluster {
	t.Helper()
	mc, err := kafka.NewMockCluster(1)
	if err != nil {
		t.Fatalf("kafkatest: mock cluster: %v", err)
	}
	c := &Cluster{Name: "mock", mc: mc, Bootstrap: mc.BootstrapServers()}
	for name, n := range topics {
		if err := mc.CreateTopic(name, n, 1); err != nil {
			mc.Close()
			t.Fatalf("kafkatest: create topic %s: %v", name, err)
		}
	}
	c.start(t, mc.Close)
	return c
}

// NewKfake starts a kfake cluster with topics (name → partitions): one
// broker unless opts say otherwise (kfake.NumBrokers). It is closed when
// the test ends.
func NewKfake(t testing.TB, topics map[string]int, opts ...kfake.Opt) *Cluster {
	t.Helper()
	return newKfake(t, topics, nil, opts...)
}

func newKfake(t testing.TB, topics map[string]int, sasl kafka.ConfigMap, opts ...kfake.Opt) *Cluster {
	t.Helper()
	all := []kfake.Opt{kfake.NumBrokers(1)}
	for name, n := range topics {
		all = append(all, kfake.SeedTopics(int32(n), name))
	}
	fc, err := kfake.NewCluster(append(all, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: kfake: %v", err)
	}
	c := &Cluster{Name: "kfake", fake: fc, sasl: sasl}
	for i, a := range fc.ListenAddrs() {
		if i > 0 {
			c.Bootstrap += ","
		}
		c.Bootstrap += a
	}
	c.start(t, fc.Close)
	return c
}

// NewKfakeSASL starts a kfake cluster whose brokers take SASL/PLAIN
// connections only, for user with password; the cluster's own clients
// (Produce, ReadAll, …) log in as that user.
func NewKfakeSASL(t testing.TB, topics map[string]int, user, password string) *Cluster {
	t.Helper()
	sasl := kafka.ConfigMap{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
		"sasl.username": user, "sasl.password": password}
	return newKfake(t, topics, sasl, kfake.EnableSASL(), kfake.Superuser("PLAIN", user, password))
}

// Kfake is the kfake cluster, for faults and leader moves; nil on the mock
// cluster.
func (c *Cluster) Kfake() *kfake.Cluster { return c.fake }

// Config returns librdkafka settings for a client of this cluster:
// bootstrap.servers, and on kfake a log level that leaves out the info
// line librdkafka logs for every connection (kfake answers
// GetTelemetrySubscriptions with no subscription). extra is added.
func (c *Cluster) Config(extra kafka.ConfigMap) kafka.ConfigMap {
	cm := kafka.ConfigMap{"bootstrap.servers": c.Bootstrap}
	for k, v := range c.ClientConfig() {
		cm[k] = v
	}
	for k, v := range extra {
		cm[k] = v
	}
	return cm
}

// ClientConfig is what this cluster's clients need beyond
// bootstrap.servers (consumertest.Options.Kafka takes it): on kfake,
// log_level 5 (notice), as librdkafka logs an info line per connection
// about kfake's empty telemetry subscription.
func (c *Cluster) ClientConfig() kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	if c.fake != nil {
		cm["log_level"] = 5
	}
	for k, v := range c.sasl {
		cm[k] = v
	}
	return cm
}

// start starts the cluster's producer and registers the cleanup.
func (c *Cluster) start(t testing.TB, closeCluster func()) {
	t.Helper()
	cm := c.Config(kafka.ConfigMap{
		"enable.idempotence": true,
		"linger.ms":          0,
		"message.max.bytes":  10 << 20, // tests may produce oversized messages
	})
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		closeCluster()
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
		closeCluster()
	})
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
	cm := c.Config(kafka.ConfigMap{
		"group.id":             "kafkatest-reader",
		"enable.auto.commit":   false,
		"enable.partition.eof": false,
	})
	cons, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatalf("kafkatest: reader: %v", err)
	}
	defer cons.Close()
	md := topicMetadata(t, cons, topic)
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
	cm := c.Config(kafka.ConfigMap{"group.id": "kafkatest-count"})
	cons, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	defer cons.Close()
	md := topicMetadata(t, cons, topic)
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
// (partitions without a commit are absent; a group kfake never saw has
// none).
func (c *Cluster) Committed(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	cm := c.Config(kafka.ConfigMap{"group.id": group})
	cons, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	defer cons.Close()
	md := topicMetadata(t, cons, topic)
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID})
	}
	got, err := cons.Committed(tps, 5000)
	if ke, ok := err.(kafka.Error); ok && ke.Code() == kafka.ErrGroupIDNotFound {
		// kfake answers an OffsetFetch for a group it does not know with
		// GROUP_ID_NOT_FOUND, where Kafka answers "no offset".
		return map[int32]int64{}
	}
	if err != nil {
		t.Fatalf("kafkatest: committed offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, tp := range got {
		if tp.Error != nil {
			t.Fatalf("kafkatest: committed offset of %s [%d]: %v", group, tp.Partition, tp.Error)
		}
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

// AddPartitions grows topic to total partitions, as `kafka-topics --alter
// --partitions` does (kfake only: the mock cluster has no admin API).
func (c *Cluster) AddPartitions(t testing.TB, topic string, total int) {
	t.Helper()
	if c.fake == nil {
		t.Fatalf("kafkatest: AddPartitions needs kfake")
	}
	cm := c.Config(nil)
	admin, err := kafka.NewAdminClient(&cm)
	if err != nil {
		t.Fatalf("kafkatest: admin client: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := admin.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: topic, IncreaseTo: total}})
	if err == nil && len(res) == 1 && res[0].Error.Code() != kafka.ErrNoError {
		err = res[0].Error
	}
	if err != nil {
		t.Fatalf("kafkatest: add partitions to %s: %v", topic, err)
	}
	// The cluster's producer learns of them on its next metadata request.
	Eventually(t, 30*time.Second, func() bool {
		md, err := c.producer.GetMetadata(&topic, false, 5000)
		return err == nil && len(md.Topics[topic].Partitions) == total
	}, "the producer to see the new partitions")
}

// topicMetadata is topic's metadata as client sees it. A new client's
// first request may meet a connection the loaded broker has not accepted
// yet (librdkafka's "Local: Broker transport failure" under -race on two
// cores, failing a test in its harness, not in what it tests): an error
// librdkafka calls retriable, or a transport failure, is tried again for
// up to 30 s.
func topicMetadata(t testing.TB, client interface {
	GetMetadata(*string, bool, int) (*kafka.Metadata, error)
}, topic string) *kafka.Metadata {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := client.GetMetadata(&topic, false, 5000)
		if err == nil {
			return md
		}
		var ke kafka.Error
		transient := errors.As(err, &ke) && (ke.IsRetriable() || ke.Code() == kafka.ErrTransport || ke.Code() == kafka.ErrAllBrokersDown)
		if !transient || time.Now().After(deadline) {
			t.Fatalf("kafkatest: metadata of %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
