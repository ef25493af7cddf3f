package consumertest

import (
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// MessageTrace is the tree of spans of one message's trace, as the runtime
// records it: the consume span, an attempt's handler span under it, and
// that attempt's storage span under the handler's.
type MessageTrace struct {
	Consume, Handler, DB sdktrace.ReadOnlySpan
	// Batch is the span of the shared transaction the storage span links
	// to (nil: the attempt had a transaction of its own).
	Batch sdktrace.ReadOnlySpan
}

// FindTrace looks among spans for the trace of the message whose
// traceparent named traceID and parentID and that topic's consumer
// processed, and checks its nesting: the consume span ("process <topic>",
// kind consumer) continues the traceparent; a committed attempt's "handle
// <EventType>" span is its child; a "db.transaction" span is the handler
// span's child; a storage span that links to a shared transaction links to
// a "db.batch" span that links back to the consume span. It returns the
// tree, or why it is not (yet) there.
func FindTrace(spans []sdktrace.ReadOnlySpan, topic, traceID, parentID string) (MessageTrace, error) {
	var mt MessageTrace
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
		if s.Name() == "process "+topic && s.SpanContext().TraceID().String() == traceID && s.Parent().SpanID().String() == parentID {
			mt.Consume = s
		}
	}
	if mt.Consume == nil {
		return mt, fmt.Errorf("no consume span continuing trace %s (parent %s)", traceID, parentID)
	}
	if k := mt.Consume.SpanKind(); k != trace.SpanKindConsumer {
		return mt, fmt.Errorf("consume span of kind %v, want consumer", k)
	}
	for _, s := range spans {
		if s.Parent().SpanID() == mt.Consume.SpanContext().SpanID() && strings.HasPrefix(s.Name(), "handle ") && s.Status().Code != codes.Error {
			mt.Handler = s
		}
	}
	if mt.Handler == nil {
		return mt, fmt.Errorf("no successful handler span under the consume span %s", mt.Consume.SpanContext().SpanID())
	}
	for _, s := range spans {
		if s.Parent().SpanID() == mt.Handler.SpanContext().SpanID() && s.Name() == "db.transaction" {
			mt.DB = s
		}
	}
	if mt.DB == nil {
		return mt, fmt.Errorf("no db.transaction span under the handler span %q", mt.Handler.Name())
	}
	if mt.DB.SpanContext().TraceID() != mt.Consume.SpanContext().TraceID() {
		return mt, fmt.Errorf("the db.transaction span is in another trace")
	}
	for _, l := range mt.DB.Links() {
		b, ok := byID[l.SpanContext.SpanID()]
		if !ok || b.Name() != "db.batch" {
			return mt, fmt.Errorf("db.transaction links to %v, not to a recorded db.batch span", l.SpanContext.SpanID())
		}
		back := false
		for _, bl := range b.Links() {
			back = back || bl.SpanContext.Equal(mt.Consume.SpanContext())
		}
		if !back {
			return mt, fmt.Errorf("the db.batch span does not link back to the message's consume span")
		}
		mt.Batch = b
	}
	return mt, nil
}
