package consumer

import (
	"context"
	"fmt"

	"github.com/lib/pq"

	"github.com/pin-platform/consumers/ent"
)

// The idempotency mark is written first, before the handler runs, and its
// outcome set after: `INSERT … ON CONFLICT DO NOTHING RETURNING` claims the
// message inside the transaction. A second processor of the same message (a
// redelivery racing the parked-message re-driver, a member that lost its
// assignment) blocks on the uncommitted key until the first one ends, then
// sees the mark and skips the message without running its handler — or
// proceeds, if the first one rolled back. Both statements are set-based:
// two per batch, whatever its size.

// pendingOutcome is the outcome of a claimed mark until its handler
// returned; it is never visible after a commit.
const pendingOutcome = "processing"

type mark struct {
	key       string
	partition int32
	offset    int64
	outcome   Outcome
}

// claimMarks inserts the marks and returns the keys that were new: the
// others belong to messages already processed.
func claimMarks(ctx context.Context, tx *ent.Tx, group, topic string, marks []mark) (map[string]bool, error) {
	keys := make([]string, len(marks))
	parts := make([]int64, len(marks))
	offs := make([]int64, len(marks))
	for i, m := range marks {
		keys[i], parts[i], offs[i] = m.key, int64(m.partition), m.offset
	}
	rows, err := tx.QueryContext(ctx, `
INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome)
SELECT k, $2, $3, p, o, $6 FROM unnest($1::text[], $4::int[], $5::bigint[]) AS u(k, p, o)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key`,
		pq.Array(keys), group, topic, pq.Array(parts), pq.Array(offs), pendingOutcome)
	if err != nil {
		return nil, fmt.Errorf("claim idempotency marks: %w", err)
	}
	defer rows.Close()
	claimed := make(map[string]bool, len(marks))
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		claimed[k] = true
	}
	return claimed, rows.Err()
}

// settleMarks sets the outcome of claimed marks.
func settleMarks(ctx context.Context, tx *ent.Tx, marks []mark) error {
	if len(marks) == 0 {
		return nil
	}
	keys := make([]string, len(marks))
	outs := make([]string, len(marks))
	for i, m := range marks {
		keys[i], outs[i] = m.key, string(m.outcome)
	}
	_, err := tx.ExecContext(ctx, `
UPDATE processed_messages AS pm SET outcome = u.oc
FROM unnest($1::text[], $2::text[]) AS u(k, oc)
WHERE pm.idempotency_key = u.k`, pq.Array(keys), pq.Array(outs))
	if err != nil {
		return fmt.Errorf("write idempotency outcomes: %w", err)
	}
	return nil
}
