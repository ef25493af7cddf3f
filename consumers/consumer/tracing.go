package consumer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The spans of a message: one trace per message, continuing the W3C
// traceparent of its headers (receive → processing → storage, as the specs
// ask):
//
//	process <topic>          consume span, from the hand-over to the final state
//	└ handle <EventType>     one per attempt: the handler and its storage
//	  └ db.transaction       the transaction the attempt ran in
//
// A transaction shared by several messages (a batch, a shared transaction)
// also has a span of its own, db.batch, a trace of its own linked to every
// message's consume span; each message's db.transaction then links to it.

// attemptSpans are the spans of one attempt of a message.
type attemptSpans struct {
	handler trace.Span
	db      trace.Span
}

// startAttempt starts the spans of an attempt of it; batch, when valid, is
// the span of the transaction the attempt shares.
//
// With tracing off it starts none: the no-op tracer's spans would carry
// the consume span's context forward unchanged, which handlerContext does
// without them, and building them (the name, the options, two contexts)
// was 4 % of rewards' CPU under a backlog, in the lane, before its BEGIN.
func (r *Runtime) startAttempt(it *item, batch trace.SpanContext, size int) *attemptSpans {
	if r.tracingOff {
		return nil
	}
	name := "handle " + UnknownEventType
	if it.routed {
		name = "handle " + it.route.EventType
	}
	a := &attemptSpans{}
	ctx, handler := r.tracer.Start(trace.ContextWithSpan(it.ctx, it.span), name)
	opts := []trace.SpanStartOption{trace.WithAttributes(attribute.Int("pin.batch_size", size))}
	if batch.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: batch}))
	}
	_, a.db = r.tracer.Start(ctx, "db.transaction", opts...)
	a.handler = handler
	it.attempt = a
	return a
}

// end ends the attempt's spans; err is its failure (nil: committed).
func (r *Runtime) endAttempt(it *item, err error) {
	a := it.attempt
	if a == nil {
		return
	}
	it.attempt = nil
	if err != nil {
		msg := r.redact(err.Error())
		a.db.SetStatus(codes.Error, msg)
		a.handler.SetStatus(codes.Error, msg)
	}
	a.db.End()
	a.handler.End()
}

// handlerContext is the context a handler of it runs under: the attempt's
// handler span, or the consume span outside an attempt (a probe).
func handlerContext(ctx context.Context, it *item) context.Context {
	if it.attempt != nil {
		return trace.ContextWithSpan(ctx, it.attempt.handler)
	}
	return trace.ContextWithSpan(ctx, it.span)
}
