package consumer

import (
	"bytes"
	"slices"

	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
)

// CaseByKey writes the SQL expression
//
//	CASE <column> WHEN $1 THEN $2::<cast> WHEN $3 THEN $4::<cast> … END
//
// with one value per key: what a set-based UPDATE of many rows, each to
// its own value, needs (the writes x// Write). The cast types the values, which PostgreSQL cannot infer
// from a CASE of parameters; a nil value is NULL of that type (ent writes it inline).
func CaseByKey[K any](b *sql.Builder, column string, keys []K, cast string, value func(K) any) {
	b.WriteString("CASE ").Ident(column)
	for _, k := range keys {
		b.WriteString(" WHEN ").Arg(k).WriteString(" THEN ").Arg(value(k)).WriteString("::" + cast)
	}
	b.WriteString(" END")
}

// CaseOf is CaseByKey over a batch's rows: for each id of ids, the value
// value(rows[id]). It is a sql.Querier, what an UPDATE's Set takes; inside
// a larger expression, sb.Join writes it with its arguments numbered on.
func CaseOf[V any](column string, ids []uuid.UUID, rows map[uuid.UUID]V, cast string, value func(V) any) sql.Querier {
	return sql.ExprFunc(func(b *sql.Builder) {
		CaseByKey(b, column, ids, cast, func(id uuid.UUID) any { return value(rows[id]) })
	})
}

// SortedIDs returns the keys of m in byte order: the order in which a batch
// locks and writes its rows, the same in every batch, so that two batches
// touching the same rows wait for each other instead of deadlocking.
func SortedIDs[V any](m map[uuid.UUID]V) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

// MaxParams is how many bind parameters one PostgreSQL statement can carry
// (the protocol counts them in 16 bits).
const MaxParams = 65535

// Chunks splits rows into runs that one bulk statement can carry when each
// row takes paramsPerRow bind parameters: the services' multi-row INSERTs
// and upserts go through it, so a payload's arrays never take a statement
// past MaxParams. A statement of at most MaxParamsPerKey parameters per
// key (the CASE updates) needs no chunks (MaxKeysPerTransaction).
func Chunks[T any](rows []T, paramsPerRow int) [][]T {
	per := max(MaxParams/max(paramsPerRow, 1), 1) // a row of more parameters than that goes alone, and fails
	var out [][]T
	for len(rows) > per {
		out = append(out, rows[:per:per])
		rows = rows[per:]
	}
	if len(rows) > 0 {
		out = append(out, rows)
	}
	return out
}
