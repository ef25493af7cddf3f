package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pin-platform/consumers/ent"
)

// item is one message on its way through the runtime.
type item struct {
	km        *kafka.Message
	msg       *Message
	decodeErr error
	route     Route
	routed    bool
	key       string // idempotency key
	start     time.Time
	ctx       context.Context // carries the message's span
	span      trace.Span
	st        *state
	outcome   Outcome
	attempts  int
}

// dropHooks forgets the after-commit hooks of a rolled-back attempt.
func (it *item) dropHooks() {
	if it.st != nil {
		it.st.afterCommit = nil
	}
}

// prepare decodes a message and starts its span, continuing the W3C trace
// context of its headers.
func (r *Runtime) prepare(km *kafka.Message) *item {
	it := &item{km: km, start: time.Now()}
	ctx := r.prop.Extract(context.Background(), headerCarrier(km.Headers))
	it.ctx, it.span = r.tracer.Start(ctx, "process "+r.svc.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.destination.name", r.svc.Topic),
			attribute.String("messaging.consumer.group.name", r.svc.Group),
			attribute.Int("messaging.destination.partition.id", int(km.TopicPartition.Partition)),
			attribute.Int64("messaging.kafka.offset", int64(km.TopicPartition.Offset)),
		))
	env, err := DecodeEnvelope(km.Value)
	if err != nil {
		it.decodeErr = err
		return it
	}
	it.msg = &Message{
		Envelope:  env,
		Topic:     r.svc.Topic,
		Partition: km.TopicPartition.Partition,
		Offset:    int64(km.TopicPartition.Offset),
		Key:       km.Key,
		invalid:   r.svc.InvalidCode,
	}
	it.span.SetAttributes(
		attribute.String("messaging.message.id", env.MessageID.String()),
		attribute.String("pin.event_type", env.EventType))
	it.route, it.routed = r.svc.route(env.EventType)
	r.logFor(it).Debug().Msg("consumed")
	if it.routed {
		it.key = it.route.KeyPrefix + env.MessageID.String()
	}
	return it
}

func (r *Runtime) logFor(it *item) *zerolog.Logger {
	l := r.log.With().
		Int32("partition", it.km.TopicPartition.Partition).
		Int64("offset", int64(it.km.TopicPartition.Offset))
	if it.msg != nil {
		l = l.Str("MessageId", it.msg.MessageID.String()).Str("EventType", it.msg.EventType)
	}
	lg := l.Logger()
	return &lg
}

// handle processes a batch of one partition's messages in order. Runs of
// routable messages share one transaction; a run that fails in any way is
// rolled back and replayed one message at a time, where each failure gets
// its class's treatment. It reports false when the worker is stopping and
// the rest of the batch was abandoned.
func (w *worker) handle(batch []*kafka.Message) bool {
	r := w.r
	items := make([]*item, len(batch))
	for i, km := range batch {
		items[i] = r.prepare(km)
		if it := items[i]; it.msg != nil && r.svc.ContractVersion != 0 && it.msg.ContractVersion != r.svc.ContractVersion {
			r.m.mismatch()
			r.logFor(it).Warn().Int("ContractVersion", it.msg.ContractVersion).
				Int("expected", r.svc.ContractVersion).Msg("contract-version-mismatch")
		}
	}
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].routed {
			j++
		}
		ok := true
		if j == i { // a message that cannot be routed: on its own
			j = i + 1
			ok = w.processOne(items[i], nil)
		} else {
			ok = w.runRouted(items[i:j])
		}
		if !ok {
			for _, rest := range items[i:] {
				rest.span.End()
			}
			return false
		}
		i = j
	}
	return true
}

// runRouted processes routable messages, several per transaction. When a
// handler fails, the transaction is rolled back; the messages before it are
// run again (they did not fail), the failing one continues on its own with
// that failure as its first attempt, and the rest go on as a new batch.
func (w *worker) runRouted(items []*item) bool {
	for len(items) > 0 {
		if len(items) == 1 {
			return w.processOne(items[0], nil)
		}
		ok, k, err := w.processBatch(items)
		if ok {
			return true
		}
		if k < 0 { // not one handler's failure (marks, commit): one at a time
			for _, it := range items {
				if !w.processOne(it, nil) {
					return false
				}
			}
			return true
		}
		if !w.runRouted(items[:k]) || !w.processOne(items[k], err) {
			return false
		}
		items = items[k+1:]
	}
	return true
}

