package consumer

import (
	"bytes"
	"testing"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
)

func TestCaseByKeyAndSortedIDs(t *testing.T) {
	a, b := uuid.MustParse("00000000-0000-4000-8000-000000000002"), uuid.MustParse("00000000-0000-4000-8000-000000000001")
	ids := SortedIDs(map[uuid.UUID]int64{a: 7, b: 8})
	if len(ids) != 2 || bytes.Compare(ids[0][:], ids[1][:]) >= 0 {
		t.Fatalf("SortedIDs = %v, want byte order", ids)
	}
	values := map[uuid.UUID]any{a: int64(7), b: nil}
	sb := sql.Dialect(dialect.Postgres).Update("t").Set("v", sql.ExprFunc(func(x *sql.Builder) {
		CaseByKey(x, "id", ids, "bigint", func(id uuid.UUID) any { return values[id] })
	}))
	q, args := sb.Query()
	// ent writes a nil argument as NULL: typed by the cast all the same.
	want := `UPDATE "t" SET "v" = CASE "id" WHEN $1 THEN NULL::bigint WHEN $2 THEN $3::bigint END`
	if q != want {
		t.Fatalf("query\n%s\nwant\n%s", q, want)
	}
	if len(args) != 3 || args[0] != b || args[1] != a || args[2] != int64(7) {
		t.Fatalf("args %v", args)
	}
}
