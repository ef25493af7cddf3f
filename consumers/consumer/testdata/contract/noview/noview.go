// Package noview is a route written without its view, deciding on a
// transaction instead: it must not type-check
// (TestARouteWithoutItsViewDoesNotTypeCheck).
package noview

import (
	"context"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

type view struct{ seen int }

func read(context.Context, *ent.Tx, []*consumer.Message) (*view, error) { return &view{}, nil }

func decideOnTx(_ context.Context, _ *ent.Tx, _ *consumer.Message) (consumer.Outcome, error) {
	return consumer.Applied, nil
}

// Handlers is the contract.
var Handlers = consumer.Batched[*view]{
	Read:   read,
	Routes: []consumer.Route[*view]{{EventType: "toy.event", KeyPrefix: "toy:", Decide: decideOnTx}},
}
