package consumer

import (
	"context"
	"fmt"

	"github.com/pin-platform/pin/ent"
)

// The idempotency mark and the message's effect share a transaction; the
// mark's unique key is what makes a second processing of the same message
// a no-op. Every transaction inserts its marks once its routes decided,
// with their outcomes, in one statement, before Write (tx.go): a mark that
// exists by then (a redelivery of a message already processed, or one a
// concurrent processor committed while the transaction ran) is left out of
// the statement's RETURNING, and the transaction is rolled back and run
// again without that message, which is acknowledged as a duplicate. Its
// handler ran, but inside a transaction that never committed. A second
// processor of a message whose mark is still uncommitted waits at the
// insert for the first to end.

// pendingOutcome is the outcome of a mark inserted only to learn whether
// it exists (processedElsewhere): its transaction always rolls back.
const pendingOutcome = "processing"

type mark struct {
	key       string
	partition int32
	offset    int64
	outcome   Outcome
}

// insertMarks inserts the marks (in key order, so that two transactions
// inserting overlapping sets wait for each other instead of deadlocking)
// and returns the keys that were new: the others belong to messages
// already processed, or being processed by a transaction that committed
// while this statement waited for it.
func insertMarks(ctx context.Context, tx *ent.Tx, group, topic string, marks []mark) (map[string]bool, error) {
	var keys, parts, offs, outs Array
	for _, m := range marks {
		keys.Text(m.key)
		parts.Int(int64(m.partition))
		offs.Int(m.offset)
		outs.Text(string(m.outcome))
	}
	rows, err := tx.QueryContext(ctx, `
INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome)
SELECT k, $2, $3, p, o, oc FROM unnest($1::text[], $4::bigint[], $5::bigint[], $6::text[]) AS u(k, p, o, oc)
ORDER BY k
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key`,
		&keys, group, topic, &parts, &offs, &outs)
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
