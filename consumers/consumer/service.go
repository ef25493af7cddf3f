package consumer

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/ent"
)

// Service describes one consumer: its topic, group and DLQ (docs/contract.md §3),
// its routes, its spec's error codes and the names of its spec's metrics.
type Service struct {
	Name     string // short name: metric label and log field ("rewards")
	Topic    string
	Group    string
	DLQTopic string

	// Codes are the error codes of the service's spec, its InvalidCode
	// among them: the DLQ, retry and parked counters are exported at 0 for
	// each from the start, so that an alert on increase() sees the first.
	Codes []Code
	// Outcomes are the outcomes the service's handlers return (created,
	// synced, skipped-stale, …): pin_consumer_messages_total is exported at
	// 0 for each route and outcome from the start, with the runtime's own.
	Outcomes []Outcome

	// ContractVersion is the envelope version the handlers expect; another
	// value is logged and counted, then processed.
	ContractVersion int
	// InvalidCode is the service's own code for a readable envelope with a
	// bad payload (REWARDS_BOND_EVENT_INVALID, …).
	InvalidCode Code
	// Handlers is what the service does with its messages: its Read, its
	// routes and its Write (a Batched).
	Handlers Handlers

	// RetryNow is how many times a RetryNow failure is re-run before the
	// DLQ (the specs say 3). Zero means 3.
	RetryNow int
	// Blocking keeps RetryLater waits in line: the partition waits instead
	// of parking the message. For consumers whose per-key order matters.
	Blocking bool
	// EagerLanes opens a lane beyond the first (CONSUMER_TRANSACTIONS) for
	// any run that finds the others busy. Without it they open only while
	// a backlog waits (scheduler.go): at a partial load the runs then go
	// together into fewer, larger transactions, which cost less per
	// event. For a service whose transactions are long for their events,
	// a partial load keeps one lane busy and its runs wait behind it
	// (messenger: bench/README.md, session 25).
	EagerLanes bool

	// Describe, when set, gives the fields the spec's log lines carry for a
	// message whose handler did not run or registered none (a duplicate
	// caught by its mark, a message refused before its handler): from its
	// payload, and from the database where the spec's fields live there.
	// A field it cannot read is left out; it never fails.
	Describe func(ctx context.Context, client *ent.Client, m *Message) func(*zerolog.Event)

	Metrics SpecMetrics
	// Gauges are computed from the database on a schedule of their own,
	// beside the messages (PeriodicGauge).
	Gauges []PeriodicGauge
}

// SpecMetrics names the spec's own metric families that the runtime feeds.
// Empty names are not exported. Handler-specific counters (stale events,
// unknown statuses, …) are registered and fed by the service itself.
type SpecMetrics struct {
	DurationMs       string // histogram of consume duration, milliseconds
	DLQ              string // counter of dead-lettered messages, label "code"
	ContractMismatch string // counter of envelopes with another ContractVersion
	Duplicates       string // counter of skipped duplicates
	Retries          string // counter of retries, labels "class", "code"
	Lag              string // gauge, seconds; see LagSource
	// LagSource gives the event time the lag is measured from. Nil: the
	// CreatedAt of the last message processed. It runs on every scrape of
	// /metrics, under a 2 s timeout (past which the gauge reads 0): it must
	// answer from memory, not scan a table (rewards' reads its table once,
	// then follows its own writes).
	LagSource func(ctx context.Context, client *ent.Client) (time.Time, bool, error)
}

// Routes are the service's routes, without their decisions: the event
// types it handles and their idempotency key prefixes.
func (s Service) Routes() []RouteInfo {
	if s.Handlers == nil {
		return nil
	}
	return s.Handlers.routes()
}

func (s Service) retryNow() int {
	if s.RetryNow > 0 {
		return s.RetryNow
	}
	return 3
}
