package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/dlq"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// The proof that a DLQ replay is safe: a selection event whose lead
// does not exist spends its retry schedule and lands in the DLQ as
// CRM_SELECTION_LEAD_NOT_FOUND; once the lead exists, a replay appends it to
// the lead's feed exactly once, and a second replay of the same dead letter
// changes nothing (the consumer is idempotent by MessageId).
func TestDLQReplayOfALeadNotFoundLandsExactlyOnce(t *testing.T) {
	t.Parallel()
	const wait = 30 * time.Second
	kc := kafkatest.NewCluster(t, map[string]int{crm.Topic: 6, crm.DLQTopic: 6})
	url := pgtest.NewDB(t)
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}

	agent, investor, selection, msgID := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	value, err := json.Marshal(map[string]any{
		"MessageId": msgID.String(), "EventType": crm.EventType, "ContractVersion": crm.ContractVersion,
		"CreatedAt": time.Now().UTC().Format(time.RFC3339Nano), "AggregateId": selection.String(), "AggregateType": "Selection",
		"Payload": map[string]any{
			"SelectionId": selection.String(), "SelectionTitle": "Квартиры у парка", "PropertyObjectsCount": 7,
			"Action": "Shared", "AgentUserId": agent.String(), "InvestorUserId": investor.String(),
			"OccurredAt": time.Now().UTC().Format(time.RFC3339Nano),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	const partition = 4
	kc.Produce(t, crm.Topic, kafkatest.Message{Partition: partition, Key: []byte(selection.String()), Value: value,
		Headers: map[string]string{"x-test-origin": "replay-test"}})

	// RETRY_TIME_SCALE 0.00001: the 30 s … 16 min schedule takes
	// milliseconds (the re-driver still polls every 10 ms).
	run := consumertest.Start(t, kc.Bootstrap, url, crm.New, consumertest.Options{RetryTimeScale: 0.00001})
	kafkatest.Eventually(t, wait, func() bool { return kc.Count(t, crm.DLQTopic) == 1 }, "the event dead-lettered")

	var listed bytes.Buffer
	f := dlq.All()
	f.Code = crm.CodeLeadNotFound.Name
	if n, err := dlq.List(context.Background(), dlq.ListOptions{Brokers: kc.Bootstrap, Topic: crm.DLQTopic, Filter: f}, &listed, &listed); err != nil || n != 1 {
		t.Fatalf("dlq list --code %s: %d messages, %v\n%s", crm.CodeLeadNotFound.Name, n, err, listed.String())
	}
	for _, want := range []string{
		"p4@0  CRM_SELECTION_LEAD_NOT_FOUND  attempts 7",
		"source    " + crm.Topic + " p4@0 (group " + crm.Group + ")",
		"MessageId " + msgID.String() + "  EventType " + crm.EventType,
	} {
		if !strings.Contains(listed.String(), want) {
			t.Errorf("dlq list lacks %q:\n%s", want, listed.String())
		}
	}
	if n := count(`SELECT count(*) FROM lead_events`); n != 0 {
		t.Fatalf("%d feed entries before the lead exists", n)
	}

	// The fix: the lead appears. Then the operator replays the DLQ.
	lead := uuid.New()
	if _, err := db.Exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, $2, $3, $4, 'Active')`,
		lead, uuid.New(), agent, investor); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := dlqReplayCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", crm.DLQTopic, "--code", crm.CodeLeadNotFound.Name, "--yes"},
		strings.NewReader(""), &out, &out); err != nil {
		t.Fatalf("dlq replay: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "selected 1, replayed 1, refused 0, failed 0") {
		t.Fatalf("dlq replay output:\n%s", out.String())
	}
	kafkatest.Eventually(t, wait, func() bool {
		return count(`SELECT count(*) FROM lead_events WHERE source_message_id = $1 AND lead_id = $2`, msgID, lead) == 1
	}, "the replayed event appended to the lead's feed")
	if m := kc.ReadAll(t, crm.Topic, 2, wait)[1]; m.TopicPartition.Partition != partition ||
		kafkatest.Header(m, dlq.HeaderReplayCount) != "1" || kafkatest.Header(m, "x-test-origin") != "replay-test" {
		t.Errorf("replayed message on partition %d with x-replay-count %q and x-test-origin %q",
			m.TopicPartition.Partition, kafkatest.Header(m, dlq.HeaderReplayCount), kafkatest.Header(m, "x-test-origin"))
	}

	// A second replay of the same dead letter: acknowledged as a duplicate.
	c, err := dlq.Replay(context.Background(), dlq.ReplayOptions{Brokers: kc.Bootstrap, Topic: crm.DLQTopic, Filter: f, MaxReplays: 3}, &out)
	if err != nil || c != (dlq.Counts{Selected: 1, Replayed: 1}) {
		t.Fatalf("second replay: %v, %v\n%s", c, err, out.String())
	}
	kafkatest.Eventually(t, wait, func() bool {
		return kc.Committed(t, crm.Group, crm.Topic)[partition] == 3
	}, "the group committed past the second replay (offset 3 on partition %d)", partition)
	if n := count(`SELECT count(*) FROM lead_events WHERE source_message_id = $1`, msgID); n != 1 {
		t.Fatalf("%d feed entries for the message after two replays, want 1", n)
	}
	if n := count(`SELECT count(*) FROM processed_messages WHERE idempotency_key = $1`, crm.KeyPrefix+msgID.String()); n != 1 {
		t.Fatalf("%d idempotency marks, want 1", n)
	}
	if n := run.Counter(crm.MetricDuplicates, nil); n != 1 {
		t.Errorf("%s = %v, want 1 (the second replay)", crm.MetricDuplicates, n)
	}
	if n := kc.Count(t, crm.DLQTopic); n != 1 {
		t.Errorf("%d dead letters after the replays, want still 1", n)
	}
}
