package crm

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
)

// The leads' update (claimSQL) looks each lead up by key, whatever the
// table's statistics say: under the runtime's settings each connection
// plans a statement once, for any argument (force_generic_plan), and with
// the status as a literal a plan made while leads had never been analyzed
// (a fresh load, before autovacuum's first ANALYZE) read every Active lead
// through the partial index of Active pairs and hashed them against the
// transaction's (0.48 ms a call for 2 leads of 1,000, half of PostgreSQL's
// cost per transaction at low rates; 0.95 ms against 0.71 for 400). The
// test runs its generic plan on 1,000 Active leads never analyzed and
// fails if it reads more lead rows than it updates.
func TestTheLeadsUpdateReadsOnlyItsLeads(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if _, err := h.DB.Exec(`INSERT INTO leads (tenant_id, executor_agent_user_id, primary_investor_user_id, status)
		SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Active' FROM generate_series(1, 1000)`); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	rows, err := h.DB.Query(`SELECT id FROM leads ORDER BY id LIMIT 2`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	read, plan := leadRowsRead(t, h.DB, "claim_plan", "uuid[], timestamptz, bigint[], timestamptz[], bigint[], text", claimSQL,
		fmt.Sprintf("'{%s,%s}', now(), '{1,1}', ARRAY[now(), now()], '{0,0}', 'Active'", ids[0], ids[1]))
	if read > 2 {
		t.Fatalf("the generic plan read %d lead rows to update 2: %s", read, plan)
	}
}

// leadRowsRead prepares statement as name(params) and runs its generic
// plan with args under the runtime's planner settings, in a transaction it
// rolls back. It returns the rows its scans of leads read (those their
// filters removed included) and the plan.
func leadRowsRead(t *testing.T, db *sql.DB, name, params, statement, args string) (int, string) {
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
		if n.Relation == "leads" && strings.HasSuffix(n.Type, "Scan") {
			read += (n.Rows + n.Removed + n.Rechecked) * n.Loops
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan[0].Plan)
	if read == 0 {
		t.Fatalf("the plan reads no lead: %s", out)
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
