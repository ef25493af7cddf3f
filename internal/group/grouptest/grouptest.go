// Package grouptest makes a consumer group that has read a whole topic, on
// an in-process broker: the fixture of the tests of internal/group and of
// `pinctl group`.
package grouptest

import (
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/kafkaenv"
)

// The topic and the group.
const (
	Topic = "pin.test.source.v1" // 3 partitions
	Group = "pin-test-group"
)

// NewTopic starts the cluster newCluster makes (kafkatest.NewCluster,
// kafkatest.NewKfake, …) with Topic holding n messages per partition, and
// commits the high watermark of each for Group, as a group that has read
// everything would have.
func NewTopic(t testing.TB, newCluster func(testing.TB, map[string]int) *kafkatest.Cluster, n int) *kafkatest.Cluster {
	t.Helper()
	kc := newCluster(t, map[string]int{Topic: 3})
	for p := range int32(3) {
		for i := range n {
			kc.Produce(t, Topic, kafkatest.Message{Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("{}")})
		}
	}
	cm := kc.Config(kafka.ConfigMap{"group.id": Group, "enable.auto.commit": false})
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer kafkaenv.CloseConsumer(c)
	topic := Topic
	var tps []kafka.TopicPartition
	for p := range int32(3) {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(n)})
	}
	if _, err := c.CommitOffsets(tps); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return kc
}

// WantCommitted fails t unless Group's committed offset is want on every
// partition of Topic.
func WantCommitted(t testing.TB, kc *kafkatest.Cluster, want int64) {
	t.Helper()
	got := kc.Committed(t, Group, Topic)
	for p := range int32(3) {
		if off, ok := got[p]; !ok || off != want {
			t.Fatalf("committed offsets %v, want %d on every partition", got, want)
		}
	}
}
