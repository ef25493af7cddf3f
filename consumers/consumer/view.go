package consumer

import (
	"context"
	"errors"

	"github.com/pin-platform/pin/ent"
)

// The services' one write path: Prepare reads (and where needed locks)
// what a transaction's messages need into a view, the handlers decide on
// that view and queue their writes on it, and the view's flush writes them
// set-based before the marks and the commit. PrepareView builds such a
// Prepare; the handlers take the view with ViewOf.

// viewKey is the context key of a view of type V: one per type.
type viewKey[V any] struct{}

// PrepareView returns a Service.Prepare that reads the transaction's view
// with read, registers flush(view) with BeforeCommit and hands the view to
// the handlers. Outside a transaction of the runtime, where the flush
// would never run, it fails.
func PrepareView[V any](read func(context.Context, *ent.Tx, []*Message) (V, error),
	flush func(V, context.Context) error) func(context.Context, *ent.Tx, []*Message) (context.Context, error) {
	return func(ctx context.Context, tx *ent.Tx, msgs []*Message) (context.Context, error) {
		v, err := read(ctx, tx, msgs)
		if err != nil {
			return nil, err
		}
		if !BeforeCommit(ctx, func(ctx context.Context) error { return flush(v, ctx) }) {
			return nil, errors.New("prepare ran outside a transaction of the runtime")
		}
		return WithView(ctx, v), nil
	}
}

// WithView is ctx carrying the view v, as PrepareView hands it to the
// handlers (tests that run a handler on a view they read use it too).
func WithView[V any](ctx context.Context, v V) context.Context {
	return context.WithValue(ctx, viewKey[V]{}, v)
}

// ViewOf is the view of type V that Prepare handed the handlers. Without
// one the handler ran without its Prepare: a programming error, which
// writes nothing.
func ViewOf[V any](ctx context.Context) (V, error) {
	v, ok := ctx.Value(viewKey[V]{}).(V)
	if !ok {
		return v, errors.New("handler ran without its Prepare")
	}
	return v, nil
}
