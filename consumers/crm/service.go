package crm

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
)

// Topic, group, DLQ and event type of the consumer (docs/contract.md §3).
const (
	Topic     = "pin.selections.selection-shared.v1"
	Group     = "crm-selections"
	DLQTopic  = "pin.crm.selections-dlq.v1"
	EventType = "pin.selections.selection-shared"
	// KeyPrefix is the idempotency key prefix: the mark of message M is
	// "crm:selection-shared:" + M.MessageId.
	KeyPrefix = "crm:selection-shared:"
	// ContractVersion is the envelope version expected; another one is
	// logged and counted, then processed.
	ContractVersion = 1
)

// The spec's error codes.
var (
	// CodeEventInvalid: a readable envelope whose payload is missing, not
	// an object, or breaks the spec's table (a required member missing, a
	// GUID that does not parse, an empty title, a negative count, …).
	// DLQ at once, never retried.
	CodeEventInvalid = consumer.Code{Name: "CRM_SELECTION_EVENT_INVALID", Class: consumer.Invalid}
	// CodeUnknownAction: Action is not a SelectionShareAction. DLQ at once
	// and alert (crm_selection_shared_dlq_total{code=…}): the mapping needs
	// a release, then a replay from the DLQ.
	CodeUnknownAction = consumer.Code{Name: "CRM_SELECTION_UNKNOWN_ACTION", Class: consumer.Invalid}
	// CodeLeadNotFound: no Active lead for the pair (out of order against
	// the lead's creation or renewal). Parked and retried after 30 s, 1, 2,
	// 4, 8 and 16 min (times RETRY_TIME_SCALE) without holding the
	// partition: 7 attempts, then the DLQ; operators replay it from there
	// once the lead exists.
	CodeLeadNotFound = consumer.Code{Name: "CRM_SELECTION_LEAD_NOT_FOUND", Class: consumer.RetryLater,
		Backoff: leadBackoff()}
	// CodeLeadNotActive: the lead left Active between its resolution and the
	// write (CRM-1); nothing is appended. Handled like
	// CodeLeadNotFound (clarified): the same schedule; the next attempt
	// resolves the pair's Active lead afresh.
	CodeLeadNotActive = consumer.Code{Name: "CRM_LEAD_NOT_ACTIVE", Class: consumer.RetryLater,
		Backoff: leadBackoff()}
	// CodeConcurrentUpdate: the lead changed its tenant or pair between
	// its resolution and the writer's lock, or its row_version moved
	// under the lock. Re-run at once in a fresh transaction 3 times (4
	// attempts), then the DLQ.
	CodeConcurrentUpdate = consumer.Code{Name: "CRM_CONCURRENT_UPDATE", Class: consumer.RetryNow}
)

// leadBackoff is the retry-later schedule of a missing lead: 30 s → 16 min.
func leadBackoff() []time.Duration {
	return []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute}
}

// Outcomes of the handler besides the runtime's (log names, stored in
// processed_messages.outcome).
const (
	// Attached: a SelectionAttached entry was appended (Action Shared).
	Attached consumer.Outcome = "attached"
	// Viewed: a SelectionViewed entry was appended (Action Opened).
	Viewed consumer.Outcome = "viewed"
	// SkippedDuplicate: the message was seen already, by its idempotency
	// key (the runtime) or by an existing feed entry with its
	// source_message_id (the handler).
	SkippedDuplicate = consumer.SkippedDuplicate
)

// Options are the service's collaborators. The zero value is the
// production default.
type Options struct {
	// Publisher receives LeadEventAdded after commit. Nil: LogPublisher.
	Publisher Publisher
	// Now is the clock of created_at / updated_at. Nil: time.Now.
	Now func() time.Time
}

// New builds the CRM's Selection Shared consumer (SelectionSharedConsumer)
// with the default options and registers its own metrics on reg.
func New(reg prometheus.Registerer) consumer.Service { return Options{}.New(reg) }

// New builds the consumer with o; its method value fits consumer.Main and
// consumertest.Start.
func (o Options) New(reg prometheus.Registerer) consumer.Service {
	h := &handler{m: newMetrics(reg), pub: o.Publisher, now: o.Now}
	if h.pub == nil {
		h.pub = LogPublisher
	}
	if h.now == nil {
		h.now = time.Now
	}
	return consumer.Service{
		Name:            "crm",
		Topic:           Topic,
		Group:           Group,
		DLQTopic:        DLQTopic,
		ContractVersion: ContractVersion,
		InvalidCode:     CodeEventInvalid,
		Codes:           []consumer.Code{CodeEventInvalid, CodeUnknownAction, CodeLeadNotFound, CodeLeadNotActive, CodeConcurrentUpdate},
		Outcomes:        []consumer.Outcome{Attached, Viewed},
		Handlers: consumer.Batched[*view]{
			Read:   read,
			Routes: []consumer.Route[*view]{{EventType: EventType, KeyPrefix: KeyPrefix, Decide: h.handle}},
			Write:  write,
		},
		RetryNow: 3,
		Describe: describe,
		// Not Blocking: the feed is append-only and idempotent, so an event
		// waiting for its lead is parked and must not stall its partition.
		Blocking: false,
		Metrics: consumer.SpecMetrics{
			DurationMs:       MetricConsumeDuration,
			DLQ:              MetricDLQ,
			ContractMismatch: MetricContractMismatch,
			Duplicates:       MetricDuplicates,
			Retries:          MetricRetries,
			Lag:              MetricLag,
			// Nil: now − CreatedAt of the newest envelope processed, as
			// the spec defines it.
			LagSource: nil,
		},
	}
}
