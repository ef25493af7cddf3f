package messenger

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
)

// Topics, group and event type of the consumer (docs/contract.md §3).
const (
	Topic     = "pin.crm.lead-participants-changed.v1"
	Group     = "messenger-lead-participants-changed"
	DLQTopic  = "pin.messenger.lead-participants-changed-dlq.v1"
	EventType = "pin.crm.lead-participants-changed"
	// KeyPrefix is the idempotency key prefix: the mark of message M is
	// "messenger-lead-participants:" + M.MessageId.
	KeyPrefix = "messenger-lead-participants:"
)

// The spec's error codes.
var (
	// CodeInvalid: a readable envelope with a missing or broken payload
	// (empty ActiveParticipants, a member without UserId, Version < 1, …).
	// DLQ at once, alert.
	CodeInvalid = consumer.Code{Name: "MSG_LEAD_PARTICIPANTS_INVALID", Class: consumer.Invalid}
	// CodeChatNotProvisioned: the lead's chat does not exist yet. The
	// message is parked and retried 10 times on this schedule (times
	// RETRY_TIME_SCALE) without holding its partition, then dead-lettered:
	// 11 attempts in all.
	CodeChatNotProvisioned = consumer.Code{Name: "MSG_CHAT_NOT_PROVISIONED", Class: consumer.RetryLater,
		Backoff: seconds(1, 2, 4, 8, 16, 32, 60, 60, 60, 60)}
	// CodeConcurrentUpdate: the chat row moved between the read and the
	// write (optimistic lock on chats.row_version). Re-run at once in a
	// fresh transaction, 3 times, then dead-lettered.
	CodeConcurrentUpdate = consumer.Code{Name: "MSG_CONCURRENT_UPDATE", Class: consumer.RetryNow}
)

// Outcomes of the handler besides the runtime's (log names, stored in
// processed_messages.outcome).
const (
	// Synced: the snapshot is applied (membership changed, or only
	// lead_member_version moved).
	Synced consumer.Outcome = "synced"
	// SkippedStale: Version ≤ chats.lead_member_version; nothing changed.
	SkippedStale = consumer.SkippedStale
)

// New builds the messenger's Lead Chat Participants Sync consumer
// (MessengerLeadParticipantsChangedConsumer) and registers its own metrics
// on reg.
func New(reg prometheus.Registerer) consumer.Service {
	h := &handler{m: newMetrics(reg)}
	return consumer.Service{
		Name:            "messenger",
		Topic:           Topic,
		Group:           Group,
		DLQTopic:        DLQTopic,
		ContractVersion: 1,
		InvalidCode:     CodeInvalid,
		Codes:           []consumer.Code{CodeInvalid, CodeChatNotProvisioned, CodeConcurrentUpdate},
		Outcomes:        []consumer.Outcome{Synced, SkippedStale},
		Handlers: consumer.Batched[*view]{
			Read:   read,
			Routes: []consumer.Route[*view]{{EventType: EventType, KeyPrefix: KeyPrefix, Decide: h.handle}},
			Write:  write,
		},
		RetryNow: 3,
		Describe: describe,
		// Not blocking: each payload is a self-sufficient snapshot guarded
		// by Version, so a message waiting for its chat may be applied out
		// of line (a later one for the same lead then wins and the waiting
		// one becomes stale), and waiting must not stall other leads.
		Blocking: false,
		// Its transactions are long for their events (a chat's members
		// read and rewritten): at half load one lane was busy nearly all
		// the time, and the runs that waited behind it doubled the p99
		// (bench/README.md, session 25).
		EagerLanes: true,
		Metrics: consumer.SpecMetrics{
			DurationMs:       "messenger_lead_participants_consume_duration_ms",
			DLQ:              "messenger_lead_participants_dlq_total",
			ContractMismatch: "messenger_lead_participants_contract_mismatch_total",
			Lag:              "messenger_lead_participants_lag_seconds",
		},
	}
}

func seconds(ss ...int) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(s) * time.Second
	}
	return out
}
