package rewards

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pin-platform/consumers/consumers/consumer"
	"github.com/pin-platform/consumers/ent"
)

const tracerName = "github.com/pin-platform/consumers/consumers/rewards"

// traced wraps a handler in a handler span, the child of the runtime's
// consume span (the spec's consume-span → handler-span). The span comes from
// the consume span's own provider, so it goes wherever the runtime's go.
func traced(name string, h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, tx *ent.Tx, m *consumer.Message) (consumer.Outcome, error) {
		ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, name)
		defer span.End()
		out, err := h(ctx, tx, m)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			return out, err
		}
		span.SetAttributes(attribute.String("pin.outcome", string(out)))
		return out, nil
	}
}
