package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// With tracing off (the no-op provider main uses without an OTLP
// endpoint) an attempt starts no spans, and its handler's context still
// carries the message's trace context, the traceparent of its headers;
// with a tracer that records, the attempt's spans are started, and the
// handler runs under the handle span.
func TestAttemptSpansOnlyWhenTracing(t *testing.T) {
	svc := lifecycleService()
	km := lifecycleMessage(svc.Topic)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736" // lifecycleMessage's traceparent

	off, err := New(Config{}, svc, nil, nil, Options{Registry: prometheus.NewRegistry(), TracerProvider: noop.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	it := off.prepare(km, time.Now())
	if !off.tracingOff || off.startAttempt(it, trace.SpanContext{}, 1) != nil || it.attempt != nil {
		t.Fatalf("tracing off: %v, attempt %+v", off.tracingOff, it.attempt)
	}
	if sc := trace.SpanContextFromContext(handlerContext(context.Background(), it)); sc.TraceID().String() != traceID {
		t.Fatalf("tracing off, the handler's trace %s, want the message's %s", sc.TraceID(), traceID)
	}
	off.endAttempt(it, nil) // no spans: nothing to end

	rec := tracetest.NewSpanRecorder()
	on, err := New(Config{}, svc, nil, nil, Options{Registry: prometheus.NewRegistry(), TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	it = on.prepare(km, time.Now())
	a := on.startAttempt(it, trace.SpanContext{}, 1)
	if on.tracingOff || a == nil || it.attempt != a {
		t.Fatalf("tracing on: off %v, attempt %+v", on.tracingOff, it.attempt)
	}
	if sc := trace.SpanContextFromContext(handlerContext(context.Background(), it)); sc.SpanID() != a.handler.SpanContext().SpanID() || sc.TraceID().String() != traceID {
		t.Fatalf("tracing on, the handler's span %v, want the handle span %v in trace %s", sc, a.handler.SpanContext(), traceID)
	}
	on.endAttempt(it, nil)
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	if len(names) != 2 || names[0] != "db.transaction" || names[1] != "handle pin.referral.bond-created" {
		t.Fatalf("ended spans %v, want the attempt's db.transaction and handle", names)
	}
}
