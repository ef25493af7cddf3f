package consumer

import (
	"fmt"
	"testing"

	"github.com/lib/pq"
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
