package crm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/servicetest"
	"github.com/pin-platform/pin/ent"
)

// read always returns a view, an empty one when no message decodes.
func TestReadAlwaysHasAView(t *testing.T) {
	t.Parallel()
	svc := New(prometheus.NewRegistry())
	bad, err := servicetest.PayloadMessage(svc, EventType, "Selection", []byte(`{"AgentUserId": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := read(context.Background(), nil, []*consumer.Message{bad})
	if err != nil || v == nil || len(v.leads)+len(v.inFeed) != 0 {
		t.Fatalf("read of an undecodable message: %+v, %v; want an empty view", v, err)
	}
}

// The read's plan, made once per connection for any argument (a
// transaction of messages forces generic plans: consumers/consumer/db.go),
// looks each pair up in the partial index of Active pairs,
// ux_leads_active_pair, which it can only use with the status a literal of
// its text: with an argument it read every lead, in the primary key's
// order, in every transaction.
func TestReadLooksPairsUpInTheActivePairIndex(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.Exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status)
SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), CASE WHEN i % 4 = 0 THEN 'Archived' ELSE 'Active' END
FROM generate_series(1, 2000) AS i`)
	want := h.insertLead(StatusActive)
	h.Exec(`ANALYZE leads`) // as autovacuum does: the plan's choice rests on what the statistics say

	db, err := consumer.OpenDB(h.URL, consumer.DBOptions{StatementCache: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	payload := fmt.Sprintf(`{"SelectionId": %q, "Action": "Shared", "AgentUserId": %q, "InvestorUserId": %q, "OccurredAt": "2026-12-01T10:00:00Z"}`,
		uuid.NewString(), want.Agent, want.Investor)
	msg, err := servicetest.PayloadMessage(New(prometheus.NewRegistry()), EventType, "Selection", []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	const reads = 3
	for range reads {
		v, err := read(ctx, tx, []*consumer.Message{msg})
		if err != nil {
			t.Fatal(err)
		}
		if l := v.leads[pair{want.Agent, want.Investor}]; l == nil || l.ID != want.ID {
			t.Fatalf("read found %v for the pair, want lead %s", l, want.ID)
		}
	}
	// This transaction's own counts, before any flush.
	rows, err := tx.QueryContext(ctx, `SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'leads'`)
	if err != nil {
		t.Fatal(err)
	}
	var seq, fetched int64
	for rows.Next() {
		if err := rows.Scan(&seq, &fetched); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if seq != 0 || fetched > reads {
		t.Fatalf("%d reads of one pair among 2,001 leads: %d sequential scans, %d rows fetched by index; want 0 and at most %d", reads, seq, fetched, reads)
	}
}

// read resolves the pairs' leads and finds the messages' feed entries in
// one round trip: the test fails when it sends more than one statement,
// or misses the lead or the entry.
func TestReadIsOneStatement(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	l := h.insertLead(StatusActive)
	svc := New(prometheus.NewRegistry())
	msgs := []*consumer.Message{sharedOn(t, svc, l), sharedOn(t, svc, l)}
	h.Exec(`INSERT INTO lead_events (lead_id, tenant_id, type, occurred_at, source_message_id, payload)
		VALUES ($1, $2, 'SelectionAttached', now(), $3, '{}')`, l.ID, l.Tenant, msgs[1].MessageID)

	client, sent := consumertest.NewStatementsClient(h.DB)
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	sent.Start()
	v, err := read(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if reads := sent.Stop(); len(reads) != 1 {
		t.Fatalf("read sent %d statements, want 1: %q", len(reads), reads)
	}
	got := v.leads[pair{l.Agent, l.Investor}]
	if got == nil || got.ID != l.ID || got.TenantID != l.Tenant || got.Status != StatusActive || got.RowVersion != 0 {
		t.Fatalf("the pair's lead: %+v, want %+v, Active, row_version 0", got, l)
	}
	if len(v.inFeed) != 1 || v.inFeed[msgs[1].MessageID] != l.ID {
		t.Fatalf("in the feed: %v, want only %s on lead %s", v.inFeed, msgs[1].MessageID, l.ID)
	}
}

// write sends the transaction's marks, its feed rows and its leads'
// update in one statement: the marks, given, first (a round trip of their
// own was a fifth of a far transaction's waits). Both land, and the lead
// moves by its appends.
func TestWriteIsOneStatementWithTheMarks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	l := h.insertLead(StatusActive)
	svc := New(prometheus.NewRegistry())
	decide := svc.Handlers.(consumer.Batched[*view]).Routes[0].Decide
	msgs := []*consumer.Message{sharedOn(t, svc, l), sharedOn(t, svc, l)}
	marks := consumer.NewMarks(Group, Topic)
	for i, m := range msgs {
		marks.Add(KeyPrefix+m.MessageID.String(), 0, int64(i), Attached)
	}
	client, sent := consumertest.NewStatementsClient(h.DB)
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	v, err := read(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if out, err := decide(ctx, v, m); err != nil || out != Attached {
			t.Fatalf("decide: %q, %v", out, err)
		}
	}
	sent.Start()
	if err := write(ctx, tx, v, marks); err != nil {
		t.Fatal(err)
	}
	if writes := sent.Stop(); len(writes) != 1 || !strings.Contains(writes[0], "pin_marks") {
		t.Fatalf("write sent %d statements, want 1 with the marks: %q", len(writes), writes)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if got := h.outcome(m.MessageID); got != string(Attached) {
			t.Fatalf("the mark of %s: %q, want %q", m.MessageID, got, Attached)
		}
		if rows := h.feed(m.MessageID); len(rows) != 1 {
			t.Fatalf("the feed of %s: %d rows, want 1", m.MessageID, len(rows))
		}
	}
	if got := h.leadState(l.ID); got.RowVersion != 2 {
		t.Fatalf("the lead after two appends: %+v, want row_version 2", got)
	}
}

// sharedOn is a valid Shared event of a new selection on lead l's pair,
// with a MessageId of its own.
func sharedOn(t *testing.T, svc consumer.Service, l testLead) *consumer.Message {
	t.Helper()
	payload := fmt.Sprintf(`{"SelectionId": %q, "SelectionTitle": "Квартиры у парка", "PropertyObjectsCount": 7, "Action": "Shared", "AgentUserId": %q, "InvestorUserId": %q, "OccurredAt": "2026-12-01T10:00:00Z"}`,
		uuid.NewString(), l.Agent, l.Investor)
	m, err := servicetest.RuntimeMessage(svc, servicetest.Envelope{
		MessageID: uuid.New(), EventType: EventType, CreatedAt: time.Now(), AggregateID: uuid.New(),
		AggregateType: "Selection", Payload: servicetest.Raw([]byte(payload)),
	}.Value())
	if err != nil {
		t.Fatal(err)
	}
	return m
}
