package consumer

import (
	"context"
	"fmt"

	"github.com/lib/pq"

	"github.com/pin-platform/consumers/ent"
)

// The idempotency marks are read and written set-based: one SELECT before
// the handlers of a batch run and one INSERT after, whatever the batch size.

// seenKeys returns the keys among keys that already have a mark.
func seenKeys(ctx context.Context, tx *ent.Tx, keys []string) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx,
		`SELECT idempotency_key FROM processed_messages WHERE idempotency_key = ANY($1)`, pq.Array(keys))
	if err != nil {
		return nil, fmt.Errorf("read idempotency marks: %w", err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		seen[k] = true
	}
	return seen, rows.Err()
}

type mark struct {
	key       string
	partition int32
	offset    int64
	outcome   Outcome
}

// insertMarks writes the marks and reports how many were new. Fewer than
// len(marks) means another processor marked one of the messages since
// seenKeys: the caller rolls back.
func insertMarks(ctx context.Context, tx *ent.Tx, group, topic string, marks []mark) (int64, error) {
	keys := make([]string, len(marks))
	parts := make([]int64, len(marks))
	offs := make([]int64, len(marks))
	outs := make([]string, len(marks))
	for i, m := range marks {
		keys[i], parts[i], offs[i], outs[i] = m.key, int64(m.partition), m.offset, string(m.outcome)
	}
	res, err := tx.ExecContext(ctx, `
INSERT INTO processed_messages (idempotency_key, consumer_group, topic, "partition", "offset", outcome)
SELECT k, $2, $3, p, o, oc FROM unnest($1::text[], $4::int[], $5::bigint[], $6::text[]) AS u(k, p, o, oc)
ON CONFLICT (idempotency_key) DO NOTHING`,
		pq.Array(keys), group, topic, pq.Array(parts), pq.Array(offs), pq.Array(outs))
	if err != nil {
		return 0, fmt.Errorf("write idempotency marks: %w", err)
	}
	return res.RowsAffected()
}
