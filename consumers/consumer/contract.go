package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/ent"
)

// Handlers is what a Service does with its messages, in Go types: a
// Batched. A route is given the view its transaction read and nothing else
// of the database: it cannot run without its view, and has no transaction
// to write through behind the Write's back.
type Handlers interface {
	check() error
	routes() []RouteInfo
	open(ctx context.Context, tx *ent.Tx, msgs []*Message) (opened, error)
}

// Batched is a service's contract: one Read per transaction, one Decide
// per message, one Write per transaction.
type Batched[V any] struct {
	// Read reads, and where needed locks in key order, what the
	// transaction's messages touch, one statement per table, and returns
	// the view the routes decide on. msgs are the messages about to be
	// decided, in offset order, a MessageId met twice once; a redelivered
	// message may be among them (its mark is found after the routes: its
	// route decides on the state it left, and the transaction runs again
	// without it).
	// Read skips the messages it cannot read: their routes report them.
	// Its error fails the transaction; one made with FailMessage is that
	// message's failure.
	Read func(ctx context.Context, tx *ent.Tx, msgs []*Message) (V, error)
	// Routes map each event type to its decision; a message of another
	// type is skipped (skipped-unknown-event-type).
	Routes []Route[V]
	// Write writes what the routes queued on the view, set-based, after
	// the last route, before the commit: a lock taken only here is held
	// the shortest (crm's leads). Its first statement inserts marks, when
	// not nil, before any row it writes or locks (Marks.Item, Marks.Gate);
	// a Write that writes nothing leaves them to the runtime. An error that
	// names a message (FailMessage) is that message's failure; a lost race
	// (a deadlock, a unique key taken since Read) runs the transaction
	// again at once; any other splits it into smaller transactions.
	Write func(ctx context.Context, tx *ent.Tx, v V, marks *Marks) error
}

// Route binds an event type to its decision and its idempotency key
// prefix: the mark of message M is KeyPrefix + M.MessageId
// ("rewards:bond-created:").
type Route[V any] struct {
	EventType string
	KeyPrefix string
	// Decide decides one message on the view its transaction read, and
	// queues its writes on the view. ctx carries a zerolog logger with the
	// message's fields (zerolog.Ctx) and its span. It may run more than
	// once for one message (retries, a split transaction, a probe): every
	// effect outside the database goes through m.AfterCommit.
	Decide func(ctx context.Context, v V, m *Message) (Outcome, error)
}

// RouteInfo is a route without its decision: what the runtime, the
// metrics and the tests know of it.
type RouteInfo struct {
	EventType string
	KeyPrefix string
}

// opened is one transaction's Read done: the routes decide on its view,
// then it is written.
type opened interface {
	decide(ctx context.Context, route int, m *Message) (Outcome, error)
	write(ctx context.Context, marks *Marks) error
}

func (b Batched[V]) routes() []RouteInfo {
	out := make([]RouteInfo, len(b.Routes))
	for i, r := range b.Routes {
		out[i] = RouteInfo{r.EventType, r.KeyPrefix}
	}
	return out
}

func (b Batched[V]) open(ctx context.Context, tx *ent.Tx, msgs []*Message) (opened, error) {
	v, err := b.Read(ctx, tx, msgs)
	if err != nil {
		return nil, err
	}
	return &batchedTx[V]{b: b, tx: tx, v: v}, nil
}

type batchedTx[V any] struct {
	b  Batched[V]
	tx *ent.Tx
	v  V
}

func (t *batchedTx[V]) decide(ctx context.Context, route int, m *Message) (Outcome, error) {
	return t.b.Routes[route].Decide(ctx, t.v, m)
}

func (t *batchedTx[V]) write(ctx context.Context, marks *Marks) error {
	if t.b.Write == nil {
		return nil
	}
	return t.b.Write(ctx, t.tx, t.v, marks)
}

// check reports a contract the runtime cannot run.
func (b Batched[V]) check() error {
	seen := map[string]bool{}
	for _, r := range b.Routes {
		if r.EventType == "" || r.KeyPrefix == "" || r.Decide == nil || seen[r.EventType] {
			return fmt.Errorf("consumer: route %q needs an EventType of its own, a KeyPrefix and a Decide", r.EventType)
		}
		seen[r.EventType] = true
	}
	if b.Read == nil || len(b.Routes) == 0 {
		return errors.New("consumer: Batched needs a Read and a route")
	}
	return nil
}

// state is one attempt of a message's: what its route registered to run
// after the commit and the fields it wants on the message's log line.
type state struct {
	afterCommit []func()
	fields      []func(*zerolog.Event)
}

// AfterCommit registers fn to run once the attempt's transaction has
// committed (metrics, in-process domain events). It is dropped when the
// attempt rolls back. Outside an attempt (a route called by a test on its
// own) fn is dropped.
func (m *Message) AfterCommit(fn func()) {
	if m.attempt != nil {
		m.attempt.afterCommit = append(m.attempt.afterCommit, fn)
	}
}

// LogFields adds fields to the message's outcome log line (BondId, LeadId,
// …). Like AfterCommit, they belong to the attempt.
func (m *Message) LogFields(fn func(*zerolog.Event)) {
	if m.attempt != nil {
		m.attempt.fields = append(m.attempt.fields, fn)
	}
}

// messageFailure is a Read or Write failure that belongs to one message.
type messageFailure struct {
	msg *Message
	err error
}

func (f *messageFailure) Error() string { return f.err.Error() }
func (f *messageFailure) Unwrap() error { return f.err }

// FailMessage attributes a Read or Write failure to m, one message of the
// transaction: it is then handled as if m's route had returned err — m
// goes on alone with this failure counted as its first attempt (a
// MSG_CONCURRENT_UPDATE is re-run, an invalid message dead-lettered), the
// messages before it run again, the rest after it. A failure that names no
// message runs the messages again in smaller transactions, down to one
// message each, where every failure is judged on its own (one that every
// message meets holds the partition).
func FailMessage(m *Message, err error) error {
	if err == nil {
		err = errors.New("failed without a reason")
	}
	return &messageFailure{msg: m, err: err}
}
