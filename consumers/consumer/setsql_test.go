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

// CaseOf, joined inside a larger expression after an argument of its own,
// numbers its arguments on from it.
func TestCaseOfNumbersItsArgumentsInsideAnExpression(t *testing.T) {
	a, b := uuid.MustParse("00000000-0000-4000-8000-000000000001"), uuid.MustParse("00000000-0000-4000-8000-000000000002")
	rows := map[uuid.UUID]struct{ n int64 }{a: {1}, b: {2}}
	ids := SortedIDs(rows)
	q, args := sql.Dialect(dialect.Postgres).Update("t").
		Set("v", sql.ExprFunc(func(x *sql.Builder) {
			x.Ident("v").WriteString(" + ").Arg(int64(10)).WriteString(" + ").
				Join(CaseOf("id", ids, rows, "bigint", func(r struct{ n int64 }) any { return r.n }))
		})).
		Where(sql.EQ("w", "x")).Query()
	want := `UPDATE "t" SET "v" = "v" + $1 + CASE "id" WHEN $2 THEN $3::bigint WHEN $4 THEN $5::bigint END WHERE "w" = $6`
	if q != want {
		t.Fatalf("query\n%s\nwant\n%s", q, want)
	}
	if len(args) != 6 || args[0] != int64(10) || args[1] != a || args[2] != int64(1) || args[3] != b || args[4] != int64(2) || args[5] != "x" {
		t.Fatalf("args %v", args)
	}
}

func TestChunksKeepEveryStatementUnderPostgreSQLsParameterLimit(t *testing.T) {
	rows := make([]int, 70000)
	for i := range rows {
		rows[i] = i
	}
	for _, per := range []int{1, 7, 9, 65535, 70000} {
		got := Chunks(rows, per)
		n, next := 0, 0
		for _, c := range got {
			if len(c) == 0 || len(c)*per > MaxParams && len(c) > 1 {
				t.Fatalf("%d params a row: a chunk of %d rows", per, len(c))
			}
			for _, v := range c {
				if v != next {
					t.Fatalf("%d params a row: row %d where %d was due (order or loss)", per, v, next)
				}
				next++
			}
			n += len(c)
		}
		if n != len(rows) {
			t.Fatalf("%d params a row: %d rows in the chunks, want %d", per, n, len(rows))
		}
	}
	if got := Chunks([]int{}, 5); len(got) != 0 {
		t.Fatalf("no rows: %d chunks", len(got))
	}
}
