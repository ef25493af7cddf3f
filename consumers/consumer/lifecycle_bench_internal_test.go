package consumer

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pin-platform/pin/ent"
)

// BenchmarkMessageLifecycle measures what the runtime spends on every
// message outside its transaction: the decode, the span, the message's
// logger, the idempotency key, then the outcome's metrics and its log line
// (go test -run '^$' -bench MessageLifecycle -benchmem ./consumers/consumer).
// Tracing is off, as in a deployment without OTEL_EXPORTER_OTLP_ENDPOINT.
func BenchmarkMessageLifecycle(b *testing.B) {
	svc := lifecycleService()
	log := zerolog.New(io.Discard).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	r, err := New(Config{}, svc, nil, nil, Options{Logger: log, Registry: prometheus.NewRegistry(), TracerProvider: noop.NewTracerProvider()})
	if err != nil {
		b.Fatal(err)
	}
	km := lifecycleMessage(svc.Topic)
	b.ReportAllocs()
	for b.Loop() {
		it := r.prepare(km, time.Now())
		if !it.routed || it.key == "" {
			b.Fatalf("not routed: %+v", it)
		}
		r.logFor(it).Debug().Msg("consumed")
		it.outcome = Applied
		r.finish(it, nil)
	}
}

// lifecycleService is a service of one route that does nothing.
func lifecycleService() Service {
	return Service{
		Name: "bench", Topic: "pin.bench.v1", Group: "bench", DLQTopic: "pin.bench.v1.dlq",
		ContractVersion: 1,
		InvalidCode:     Code{Name: "BENCH_INVALID", Class: Invalid},
		Handlers:        nothingTo("pin.referral.bond-created", "rewards:"),
		Metrics: SpecMetrics{
			DurationMs: "bench_consume_duration_ms", DLQ: "bench_dlq_total",
			ContractMismatch: "bench_contract_mismatch_total", Duplicates: "bench_duplicates_total",
			Retries: "bench_retries_total", Lag: "bench_lag_seconds",
		},
	}
}

// lifecycleMessage is a bond-created event of topic, with a traceparent.
func lifecycleMessage(topic string) *kafka.Message {
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 3, Offset: 123456},
		Key:            []byte("0d6f2b6e-1111-4222-8333-444455556666"),
		Headers:        []kafka.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}},
		Value: []byte(`{"MessageId":"6f1c2b9e-1111-4222-8333-444455556666","EventType":"pin.referral.bond-created","ContractVersion":1,` +
			`"CreatedAt":"2026-11-30T10:00:00.123456Z","AggregateId":"0d6f2b6e-1111-4222-8333-444455556666","AggregateType":"ReferralBond",` +
			`"Payload":{"BondId":"0d6f2b6e-1111-4222-8333-444455556666","ReferredUserId":"1d6f2b6e-1111-4222-8333-444455556666",` +
			`"ReferrerUserId":"2d6f2b6e-1111-4222-8333-444455556666","ReferrerCompanyId":null,"BoundAt":"2026-11-30T09:59:00Z","Version":1}}`),
	}
}

// nothingTo is a contract of one route that reads nothing, decides
// Applied and writes nothing.
func nothingTo(eventType, keyPrefix string) Batched[struct{}] {
	return Batched[struct{}]{
		Read: func(context.Context, *ent.Tx, []*Message) (struct{}, error) { return struct{}{}, nil },
		Routes: []Route[struct{}]{{EventType: eventType, KeyPrefix: keyPrefix,
			Decide: func(context.Context, struct{}, *Message) (Outcome, error) { return Applied, nil }}},
	}
}
