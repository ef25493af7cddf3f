package consumer

import (
	"context"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// item is one message on its way through the runtime.
type item struct {
	km        *kafka.Message
	msg       *Message
	decodeErr error
	route     RouteInfo
	routeIdx  int // its route's index in the service's routes
	routed    bool
	id        string          // the MessageId as text, once decoded
	key       string          // idempotency key
	start     time.Time       // handed to its worker: its duration counts the queue
	ctx       context.Context // carries the message's span
	span      trace.Span
	st        *state // its attempt's: set on its message while its route runs
	outcome   Outcome
	attempts  int
	marked    bool            // its mark was found committed: a duplicate
	waited    bool            // its waits before its first transaction are counted (metrics.waited)
	inLine    bool            // it could not be parked: its retry-later waits are in line
	size      int64           // messageBytes(km), measured once at its hand-over
	attempt   *attemptSpans   // the spans of the attempt running now
	log       *zerolog.Logger // the message's logger, built on first use
}

// dropHooks forgets the after-commit hooks of a rolled-back attempt.
func (it *item) dropHooks() {
	if it.st != nil {
		it.st.afterCommit = nil
	}
}

// prepare decodes a message and starts its span, continuing the W3C trace
// context of its headers; at is when the message was handed to its worker.
func (r *Runtime) prepare(km *kafka.Message, at time.Time) *item {
	it := &item{km: km, start: at}
	ctx := r.prop.Extract(context.Background(), headerCarrier(km.Headers))
	it.ctx, it.span = r.tracer.Start(ctx, r.span.name,
		trace.WithTimestamp(at), // as the duration: from the hand-over
		r.span.kind, r.span.attrs,
		trace.WithAttributes(
			attribute.Int("messaging.destination.partition.id", int(km.TopicPartition.Partition)),
			attribute.Int64("messaging.kafka.offset", int64(km.TopicPartition.Offset)),
		))
	r.decode(it)
	if it.msg != nil && it.span.IsRecording() { // not built for a tracer that is off
		it.span.SetAttributes(
			attribute.String("messaging.message.id", it.id),
			attribute.String("pin.event_type", it.msg.loggedEventType()))
	}
	if r.log.GetLevel() <= zerolog.DebugLevel { // not the message's logger built for a line that is off
		r.logFor(it).Debug().Msg("consumed")
	}
	return it
}

// decode reads the item's envelope and finds its route.
func (r *Runtime) decode(it *item) {
	km := it.km
	env, err := DecodeEnvelope(km.Value)
	if err != nil {
		it.decodeErr = err
		return
	}
	it.msg = NewMessage(env, r.svc.InvalidCode, r.cfg.MaxClockSkew)
	it.msg.Topic, it.msg.Partition, it.msg.Offset, it.msg.Key = r.svc.Topic, km.TopicPartition.Partition, int64(km.TopicPartition.Offset), km.Key
	if env.Problem() == nil {
		it.msg.problem = timeProblem("CreatedAt", env.CreatedAt, r.cfg.MaxClockSkew)
	}
	it.id = env.MessageID.String()
	for i, rt := range r.routes {
		if rt.EventType == env.EventType {
			it.route, it.routeIdx, it.routed = rt, i, true
			break
		}
	}
	if it.routed {
		it.key = it.route.KeyPrefix + it.id
	}
}

// probeItem decodes a queued message for a probe (inPartition.probe): no span of
// its own, no "consumed" line; it is prepared again when its turn comes.
func (r *Runtime) probeItem(km *kafka.Message) *item {
	it := &item{km: km, start: time.Now(), ctx: context.Background()}
	it.span = trace.SpanFromContext(it.ctx) // a no-op span
	r.decode(it)
	return it
}

// logFor is the message's logger: the runtime's, with the message's
// partition, offset, MessageId and EventType. It is built once per message
// (after prepare decoded it), not on every line.
func (r *Runtime) logFor(it *item) *zerolog.Logger {
	if it.log != nil {
		return it.log
	}
	l := r.log.With().
		Int32("partition", it.km.TopicPartition.Partition).
		Int64("offset", int64(it.km.TopicPartition.Offset))
	if it.msg != nil { // a producer's EventType may be anything: cut
		l = l.Str("MessageId", it.id).Str("EventType", it.msg.loggedEventType())
	}
	lg := l.Logger()
	if it.msg != nil || it.decodeErr != nil { // decoded (or not decodable): final
		it.log = &lg
	}
	return &lg
}

// headerCarrier adapts Kafka headers to OpenTelemetry's TextMapCarrier.
type headerCarrier []kafka.Header

func (h headerCarrier) Get(key string) string {
	for _, x := range h {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}
func (h headerCarrier) Set(string, string) {}
func (h headerCarrier) Keys() []string {
	ks := make([]string, len(h))
	for i, x := range h {
		ks[i] = x.Key
	}
	return ks
}
