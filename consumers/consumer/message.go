package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/ent"
)

// Message is what a handler sees: the decoded envelope and where it came
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
}

// NewMessage is the Message the runtime hands a service's handlers for env:
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

// Handler is a service's business logic for one event type. ctx carries a
// zerolog logger with the message's fields (zerolog.Ctx(ctx)) and its span.
// It runs inside tx, which also receives the message's idempotency mark; it must not commit
// or roll back tx. It may be called more than once for the same message
// (retries, batch fallback): every effect outside tx belongs in AfterCommit.
type Handler func(ctx context.Context, tx *ent.Tx, m *Message) (Outcome, error)

// Route binds an EventType to its handler and idempotency key prefix: the
// mark of message M is KeyPrefix + M.MessageId (e.g. "rewards:bond-created:").
type Route struct {
	EventType string
	KeyPrefix string
	Handle    Handler
}

// state is per attempt: what a handler registered to run after commit and
// the fields it wants on the message's log line.
type state struct {
	afterCommit []func()
	fields      []func(*zerolog.Event)
}

type stateKey struct{}

func withState(ctx context.Context, s *state) context.Context {
	return context.WithValue(ctx, stateKey{}, s)
}

// AfterCommit registers fn to run once the attempt's transaction has
// committed (metrics, in-process domain events). It is dropped when the
// attempt rolls back.
func AfterCommit(ctx context.Context, fn func()) {
	if s, ok := ctx.Value(stateKey{}).(*state); ok {
		s.afterCommit = append(s.afterCommit, fn)
	}
}

// LogFields adds fields to the message's outcome log line (BondId, LeadId,
// …). Like AfterCommit, it belongs to the attempt.
func LogFields(ctx context.Context, fn func(*zerolog.Event)) {
	if s, ok := ctx.Value(stateKey{}).(*state); ok {
		s.fields = append(s.fields, fn)
	}
}

// batch is one multi-message transaction's: what its Service.Prepare
// registered to run before the commit.
type batch struct {
	beforeCommit []func(context.Context) error
}

type batchKey struct{}

// BeforeCommit registers fn to run in the batch's transaction after its
// last handler and before its marks are inserted and it commits: a
// Service.Prepare uses it to write what the batch's handlers queued with
// set-based statements. An error rolls the transaction back: one that
// names a message (FailMessage) is that message's first attempt, a lost
// race (a deadlock, a unique key taken since Prepare read) runs the
// transaction again at once, and any other splits it into smaller
// transactions, each through Prepare again. It reports false, and does
// nothing, when ctx is not the one the runtime handed Prepare.
func BeforeCommit(ctx context.Context, fn func(context.Context) error) bool {
	b, ok := ctx.Value(batchKey{}).(*batch)
	if ok {
		b.beforeCommit = append(b.beforeCommit, fn)
	}
	return ok
}

// messageFailure is a BeforeCommit failure that belongs to one message.
type messageFailure struct {
	msg *Message
	err error
}

func (f *messageFailure) Error() string { return f.err.Error() }
func (f *messageFailure) Unwrap() error { return f.err }

// FailMessage attributes a Prepare or BeforeCommit failure to m, one
// message of the transaction: it is then handled as if m's handler had
// returned err — m goes on alone with this failure counted as its first
// attempt (a MSG_CONCURRENT_UPDATE is re-run, an invalid message
// dead-lettered), the messages before it run again, the rest after it. A
// hook's error that names no message runs the messages again in smaller
// transactions, down to one message each, where every failure is judged on
// its own (one that every message meets holds the partition).
func FailMessage(m *Message, err error) error {
	if err == nil {
		err = errors.New("failed without a reason")
	}
	return &messageFailure{msg: m, err: err}
}
