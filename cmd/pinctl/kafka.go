package main

import (
	"context"
	"os"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/internal/kafkaenv"
)

// kafkaConfig is the configuration of every Kafka client pinctl makes: the
// KAFKA_* environment (security.protocol, sasl.*, ssl.*, …, as the
// consumers read it), the brokers of --brokers, and the client's own
// settings, which win.
func kafkaConfig(brokers string, own kafka.ConfigMap) *kafka.ConfigMap {
	cm := kafkaenv.FromEnv(os.Environ()).Map(brokers, own)
	return &cm
}

// checkKafka reaches the brokers before a command works with them: a
// refused password or TLS handshake is one clear line and exit 1, not a
// command that waits for nothing.
func checkKafka(ctx context.Context, brokers string) error {
	return kafkaenv.Check(ctx, *kafkaConfig(brokers, nil), 15*time.Second)
}
