package consumer

import (
	"time"
)

// Message is what a route sees: the decoded envelope and where it came
// from.
type Message struct {
	Envelope
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte

	invalid Code          // the service's invalid code, for DecodePayload
	maxSkew time.Duration // MAX_CLOCK_SKEW, for CheckTime
	decoded any           // the last DecodePayload's result (*decoded[P])
	attempt *state        // the attempt running now: AfterCommit, LogFields
}

// NewMessage is the Message the runtime hands a service's routes for env:
// DecodePayload, Invalid and CheckTime report with invalid (the service's
// InvalidCode), and CheckTime refuses a time more than maxSkew ahead (no
// limit when maxSkew ≤ 0). The runtime then sets where the message came
// from (Topic, Partition, Offset, Key). Tests and fuzz targets use it to run
// a service's decoding as the runtime does.
func NewMessage(env Envelope, invalid Code, maxSkew time.Duration) *Message {
	return &Message{Envelope: env, invalid: invalid, maxSkew: maxSkew}
}

// Outcome is the result of a handled message, by its log name. The name is
// stored in processed_messages.outcome and used as a metric label.
type Outcome string

// Outcomes the runtime itself reports. Services add their own (created,
// synced, attached, …).
const (
	Applied                 Outcome = "applied"
	SkippedDuplicate        Outcome = "skipped-duplicate"
	SkippedStale            Outcome = "skipped-stale"
	SkippedUnknownEventType Outcome = "skipped-unknown-event-type"
	Parked                  Outcome = "parked"
	DeadLettered            Outcome = "dead-lettered"
)
