package consumertest

import (
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pin-platform/pin/consumers/consumer"
)

// RowsRead prepares statement as name(params) and runs its generic plan
// with args (SQL literals) under the runtime's planner settings
// (consumer.PlanSettings), in a transaction it rolls back. With fill, the
// plan is made first (one execution), then fill runs (a table grows under
// the plan, as under a connection that planned on an empty table), then
// the plan runs again and is measured. It returns the rows the measured
// run's scans of table read (those their filters removed included) and
// its plan, for a test that a statement looks its rows up whatever the
// statistics its plan was made on.
func RowsRead(t testing.TB, db *sql.DB, table, name, params, statement, fill, args string) (int, string) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()                    // a rolled-back check: nothing to keep
	defer func() { _, _ = tx.Exec("DEALLOCATE " + name) }() // a prepared statement outlives its transaction
	if _, err := tx.Exec(consumer.PlanSettings); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("PREPARE " + name + "(" + params + ") AS " + statement); err != nil {
		t.Fatal(err)
	}
	if fill != "" {
		if _, err := tx.Exec("EXECUTE " + name + "(" + args + ")"); err != nil { // the generic plan, made now
			t.Fatal(err)
		}
		if _, err := tx.Exec(fill); err != nil {
			t.Fatal(err)
		}
	}
	var out string
	if err := tx.QueryRow("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE " + name + "(" + args + ")").Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan) != 1 {
		t.Fatalf("EXPLAIN's JSON: %v", err)
	}
	var read float64
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation == table && strings.HasSuffix(n.Type, "Scan") {
			read += (n.Rows + n.Removed + n.Rechecked) * n.Loops
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan[0].Plan)
	if read == 0 {
		t.Fatalf("the plan reads nothing of %s: %s", table, out)
	}
	return int(read), out
}

type planNode struct {
	Type      string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Rows      float64    `json:"Actual Rows"`
	Loops     float64    `json:"Actual Loops"`
	Removed   float64    `json:"Rows Removed by Filter"`
	Rechecked float64    `json:"Rows Removed by Index Recheck"`
	Plans     []planNode `json:"Plans"`
}
