package observability

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// applied returns a message of the service that its handler applies: the
// chat or the lead it needs provisioned on db, as another component would.
func applied(t *testing.T, service string, db *sql.DB) demo.Event {
	t.Helper()
	now := time.Now().UTC()
	exec := func(q string, args ...any) {
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	switch service {
	case "messenger":
		lead := uuid.New()
		exec(`INSERT INTO chats (id, kind, lead_id) VALUES ($1, 'Lead', $2)`, uuid.New(), lead)
		return demo.LeadParticipantsChanged(lead, 1, []demo.Participant{{UserID: uuid.New(), Role: "Executor"}}, nil, now)
	case "rewards":
		return demo.BondCreated(uuid.New(), uuid.New(), uuid.New(), 1, now)
	default:
		agent, investor := uuid.New(), uuid.New()
		exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, $2, $3, $4, 'Active')`,
			uuid.New(), uuid.New(), agent, investor)
		return demo.SelectionShared(uuid.New(), agent, investor, "Shared", "a selection", 3, now)
	}
}

// TestOneTracePerMessage continues each message's traceparent into one
// trace of consume → handler → storage spans, for every service: for
// messages that share a transaction (their storage spans link to the one
// db.batch span, which links back to each), and for a message alone.
func TestOneTracePerMessage(t *testing.T) {
	for _, s := range services() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDB(t)
			db, err := sql.Open("postgres", url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			cl := kafkatest.NewCluster(t, map[string]int{s.topic.Name: s.topic.Partitions, s.topic.DLQ: s.topic.Partitions})
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			traced := func(p int32, e demo.Event) (string, string) {
				traceID, parentID := hex(16), hex(8)
				cl.Produce(t, s.topic.Name, kafkatest.Message{Partition: p, Key: e.Key, Value: e.Value,
					Headers: map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
				return traceID, parentID
			}
			find := func(traceID, parentID string) consumertest.MessageTrace {
				t.Helper()
				var mt consumertest.MessageTrace
				var err error
				kafkatest.Eventually(t, 30*time.Second, func() bool {
					mt, err = consumertest.FindTrace(rec.Ended(), s.topic.Name, traceID, parentID)
					return err == nil
				}, "the trace %s: %v", traceID, err)
				return mt
			}

			// Messages queued before the consumer starts go in one batch.
			var batch [][2]string
			for range 4 {
				id, parent := traced(1, applied(t, s.name, db))
				batch = append(batch, [2]string{id, parent})
			}
			consumertest.Start(t, cl.Bootstrap, url, s.build, consumertest.Options{TracerProvider: tp})
			// The first may be fetched, and committed, alone; the rest
			// then share a transaction.
			byBatch := map[string]int{}
			for _, b := range batch {
				mt := find(b[0], b[1])
				if mt.Batch == nil { // a transaction of its own: no shared span
					if got := attr(mt.DB, "pin.batch_size"); got != "1" {
						t.Fatalf("trace %s: the storage span links to no shared transaction, and its pin.batch_size is %s", b[0], got)
					}
					continue
				}
				byBatch[mt.Batch.SpanContext().SpanID().String()]++
			}
			most := 0
			for _, n := range byBatch {
				most = max(most, n)
			}
			if most < 2 {
				t.Fatalf("no transaction carried two of the queued messages: %v", byBatch)
			}

			// A message alone, once the consumer is idle: a transaction of
			// one.
			kafkatest.Eventually(t, 30*time.Second, func() bool { return cl.Committed(t, s.topic.Group, s.topic.Name)[1] == 4 }, "the batch committed")
			id, parent := traced(2, applied(t, s.name, db))
			mt := find(id, parent)
			if got := attr(mt.DB, "pin.batch_size"); got != "1" {
				t.Fatalf("the lone message's storage span: pin.batch_size %s, want 1", got)
			}
		})
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func hex(n int) string {
	b := uuid.New()
	return fmt.Sprintf("%x", b[:n])[:2*n]
}
