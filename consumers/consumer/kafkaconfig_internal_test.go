package consumer

import (
	"bytes"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// The runtime bounds librdkafka's prefetch (C memory, outside the Go heap)
// unless KAFKA_QUEUED_MAX_MESSAGES_KBYTES says otherwise, and keeps the
// settings the delivery guarantee rests on whatever the environment says.
func TestConsumerConfigDefaultsAndOverrides(t *testing.T) {
	base := []string{"KAFKA_BOOTSTRAP_SERVERS=b:9092", "DATABASE_URL=postgres://x"}
	build := func(env ...string) kafka.ConfigMap {
		t.Helper()
		cfg, err := ConfigFromEnv(append(base, env...), "")
		if err != nil {
			t.Fatal(err)
		}
		r := &Runtime{cfg: cfg, svc: Service{Group: "g"}}
		return r.consumerConfig()
	}
	cm := build()
	if got := cm["queued.max.messages.kbytes"]; got != 2048 {
		t.Fatalf("queued.max.messages.kbytes = %v, want 2048 by default", got)
	}
	if got := cm["fetch.queue.backoff.ms"]; got != 10 {
		t.Fatalf("fetch.queue.backoff.ms = %v, want 10 by default: librdkafka's 1 s stalls a consumer catching up", got)
	}
	if got := cm["auto.offset.reset"]; got != "earliest" {
		t.Fatalf("auto.offset.reset = %v, want earliest", got)
	}
	cm = build("KAFKA_QUEUED_MAX_MESSAGES_KBYTES=65536", "KAFKA_FETCH_QUEUE_BACKOFF_MS=1000", "KAFKA_ENABLE_AUTO_OFFSET_STORE=true", "KAFKA_GROUP_ID=other")
	if got := cm["queued.max.messages.kbytes"]; got != "65536" {
		t.Fatalf("queued.max.messages.kbytes = %v, want the environment's 65536", got)
	}
	if got := cm["fetch.queue.backoff.ms"]; got != "1000" {
		t.Fatalf("fetch.queue.backoff.ms = %v, want the environment's 1000", got)
	}
	if cm["enable.auto.offset.store"] != false || cm["group.id"] != "g" {
		t.Fatalf("enable.auto.offset.store = %v, group.id = %v: the environment must not override them", cm["enable.auto.offset.store"], cm["group.id"])
	}
}

// A Config built in code (ConfigFromEnv leaves them out itself) runs
// without the classic protocol's settings under the consumer protocol,
// which librdkafka refuses there, and New logs a warning for each.
func TestNewLeavesOutTheClassicSettingsUnderTheConsumerProtocol(t *testing.T) {
	svc := Service{Name: "x", Topic: "t", Group: "g", DLQTopic: "d", InvalidCode: Code{Name: "X_INVALID", Class: Invalid},
		Handlers: nothingTo("e", "x:")}
	km := kafka.ConfigMap{"group.protocol": "consumer", "session.timeout.ms": 6000, "statistics.interval.ms": 1000}
	var log bytes.Buffer
	r, err := New(Config{Kafka: km}, svc, nil, nil, Options{Registry: prometheus.NewRegistry(), Logger: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.cfg.Kafka["session.timeout.ms"]; ok || len(r.cfg.Kafka) != 2 || len(km) != 3 {
		t.Errorf("runs %v from %v: want session.timeout.ms out, the caller's map untouched", r.cfg.Kafka, km)
	}
	if !strings.Contains(log.String(), `"level":"warn"`) || strings.Count(log.String(), "KAFKA_SESSION_TIMEOUT_MS is ignored under group.protocol=consumer") != 1 {
		t.Errorf("log:\n%s\nwant one warning naming KAFKA_SESSION_TIMEOUT_MS", log.String())
	}
}
