package kafkaenv

import (
	"os"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Client is the configuration of one of pinctl's Kafka clients: the
// KAFKA_* variables of the process's environment (security.protocol,
// sasl.*, ssl.*, …, as the consumers read them), bootstrap.servers =
// brokers, and own, the client's own settings, which win.
func Client(brokers string, own kafka.ConfigMap) *kafka.ConfigMap {
	cm := FromEnv(os.Environ()).Map(brokers, own)
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
