package consumer

import (
	"context"
	"errors"
	"fmt"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/pin-platform/pin/ent"
)

// The idempotency mark and the message's effect share a transaction; the
// mark's unique key is what makes a second processing of the same message
// a no-op. Every transaction inserts its marks once its routes decided,
// with their outcomes, in one statement, before Write takes a lock: in
// Write's first statement (Marks), or on their own, before Write
// (findMarks) or after a Write that wrote nothing (tx.go).
//
// Mostly none of them exists, and the insert is a plain INSERT
// (Marks.Item, insertMarks): PostgreSQL checks each key's uniqueness in
// the one search of the index that inserts it. One that exists fails the
// statement (unique violation); the transaction then rolls back and runs
// again with findMarks, which leaves the existing marks out of its
// RETURNING. Transactions likely to meet one (a partition's first
// messages since its assignment, where redeliveries come, or since it
// met one: worker.mayMeetMarks; a probe; a re-drive) use findMarks from
// the start, before Write. Its ON CONFLICT costs a second search of the index per mark (the
// conflict check before the insert) and a WAL record more per row (the
// speculative insert's confirmation): 1.5–2.5 µs of PostgreSQL's CPU per
// rewards event, 2.5 per crm event (bench/README.md, session 14).
//
// A transaction whose findMarks found marks that exist (a redelivery of a
// message already processed, or one a concurrent processor committed
// while the transaction ran) is rolled back and run again without those
// messages, which are acknowledged as duplicates. Their handlers ran, but
// inside a transaction that never committed. A second processor of a
// message whose mark is still uncommitted waits at either insert for the
// first to end.

// pendingOutcome is the outcome of a mark inserted only to learn whether
// it exists (processedElsewhere): its transaction always rolls back.
const pendingOutcome = "processing"

type mark struct {
	key       string
	partition int32
	offset    int64
	outcome   Outcome
}

// writeMarksInsert writes the insert of marks into b, its arguments as
// b's next placeholders: the group, the topic, then key by key its
// partition, offset and outcome; and returns the keys' argument. In key
// order, so that two transactions inserting overlapping sets wait for
// each other instead of deadlocking. One text whatever the marks.
func writeMarksInsert(b *sql.Builder, group, topic string, marks []mark) *Array {
	var keys, parts, offs, outs Array
	for _, m := range marks {
		keys.Text(m.key)
		parts.Int(int64(m.partition))
		offs.Int(m.offset)
		outs.Text(string(m.outcome))
	}
	b.WriteString(`INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome) SELECT k, `).
		Arg(group).Comma().Arg(topic).WriteString(", p, o, oc FROM unnest(").
		Arg(&keys).WriteString("::text[], ").Arg(&parts).WriteString("::bigint[], ").
		Arg(&offs).WriteString("::bigint[], ").Arg(&outs).WriteString(`::text[]) AS u(k, p, o, oc) ORDER BY k COLLATE "C"`)
	return &keys
}

// marksStatement is a statement of marks' own: their insert, then tail.
func marksStatement(group, topic string, marks []mark, tail string) (string, []any) {
	var b sql.Builder
	b.SetDialect(dialect.Postgres)
	writeMarksInsert(&b, group, topic, marks)
	b.WriteString(tail)
	return b.Query()
}

// Marks are the idempotency marks of a transaction's messages, for its
// Write to insert in its first statement: one round trip fewer than a
// statement of their own (bench/README.md, session 23). Item writes their
// insert as a WITH item, and Gate the condition that the statement's
// first item that writes or locks a row puts in its WHERE: a one-time
// filter (an InitPlan) that runs the insert whole before that item's
// first row, so the marks are in before any lock Write takes (in key
// order, as on their own). The statement Item went into must be sent,
// first (each service's tests check that its Write's first statement
// carries them); a Write that built it and never sent it fails its
// transaction (errMarksUnsent) rather than commit rows without marks.
// A Write that writes nothing leaves them: the runtime inserts them after
// it. Nil when the runtime inserted them before Write (findMarks).
type Marks struct {
	group, topic string
	marks        []mark
	inserted     bool   // Item was written
	keys         *Array // its keys' argument: sent, once the driver had it (unsent)
}

// NewMarks are marks of the group's messages of topic, none yet: the
// runtime's, or a service test's for its Write.
func NewMarks(group, topic string) *Marks { return &Marks{group: group, topic: topic} }

// Add adds the mark of a message: its idempotency key, where it was read and
// its outcome.
func (m *Marks) Add(key string, partition int32, offset int64, outcome Outcome) {
	m.marks = append(m.marks, mark{key, partition, offset, outcome})
}

// Item writes the marks' insert into b as the WITH item pin_marks (without
// WITH or a comma), its arguments as b's next placeholders. It writes
// nothing and reports false on nil Marks.
func (m *Marks) Item(b *sql.Builder) bool {
	if m == nil || len(m.marks) == 0 {
		return false
	}
	m.inserted = true
	b.WriteString("pin_marks AS (")
	m.keys = writeMarksInsert(b, m.group, m.topic, m.marks)
	b.WriteString(" RETURNING 1)")
	return true
}

// unsent reports a statement Item went into that never reached the
// driver: a Write that built it and sent something else.
func (m *Marks) unsent() bool { return m.inserted && !m.keys.sent }

// errMarksUnsent fails a transaction whose Write built the marks' insert
// and did not send it: its rows would commit without their marks.
var errMarksUnsent = errors.New("write built the insert of its idempotency marks (Marks.Item) and did not send it: the transaction would commit its rows without their marks")

// Gate is the condition that holds once Item's insert ran whole, for the
// WHERE of the statement's first item that writes or locks; "" when Item
// wrote nothing.
func (m *Marks) Gate() string {
	if m == nil || !m.inserted {
		return ""
	}
	return "(SELECT count(*) FROM pin_marks) >= 0"
}

// insertMarks inserts the marks. A mark that exists fails it with a
// unique violation (markTaken), and its transaction with it.
func insertMarks(ctx context.Context, tx *ent.Tx, group, topic string, marks []mark) error {
	q, args := marksStatement(group, topic, marks, "")
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("insert idempotency marks: %w", err)
	}
	return nil
}

// findMarks inserts the marks that do not exist and returns their keys:
// the others belong to messages already processed, or being processed by
// a transaction that committed while this statement waited for it.
func findMarks(ctx context.Context, tx *ent.Tx, group, topic string, marks []mark) (map[string]bool, error) {
	q, args := marksStatement(group, topic, marks, " ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key")
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("insert idempotency marks: %w", err)
	}
	defer rows.Close()
	inserted := make(map[string]bool, len(marks))
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		inserted[k] = true
	}
	return inserted, rows.Err()
}
