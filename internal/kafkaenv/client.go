package kafkaenv

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Client is the configuration of one of pinctl's Kafka clients: the
// KAFKA_* variables of the process's environment (security.protocol,
// sasl.*, ssl.*, …, as the consumers read them), bootstrap.servers =
// brokers, and own, the client's own settings, which win. Under
// group.protocol=consumer the classic protocol's settings, the
// environment's and own's, are left out (DropClassicOnly): librdkafka
// refuses them there.
func Client(brokers string, own kafka.ConfigMap) *kafka.ConfigMap {
	cm := FromEnv(os.Environ()).Map(brokers, own)
	DropClassicOnly(cm)
	return &cm
}

// CloseConsumer closes c, giving up after 10 s: Close can hang when the
// brokers are gone.
func CloseConsumer(c *kafka.Consumer) {
	done := make(chan struct{})
	go func() { _ = c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// Partitions returns the ids of topic's partitions, in order, or an error
// naming the topic when it does not exist.
func Partitions(c *kafka.Consumer, topic string) ([]int32, error) {
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	t, ok := md.Topics[topic]
	if !ok || t.Error.Code() != kafka.ErrNoError || len(t.Partitions) == 0 {
		return nil, fmt.Errorf("topic %s does not exist", topic)
	}
	ids := make([]int32, 0, len(t.Partitions))
	for _, p := range t.Partitions {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids, nil
}
