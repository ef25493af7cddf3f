package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// finish ends a message that reached a final state: after-commit hooks,
// metrics, the outcome log line, the span.
func (r *Runtime) finish(it *item, err error) {
	if it.st != nil {
		for _, fn := range it.st.afterCommit {
			r.runHook(it, fn)
		}
	}
	eventType := UnknownEventType // a label from a closed set, never the producer's text
	if it.routed {
		eventType = it.route.EventType
	}
	if it.msg != nil && it.msg.Problem() == nil {
		r.m.eventTime(it.msg.CreatedAt)
	}
	d := time.Since(it.start)
	r.m.finished(eventType, it.outcome, d)
	var ev *zerolog.Event
	switch {
	case it.outcome == DeadLettered:
		ev = r.logFor(it).Error().Err(err)
		it.span.SetStatus(codes.Error, r.redact(err.Error()))
	case it.outcome == SkippedUnknownEventType:
		ev = r.logFor(it).Warn()
		if it.msg.eventTypeJSON != nil { // its EventType field holds the JSON text
			ev = ev.Str("reason", "EventType is not a JSON string")
		}
	case err != nil: // parked: the reason it waits
		ev = r.logFor(it).Info().Str("reason", err.Error())
	default:
		ev = r.logFor(it).Info()
	}
	if c, ok := CodeOf(err); ok {
		ev = ev.Str("code", c.Name)
	}
	r.describe(it, ev)
	ev.Str("outcome", string(it.outcome)).Int("attempts", it.attempts).
		Float64("duration_ms", float64(d)/float64(time.Millisecond)).Msg(string(it.outcome))
	it.span.SetAttributes(attribute.String("pin.outcome", string(it.outcome)))
	it.span.End()
}

// describe adds the spec's fields of the message to its outcome line: its
// handler's (Message.LogFields) or, when the handler did not run or said
// nothing, the service's Describe. It runs after the commit or the dead
// letter and before the offset is stored, so a panic in the service's code
// is logged, not allowed to take the process down there: the message would
// come back, be applied or dead-lettered again, and crash again.
func (r *Runtime) describe(it *item, ev *zerolog.Event) {
	defer func() {
		if p := recover(); p != nil {
			r.logFor(it).Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("the outcome line's fields panicked")
		}
	}()
	switch {
	case it.st != nil && len(it.st.fields) > 0:
		for _, f := range it.st.fields {
			f(ev)
		}
	case it.msg != nil && it.routed && r.svc.Describe != nil:
		// Its handler did not run (a duplicate caught by its mark, a
		// message refused before it) or said nothing: the spec's fields
		// from the payload, and the database where they live there.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if f := r.svc.Describe(ctx, r.client, it.msg); f != nil {
			f(ev)
		}
	}
}

// runHook runs an after-commit hook; a panicking hook is logged, not
// allowed to take the process down between the commit and the offset.
// Hooks run at most once: a crash after the commit loses them.
func (r *Runtime) runHook(it *item, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			r.logFor(it).Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("after-commit hook panicked")
		}
	}()
	fn()
}

// deadLetter publishes the message to the DLQ, waits for the broker's
// acknowledgement and acknowledges the source offset. A failed publish is
// an infrastructure error: retried with backoff, never skipped.
func (w *worker) deadLetter(it *item, code Code, cause error, attempts int) bool {
	r := w.r
	if _, ok := w.persist(it, "dlq publish", "DLQ_PUBLISH", "kafka", func() error {
		return r.dlq.send(w.ctx, it.km, code, r.redact(cause.Error()), attempts)
	}, nil); !ok {
		return false
	}
	w.release()
	r.m.deadLettered(code.Name)
	it.attempts = attempts
	r.ended(it, DeadLettered, code, cause)
	w.ack(it.km.TopicPartition.Offset)
	return true
}

// persist runs fn (a dead letter's publish, a park's insert) until it
// succeeds, or final says that its failure ends the waiting (returned as
// err). Meanwhile the partition is held on the failure — the world's,
// cause when the runtime knows no better — with the infrastructure
// backoff. ok is false when the worker is stopping.
func (w *worker) persist(it *item, what, code, cause string, fn func() error, final func(error) bool) (err error, ok bool) {
	r := w.r
	infra := newInfraBackoff()
	for {
		if err = fn(); err == nil || (final != nil && final(err)) {
			return err, true
		}
		if w.ctx.Err() != nil {
			return err, false
		}
		d := r.cfg.scale(infra.NextBackOff())
		r.m.retry(Infrastructure, code)
		held := infraCause(err)
		if held == "" {
			held = cause
		}
		if slices.Contains(InfrastructureCauses, held) {
			r.m.infra(held)
		}
		w.hold(held, err) // /readyz names it while the partition waits
		r.logFor(it).Warn().Err(err).Dur("retry_in", d).Msg(what + " failed")
		if !w.sleep(d) {
			return err, false
		}
	}
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