// processBatch runs several messages in one transaction. When it reports
// false everything was rolled back; failed is the index of the message
// whose handler returned err, or -1 when the failure was not a handler's.
func (w *worker) processBatch(items []*item) (ok bool, failed int, err error) {
	r := w.r
	ctx, span := r.tracer.Start(w.ctx, "db.batch", trace.WithAttributes(attribute.Int("pin.batch_size", len(items))))
	defer span.End()
	for _, it := range items {
		span.AddLink(trace.LinkFromContext(it.ctx))
	}
	tx, err := r.client.Tx(ctx)
	if err != nil {
		return false, -1, nil
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.key
	}
	seen, err := seenKeys(ctx, tx, keys)
	if err != nil {
		_ = tx.Rollback()
		return false, -1, nil
	}
	var marks []mark
	for i, it := range items {
		if seen[it.key] {
			it.outcome = SkippedDuplicate
			continue
		}
		seen[it.key] = true // the same MessageId twice in one batch
		out, err := r.call(ctx, tx, it)
		if err != nil {
			_ = tx.Rollback()
			return false, i, err
		}
		it.outcome = out
		marks = append(marks, mark{it.key, it.msg.Partition, it.msg.Offset, out})
	}
	if len(marks) > 0 {
		n, err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, marks)
		if err != nil || n != int64(len(marks)) {
			_ = tx.Rollback()
			return false, -1, nil
		}
	}
	if err := tx.Commit(); err != nil {
		return false, -1, nil
	}
	r.m.batchSize.Observe(float64(len(items)))
	for _, it := range items {
		it.attempts = 1
		w.finish(it, nil)
	}
	w.ack(items[len(items)-1].km.TopicPartition.Offset)
	return true, -1, nil
}

// call runs the route's handler for one attempt, with a fresh per-attempt
// state. A panic is turned into an error of the service's invalid code: the
// message goes to the DLQ (where it can be replayed after a fix) instead of
// crashing the process or stalling the partition.
func (r *Runtime) call(ctx context.Context, tx *ent.Tx, it *item) (out Outcome, err error) {
	it.st = &state{}
	defer func() {
		if p := recover(); p != nil {
			r.logFor(it).Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("handler panicked")
			err = r.svc.InvalidCode.Errorf("handler panicked: %v", p)
		}
	}()
	ctx = trace.ContextWithSpan(ctx, it.span)
	ctx = r.logFor(it).WithContext(ctx)
	return it.route.Handle(withState(ctx, it.st), tx, it.msg)
}

// attempt processes one message in its own transaction: mark check,
// handler, mark, commit.
func (w *worker) attempt(it *item) (Outcome, error) {
	r := w.r
	ctx, span := r.tracer.Start(trace.ContextWithSpan(w.ctx, it.span), "db.transaction")
	defer span.End()
	tx, err := r.client.Tx(ctx)
	if err != nil {
		return "", err
	}
	seen, err := seenKeys(ctx, tx, []string{it.key})
	if err != nil {
		_ = tx.Rollback()
		return "", err
	}
	if seen[it.key] {
		_ = tx.Rollback()
		it.st = nil
		return SkippedDuplicate, nil
	}
	out, err := r.call(ctx, tx, it)
	if err != nil {
		_ = tx.Rollback()
		span.SetStatus(codes.Error, err.Error())
		return "", err
	}
	n, err := insertMarks(ctx, tx, r.svc.Group, r.svc.Topic, []mark{{it.key, it.msg.Partition, it.msg.Offset, out}})
	if err != nil {
		_ = tx.Rollback()
		return "", err
	}
	if n == 0 { // marked by a concurrent processor since we looked
		_ = tx.Rollback()
		it.st = nil
		return SkippedDuplicate, nil
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("commit: %w", err)
	}
	return out, nil
}

