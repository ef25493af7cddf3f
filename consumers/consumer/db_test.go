package consumer_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate/pgtest"
	"github.com/pin-platform/pin/schema"
)

// binaryParameters reports whether the pool's connections run with
// binary_parameters: then a plain []byte argument is sent in binary, which
// a jsonb parameter refuses (its binary form starts with a version byte);
// without it lib/pq sends the bytes as text.
func binaryParameters(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var s string
	err := db.QueryRow(`SELECT $1::jsonb::text`, []byte(`{"a":1}`)).Scan(&s)
	if err == nil && s != `{"a": 1}` {
		t.Fatalf("jsonb read back %q", s)
	}
	return err != nil
}

// The pool OpenDB gives writes every kind of column the consumers write
// (jsonb from ent's JSON fields, bytea, uuid, uuid[] through ent, times)
// with binary_parameters on, and leaves it off when DATABASE_URL says so.
func TestOpenDBSendsOneRoundTripStatementsAndKeepsJSONAndBytesIntact(t *testing.T) {
	for _, cache := range []int{0, consumer.DefaultStatementCache} {
		t.Run(fmt.Sprintf("statement cache %d", cache), func(t *testing.T) {
			t.Parallel()
			roundTripsEveryColumnKind(t, cache)
		})
	}
}

func roundTripsEveryColumnKind(t *testing.T, cache int) {
	url := pgtest.NewDB(t)
	ctx := context.Background()

	db, err := consumer.OpenDB(url, consumer.DBOptions{StatementCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !binaryParameters(t, db) {
		t.Fatal("binary_parameters is off by default")
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))

	// jsonb from ent's field.JSON (json.RawMessage), through a transaction.
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agent, investor, tenant := uuid.New(), uuid.New(), uuid.New()
	l, err := tx.Lead.Create().SetTenantID(tenant).SetExecutorAgentUserID(agent).SetPrimaryInvestorUserID(investor).SetStatus("Active").Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	payload := json.RawMessage(`{"SelectionId":"s-1","SelectionTitle":"Ünïcode \u2713","PropertyObjectsCount":3}`)
	msgID := uuid.New()
	if _, err := tx.LeadEvent.Create().SetLeadID(l.ID).SetTenantID(tenant).SetType("SelectionAttached").
		SetOccurredAt(time.Now()).SetSourceMessageID(msgID).SetPayload(payload).Save(ctx); err != nil {
		t.Fatalf("jsonb insert with binary parameters: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	var raw string
	if err := db.QueryRow(`SELECT payload::text FROM lead_events WHERE source_message_id = $1`, msgID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &got); err != nil || got["SelectionTitle"] != "Ünïcode ✓" || got["PropertyObjectsCount"] != float64(3) {
		t.Fatalf("payload read back %s (%v)", raw, err)
	}

	// bytea (binary, not UTF-8) and jsonb headers of a parked message.
	key, value := []byte{0x00, 0xff, '\\', 'x'}, []byte("\xfe\x00{\"a\":1}")
	hs := []schema.Header{{Key: "traceparent", Value: []byte("00-abc-01")}, {Key: "bin", Value: []byte{0, 1, 2}}}
	pm, err := client.ParkedMessage.Create().SetConsumerGroup("g").SetTopic("t").SetPartition(0).SetOffset(7).
		SetKey(key).SetValue(value).SetHeaders(hs).SetMessageID(uuid.New()).SetEventType("e").
		SetErrorCode("C").SetReason("r").SetAttempts(1).SetNextAttemptAt(time.Now()).Save(ctx)
	if err != nil {
		t.Fatalf("parked message insert with binary parameters: %v", err)
	}
	back, err := client.ParkedMessage.Get(ctx, pm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(*back.Key, key) || !bytes.Equal(*back.Value, value) {
		t.Fatalf("bytea read back key %q value %q, want %q %q", *back.Key, *back.Value, key, value)
	}
	if len(back.Headers) != 2 || !bytes.Equal(back.Headers[1].Value, []byte{0, 1, 2}) {
		t.Fatalf("headers read back %+v", back.Headers)
	}

	// The operator's word wins.
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	off, err := consumer.OpenDB(url+sep+"binary_parameters=no", consumer.DBOptions{StatementCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if binaryParameters(t, off) {
		t.Fatal("binary_parameters=no in DATABASE_URL is not honoured")
	}
}

// Without the pool's text JSON, binary_parameters breaks every jsonb write
// of ent: this is what OpenDB guards against.
func TestPlainBinaryParametersBreakEntJSON(t *testing.T) {
	url := pgtest.NewDB(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db, err := sql.Open("postgres", url+sep+"binary_parameters=yes")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`SELECT $1::jsonb`, json.RawMessage(`{"a":1}`))
	if err == nil || !strings.Contains(err.Error(), "jsonb") {
		t.Fatalf("plain lib/pq with binary_parameters sent JSON as jsonb binary without an error (%v): the wrapper may be unneeded now", err)
	}
	ok, err := consumer.OpenDB(url, consumer.DBOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	var s string
	if err := ok.QueryRow(`SELECT $1::jsonb::text`, json.RawMessage(`{"a":1}`)).Scan(&s); err != nil || s != `{"a": 1}` {
		t.Fatalf("OpenDB: %q, %v", s, err)
	}
}
