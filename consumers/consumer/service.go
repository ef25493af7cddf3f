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
	Routes      []Route

	// RetryNow is how many times a RetryNow failure is re-run before the
	// DLQ (the specs say 3). Zero means 3.
	RetryNow int
	// Blocking keeps RetryLater waits in line: the partition waits instead
	// of parking the message. For consumers whose per-key order matters.
	Blocking bool

	// Prepare, when set, runs first in every transaction of messages (a
	// batch, a shared run, a message alone, a re-drive, a probe) with the
	// messages about to be handled in offset order (a MessageId met twice
	// once). It reads, and locks in key order, the rows they touch, one
	// statement per table, and returns the context the handlers run under,
	// carrying that view; the handlers decide on it and queue their
	// writes, which it registers with BeforeCommit to write set-based.
	// The marks go in last, so a redelivered message may be among the
	// messages: its handler runs on the state it left, and the transaction
	// runs again without it. It must skip messages it cannot read (their
	// handlers report them). Its error fails the transaction; one made
	// with FailMessage is that message's failure.
	Prepare func(ctx context.Context, tx *ent.Tx, msgs []*Message) (context.Context, error)

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
	// CreatedAt of the last message processed.
	LagSource func(ctx context.Context, client *ent.Client) (time.Time, bool, error)
}

func (s Service) route(eventType string) (Route, bool) {
	for _, r := range s.Routes {
		if r.EventType == eventType {
			return r, true
		}
	}
	return Route{}, false
}

func (s Service) retryNow() int {
	if s.RetryNow > 0 {
		return s.RetryNow
	}
	return 3
}
