package consumer

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/lib/pq"

	"github.com/pin-platform/pin/migrate/pgtest"
)

// The result-type refusal is told by its routine, which lc_messages does
// not translate, not by its message.
func TestResultTypeChangedMatchesTheRoutineNotTheMessage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pq.Error{Code: "0A000", Routine: "RevalidateCachedQuery", Message: "cached plan must not change result type"}, true},
		{fmt.Errorf("wrapped: %w", &pq.Error{Code: "0A000", Routine: "RevalidateCachedQuery", Message: "le plan en cache ne doit pas modifier le type en résultat"}), true},
		{&pq.Error{Code: "0A000", Routine: "transformOnConflictClause", Message: "some unsupported feature"}, false},
		{&pq.Error{Code: "42P01", Routine: "RevalidateCachedQuery"}, false},
		{fmt.Errorf("cached plan must not change result type"), false},
	} {
		if got := resultTypeChanged(c.err); got != c.want {
			t.Errorf("resultTypeChanged(%v) = %v, want %v", c.err, got, c.want)
		}
		if got := infraCause(c.err); c.want && got != "0A" {
			t.Errorf("infraCause(%v) = %q, want 0A: the retry prepares anew", c.err, got)
		}
	}
}

// Each connection's lib/pq names its statements from a seed of its own
// (seedNames): two connections preparing the same text use different
// names, negative ones (lib/pq's own counter never goes there), and a
// connection's names are its seed's successors.
func TestStatementNamesAreUniquePerConnection(t *testing.T) {
	t.Parallel()
	db, err := OpenDB(pgtest.NewEmptyDB(t), DBOptions{StatementCache: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	names := map[string]bool{}
	for range 3 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, q := range []string{`SELECT $1::int`, `SELECT $1::int`, `SELECT $1::int + 1`, `SELECT $1::int + 1`} {
			var n int
			if err := c.QueryRowContext(ctx, q, 1).Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		err = c.Raw(func(dc any) error {
			tc := dc.(*textJSONConn)
			if !tc.named || tc.cache == nil || tc.names != 2 {
				t.Fatalf("connection: named %v, cache %v, names %d; want seeded, with a cache, 2 names used", tc.named, tc.cache != nil, tc.names)
			}
			for e := tc.cache.lru.Front(); e != nil; e = e.Next() {
				got = append(got, reflect.ValueOf(e.Value.(*cachedStmt).st).Elem().FieldByName("name").String())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("prepared %v, want 2", got)
		}
		for _, name := range got {
			if n, err := strconv.ParseInt(name, 10, 64); err != nil || n >= 0 {
				t.Fatalf("statement name %q: want a negative number", name)
			}
			if names[name] {
				t.Fatalf("statement name %q used by two connections", name)
			}
			names[name] = true
		}
	}
}
