package crm

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent/lead"
)

// The statements that find and update a transaction's leads look them up
// by key, whatever the table's statistics say: under the runtime's
// settings each connection plans a statement once, for any argument
// (force_generic_plan), and a plan made while leads had never been
// analyzed (a fresh load, before autovacuum's first ANALYZE) read every
// Active lead through the partial index of Active pairs and hashed them
// against the transaction's few (0.4–0.5 ms a call for 2 leads of 1,000,
// most of PostgreSQL's cost per transaction at low rates). The test runs
// each statement's generic plan on 1,000 Active leads never analyzed and
// fails if it reads more lead rows than the statement asks for.
func TestTheLeadStatementsReadOnlyTheirLeads(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if _, err := h.DB.Exec(`INSERT INTO leads (tenant_id, executor_agent_user_id, primary_investor_user_id, status)
		SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'Active' FROM generate_series(1, 1000)`); err != nil {
		t.Fatal(err)
	}
	type leadRow struct{ id, agent, investor uuid.UUID }
	rows, err := h.DB.Query(`SELECT id, executor_agent_user_id, primary_investor_user_id FROM leads ORDER BY id LIMIT 2`)
	if err != nil {
		t.Fatal(err)
	}
	var two []leadRow
	for rows.Next() {
		var l leadRow
		if err := rows.Scan(&l.id, &l.agent, &l.investor); err != nil {
			t.Fatal(err)
		}
		two = append(two, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	lit := func(f func(leadRow) uuid.UUID) string {
		return fmt.Sprintf("'{%s,%s}'", f(two[0]), f(two[1]))
	}
	ids, agents, investors := lit(func(l leadRow) uuid.UUID { return l.id }), lit(func(l leadRow) uuid.UUID { return l.agent }), lit(func(l leadRow) uuid.UUID { return l.investor })

	// Read's resolution of the pairs, as ent writes it.
	var a, i consumer.Array
	sel := entsql.Dialect(dialect.Postgres).Select(lead.FieldID).From(entsql.Table(lead.Table))
	activePairs(&a, &i)(sel)
	resolve, _ := sel.Query()

	for _, c := range []struct {
		name, prepare, execute string
	}{
		{"the pairs' resolution", "PREPARE resolve_plan(uuid[], uuid[], uuid[]) AS " + resolve, "EXECUTE resolve_plan(" + agents + ", " + agents + ", " + investors + ")"},
		{"the leads' update", "PREPARE claim_plan(uuid[], timestamptz, bigint[], timestamptz[], bigint[], text) AS " + claimSQL,
			"EXECUTE claim_plan(" + ids + ", now(), '{1,1}', ARRAY[now(), now()], '{0,0}', 'Active')"},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := leadRowsRead(t, h.DB, c.prepare, c.execute)
			if read > 2 {
				t.Fatalf("the generic plan read %d lead rows for 2 leads", read)
			}
		})
	}
}

// leadRowsRead runs a prepared statement's generic plan under the
// runtime's settings (consumer.OpenDB's BEGIN) in a transaction it rolls
// back, and returns the rows its scans of leads read, those their
// filters removed included.
func leadRowsRead(t *testing.T, db *sql.DB, prepare, execute string) int {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a rolled-back check: nothing to keep
	// A prepared statement outlives the transaction: it goes with it.
	name := strings.Fields(prepare)[1]
	name = name[:strings.IndexByte(name, '(')]
	defer func() { _, _ = tx.Exec("DEALLOCATE " + name) }()
	if _, err := tx.Exec(`SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(prepare); err != nil {
		t.Fatal(err)
	}
	var out string
	if err := tx.QueryRow(`EXPLAIN (ANALYZE, FORMAT JSON) ` + execute).Scan(&out); err != nil {
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
	if read > 2 {
		t.Logf("plan: %s", out)
	}
	return int(read)
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
