package rewards

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
)

// Topic, group and DLQ of the consumer (docs/contract.md §3).
const (
	Topic    = "pin.referral.bonds.v1"
	Group    = "pin-rewards-referral-bonds"
	DLQTopic = "pin.rewards.referral-bonds-dlq.v1"

	// ContractVersion of both event types.
	ContractVersion = 1
)

// EventType values of the topic (docs/contract.md §4).
const (
	EventTypeBondCreated = "pin.referral.bond-created"
	EventTypeBondClosed  = "pin.referral.bond-closed"
)

// Idempotency key prefixes: the mark of message M is prefix + M.MessageId.
const (
	KeyPrefixBondCreated = "rewards:bond-created:"
	KeyPrefixBondClosed  = "rewards:bond-closed:"
)

// The spec's error codes.
var (
	// CodeInvalid: the payload violates the contract (a required member
	// missing or empty, Version < 1, a closed whose ReferredUserId differs
	// from the row's) or a bond-created would re-open a closed bond
	// (BND-4). Dead-lettered at once.
	CodeInvalid = consumer.Code{Name: "REWARDS_BOND_EVENT_INVALID", Class: consumer.Invalid}
	// CodeActiveConflict: a bond-created whose referred user already has
	// another Active bond (BND-3, the partial unique index).
	// Dead-lettered at once: fail closed.
	CodeActiveConflict = consumer.Code{Name: "REWARDS_BOND_REPLICA_ACTIVE_CONFLICT", Class: consumer.Invalid}
	// CodeOrphanClosed: a bond-closed for a bond the replica does not hold.
	// Re-read immediately (Service.RetryNow times, each in a fresh
	// transaction), then dead-lettered; operators replay the topic from
	// offset 0.
	CodeOrphanClosed = consumer.Code{Name: "REWARDS_BOND_EVENT_ORPHAN_CLOSED", Class: consumer.RetryNow}
)

// Outcomes of this consumer, by log name (processed_messages.outcome).
// Skips by the version guard use consumer.SkippedStale ("skipped-stale").
const (
	OutcomeCreated              consumer.Outcome = "created"
	OutcomeUpdated              consumer.Outcome = "updated"
	OutcomeClosed               consumer.Outcome = "closed"
	OutcomeSkippedAlreadyClosed consumer.Outcome = "skipped-already-closed"
)

// New is the Referral Bond Sync consumer (group pin-rewards-referral-bonds):
// it keeps referral_bond_replicas in step with the referral service. Its
// own metrics are registered on reg.
func New(reg prometheus.Registerer) consumer.Service {
	h := &handler{m: newMetrics(reg), lag: newSyncedLag()}
	return consumer.Service{
		Name:            "rewards",
		Topic:           Topic,
		Group:           Group,
		DLQTopic:        DLQTopic,
		ContractVersion: ContractVersion,
		InvalidCode:     CodeInvalid,
		Codes:           []consumer.Code{CodeInvalid, CodeActiveConflict, CodeOrphanClosed},
		Outcomes: []consumer.Outcome{OutcomeCreated, OutcomeUpdated, OutcomeClosed, OutcomeSkippedAlreadyClosed,
			consumer.SkippedStale},
		Handlers: consumer.Batched[*view]{
			Read: read,
			Routes: []consumer.Route[*view]{
				{EventType: EventTypeBondCreated, KeyPrefix: KeyPrefixBondCreated, Decide: h.bondCreated},
				{EventType: EventTypeBondClosed, KeyPrefix: KeyPrefixBondClosed, Decide: h.bondClosed},
			},
			Write: write,
		},
		RetryNow: 3,
		Describe: describe,
		// Per-key order matters (closed before created on a rebind): no
		// message may overtake another of its partition.
		Blocking: true,
		Metrics: consumer.SpecMetrics{
			DurationMs:       MetricConsumeDurationMs,
			DLQ:              MetricDLQ,
			ContractMismatch: MetricContractMismatch,
			Lag:              MetricLagSeconds,
			LagSource:        h.lag.source,
		},
		Gauges: []consumer.PeriodicGauge{bondReplicas()},
	}
}
