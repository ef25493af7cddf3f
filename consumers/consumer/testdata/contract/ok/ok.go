// Package ok is a route written with its view: it type-checks
// (TestARouteWithoutItsViewDoesNotTypeCheck builds it beside noview).
package ok

import (
	"context"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

type view struct{ seen int }

func read(context.Context, *ent.Tx, []*consumer.Message) (*view, error) { return &view{}, nil }

func decide(_ context.Context, v *view, _ *consumer.Message) (consumer.Outcome, error) {
	v.seen++
	return consumer.Applied, nil
}

// Handlers is the contract.
var Handlers = consumer.Batched[*view]{
	Read:   read,
	Routes: []consumer.Route[*view]{{EventType: "toy.event", KeyPrefix: "toy:", Decide: decide}},
}