// processOne takes one message to a final state: committed, skipped,
// dead-lettered or parked. It reports false when the worker is stopping and
// the message was abandoned (it will be redelivered).
//
// firstErr, when set, is the failure of the message's first attempt, made
// in a batch that was rolled back.
func (w *worker) processOne(it *item, firstErr error) bool {
	r := w.r
	if it.decodeErr != nil {
		return w.deadLetter(it, EnvelopeInvalid, it.decodeErr, 1)
	}
	if !it.routed {
		r.m.unknownType.WithLabelValues(it.msg.EventType).Inc()
		r.logFor(it).Warn().Msg("skipped-unknown-event-type")
		it.outcome = SkippedUnknownEventType
		w.finish(it, nil)
		w.ack(it.km.TopicPartition.Offset)
		return true
	}
	infra := newInfraBackoff()
	retried := 0
	for {
		it.attempts++
		var out Outcome
		err := firstErr
		if firstErr != nil {
			firstErr = nil
		} else {
			out, err = w.attempt(it)
		}
		if err == nil {
			it.outcome = out
			w.finish(it, nil)
			w.ack(it.km.TopicPartition.Offset)
			return true
		}
		if w.ctx.Err() != nil {
			return false
		}
		code, known := classify(err, r.svc.InvalidCode)
		if !known || code.Class == Infrastructure {
			d := r.cfg.scale(infra.NextBackOff())
			r.m.retry(Infrastructure, code.Name)
			ev := r.logFor(it).Warn()
			if !isInfrastructure(err) {
				ev = r.logFor(it).Error() // not a known outage: may be a bug
			}
			ev.Err(err).Dur("retry_in", d).Int("attempts", it.attempts).Msg("retry-infrastructure")
			if !w.sleep(d) {
				return false
			}
			continue
		}
		switch code.Class {
		case RetryNow:
			if retried < r.svc.retryNow() {
				retried++
				r.m.retry(RetryNow, code.Name)
				r.logFor(it).Info().Str("code", code.Name).Err(err).Int("attempts", it.attempts).Msg("retry-now")
				continue
			}
		case RetryLater:
			if r.svc.Blocking {
				if n := it.attempts - 1; n < len(code.Backoff) {
					r.m.retry(RetryLater, code.Name)
					if !w.sleep(r.cfg.scale(code.Backoff[n])) {
						return false
					}
					continue
				}
				break
			}
			if len(code.Backoff) > 0 {
				return w.park(it, code, err)
			}
		}
		return w.deadLetter(it, code, err, it.attempts)
	}
}

// finish ends a message that reached a final state: after-commit hooks,
// metrics, the outcome log line, the span.
func (w *worker) finish(it *item, err error) {
	w.r.finish(it, err)
}

func (r *Runtime) finish(it *item, err error) {
	if it.st != nil {
		for _, fn := range it.st.afterCommit {
			fn()
		}
	}
	eventType := ""
	if it.msg != nil {
		eventType = it.msg.EventType
		r.m.eventTime(it.msg.CreatedAt)
	}
	d := time.Since(it.start)
	r.m.finished(eventType, it.outcome, d)
	ev := r.logFor(it).Info()
	if err != nil {
		ev = r.logFor(it).Error().Err(err)
		if c, ok := CodeOf(err); ok {
			ev = ev.Str("code", c.Name)
		}
		it.span.SetStatus(codes.Error, err.Error())
	}
	if it.st != nil {
		for _, f := range it.st.fields {
			f(ev)
		}
	}
	ev.Str("outcome", string(it.outcome)).Int("attempts", it.attempts).
		Float64("duration_ms", float64(d)/float64(time.Millisecond)).Msg(string(it.outcome))
	it.span.SetAttributes(attribute.String("pin.outcome", string(it.outcome)))
	it.span.End()
}

// deadLetter publishes the message to the DLQ, waits for the broker's
// acknowledgement and acknowledges the source offset. A failed publish is
// an infrastructure error: retried with backoff, never skipped.
func (w *worker) deadLetter(it *item, code Code, cause error, attempts int) bool {
	r := w.r
	infra := newInfraBackoff()
	for {
		err := r.dlq.send(w.ctx, it.km, code, cause.Error(), attempts)
		if err == nil {
			break
		}
		if w.ctx.Err() != nil {
			return false
		}
		d := r.cfg.scale(infra.NextBackOff())
		r.m.retry(Infrastructure, "DLQ_PUBLISH")
		r.logFor(it).Warn().Err(err).Dur("retry_in", d).Msg("dlq publish failed")
		if !w.sleep(d) {
			return false
		}
	}
	r.m.deadLettered(code.Name)
	it.outcome = DeadLettered
	it.attempts = attempts
	it.dropHooks() // the attempt rolled back: keep its log fields, not its hooks
	if _, ok := CodeOf(cause); !ok {
		cause = code.Wrap(cause)
	}
	r.finish(it, cause)
	w.ack(it.km.TopicPartition.Offset)
	return true
}

func newInfraBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = time.Second
	b.MaxInterval = 60 * time.Second
	b.Multiplier = 2
	b.RandomizationFactor = 0.2
	b.Reset()
	return b
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
