package rewards

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/referralbondreplica"
	"github.com/pin-platform/pin/migrate/pgtest"
)

const waitFor = 30 * time.Second

// env is one end-to-end test: its own mock cluster (source and DLQ topics
// with the contract's 6 partitions), its own migrated database, and the
// rewards consumer running against both.
type env struct {
	t      *testing.T
	kc     *kafkatest.Cluster
	dbURL  string
	client *ent.Client
	db     *sql.DB
	run    *consumertest.Running
	logs   *consumertest.LogBuffer
	// produced is every message produced so far, by partition: the
	// offset the group must commit is the highest one + 1.
	produced map[int32]int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	kc := kafkatest.NewCluster(t, map[string]int{Topic: 6, DLQTopic: 6})
	client, db, url := pgtest.NewClient(t)
	return &env{t: t, kc: kc, dbURL: url, client: client, db: db, logs: &consumertest.LogBuffer{}, produced: map[int32]int64{}}
}

// start runs the rewards consumer (group pin-rewards-referral-bonds).
func (e *env) start() {
	e.t.Helper()
	log := zerolog.New(zerolog.MultiLevelWriter(e.logs, zerolog.ConsoleWriter{Out: testWriter{e.t}, NoColor: true, TimeFormat: "15:04:05.000"})).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
	if testing.Verbose() {
		log = log.Level(zerolog.DebugLevel)
	}
	e.run = consumertest.Start(e.t, e.kc.Bootstrap, e.dbURL, New, consumertest.Options{
		Logger: &log,
		// Commit stored offsets every 100 ms instead of every second: the
		// tests wait for commits after each step.
		Kafka: kafka.ConfigMap{"auto.commit.interval.ms": 100},
	})
}

// stop stops the consumer as SIGTERM does: it drains, commits and leaves
// the group.
func (e *env) stop() {
	e.t.Helper()
	if err := e.run.Stop(); err != nil {
		e.t.Fatalf("stop: %v", err)
	}
}

// produce writes the events to the source topic, keyed by ReferredUserId
// (partitioned by key, as the producer does), and returns where they landed.
func (e *env) produce(evs ...event) []kafka.TopicPartition {
	e.t.Helper()
	msgs := make([]kafkatest.Message, len(evs))
	for i, ev := range evs {
		msgs[i] = kafkatest.Message{Partition: -1, Key: []byte(ev.key), Value: ev.value, Headers: ev.headers}
	}
	tps := e.kc.Produce(e.t, Topic, msgs...)
	for _, tp := range tps {
		if int64(tp.Offset) > e.produced[tp.Partition]-1 {
			e.produced[tp.Partition] = int64(tp.Offset) + 1
		}
	}
	return tps
}

// waitCommitted waits until the group committed every produced message,
// and checks it committed nothing beyond.
func (e *env) waitCommitted() {
	e.t.Helper()
	got := map[int32]int64{} // filled in place: the failure message shows the last read
	kafkatest.Eventually(e.t, waitFor, func() bool {
		clear(got)
		for p, off := range e.kc.Committed(e.t, Group, Topic) {
			got[p] = off
		}
		for p, want := range e.produced {
			if got[p] < want {
				return false
			}
		}
		return true
	}, "committed offsets of %s: %v, want %v", Group, got, e.produced)
	for p, off := range got {
		if off != e.produced[p] {
			e.t.Errorf("partition %d: committed %d, want %d", p, off, e.produced[p])
		}
	}
}

func (e *env) countMarks() int {
	e.t.Helper()
	n, err := e.client.ProcessedMessage.Query().Count(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// outcome is the outcome stored with a message's mark ("" without a mark).
func (e *env) outcome(ev event) string {
	e.t.Helper()
	m, err := e.client.ProcessedMessage.Get(context.Background(), ev.idempotencyKey())
	if ent.IsNotFound(err) {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if m.ConsumerGroup != Group || m.Topic != Topic {
		e.t.Errorf("mark %s: group %s topic %s", m.ID, m.ConsumerGroup, m.Topic)
	}
	return m.Outcome
}

// row is the replica row of a bond, or nil.
func (e *env) row(id uuid.UUID) *ent.ReferralBondReplica {
	e.t.Helper()
	r, err := e.client.ReferralBondReplica.Get(context.Background(), id)
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// activeCount is how many Active rows a referred user has.
func (e *env) activeCount(referred uuid.UUID) int {
	e.t.Helper()
	n, err := e.client.ReferralBondReplica.Query().
		Where(referralbondreplica.ReferredUserID(referred), referralbondreplica.Status("Active")).Count(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// dlq reads the DLQ and checks it holds exactly want messages.
func (e *env) dlq(want int) []*kafka.Message {
	e.t.Helper()
	if want > 0 {
		kafkatest.Eventually(e.t, waitFor, func() bool { return e.kc.Count(e.t, DLQTopic) >= want }, "%d messages in the DLQ", want)
	}
	if n := e.kc.Count(e.t, DLQTopic); n != want {
		e.t.Fatalf("DLQ holds %d messages, want %d", n, want)
	}
	if want == 0 {
		return nil
	}
	return e.kc.ReadAll(e.t, DLQTopic, want, waitFor)
}

// checkDead checks a dead letter: the original key, value and headers byte
// for byte, and every DLQ header of docs/contract.md §5.
func (e *env) checkDead(m *kafka.Message, src kafka.TopicPartition, ev event, code string, attempts int) {
	e.t.Helper()
	h := func(k string) string { return kafkatest.Header(m, k) }
	if !bytes.Equal(m.Key, []byte(ev.key)) || !bytes.Equal(m.Value, ev.value) {
		e.t.Errorf("dead letter key/value differ from the original:\n key %q\n value %s", m.Key, m.Value)
	}
	for k, v := range ev.headers {
		if h(k) != v {
			e.t.Errorf("original header %s = %q, want %q", k, h(k), v)
		}
	}
	want := map[string]string{
		consumer.HeaderErrorCode:         code,
		consumer.HeaderAttempts:          strconv.Itoa(attempts),
		consumer.HeaderSourceTopic:       Topic,
		consumer.HeaderOriginalPartition: strconv.Itoa(int(src.Partition)),
		consumer.HeaderOriginalOffset:    strconv.FormatInt(int64(src.Offset), 10),
		consumer.HeaderConsumerGroup:     Group,
	}
	for k, v := range want {
		if h(k) != v {
			e.t.Errorf("DLQ header %s = %q, want %q", k, h(k), v)
		}
	}
	if at, err := time.Parse(time.RFC3339, h(consumer.HeaderDLQAt)); err != nil || time.Since(at) > time.Minute || time.Until(at) > time.Minute {
		e.t.Errorf("DLQ header %s = %q: not a recent RFC 3339 time (%v)", consumer.HeaderDLQAt, h(consumer.HeaderDLQAt), err)
	}
	if h(consumer.HeaderReason) == "" {
		e.t.Errorf("DLQ header %s is empty", consumer.HeaderReason)
	}
	if m.TopicPartition.Partition != src.Partition {
		e.t.Errorf("dead letter on DLQ partition %d, want the source's %d", m.TopicPartition.Partition, src.Partition)
	}
}

// deadLetterOf finds the dead letter of ev among msgs.
func deadLetterOf(t *testing.T, msgs []*kafka.Message, ev event) *kafka.Message {
	t.Helper()
	for _, m := range msgs {
		if bytes.Equal(m.Value, ev.value) {
			return m
		}
	}
	t.Fatalf("no dead letter for message %s", ev.messageID)
	return nil
}

// counter reads a metric of the running consumer.
func (e *env) counter(name string, labels map[string]string) float64 {
	return e.run.Counter(name, labels)
}

// logLines returns the JSON log lines whose message is msg.
func (e *env) logLines(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(e.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// resetGroup sets the group's committed offsets of the given source
// partitions, as `kafka-consumer-groups --reset-offsets` does, while no
// member of the group runs. Once the group exists, the mock cluster only
// takes commits from a member, so the reset joins the group for the commit.
func (e *env) resetGroup(offsets map[int32]int64) {
	e.t.Helper()
	topic := Topic
	var tps []kafka.TopicPartition
	for p, off := range offsets {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(off)})
	}
	sort.Slice(tps, func(i, j int) bool { return tps[i].Partition < tps[j].Partition })
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": e.kc.Bootstrap, "group.id": Group, "enable.auto.commit": false,
		"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CommitOffsets(tps); err == nil {
		return // a group no member ever joined
	}
	if err := c.Subscribe(Topic, nil); err != nil {
		e.t.Fatal(err)
	}
	kafkatest.Eventually(e.t, waitFor, func() bool {
		c.Poll(50)
		asg, err := c.Assignment()
		return err == nil && len(asg) == 6
	}, "the reset joins group %s", Group)
	if _, err := c.CommitOffsets(tps); err != nil {
		e.t.Fatalf("reset offsets of %s: %v", Group, err)
	}
}

// allPartitions maps each of the source's 6 partitions to offset.
func allPartitions(offset int64) map[int32]int64 {
	m := map[int32]int64{}
	for p := int32(0); p < 6; p++ {
		m[p] = offset
	}
	return m
}

// bond is a test bond: what its bond-created carries.
type bond struct {
	ID, Referred, Referrer uuid.UUID
	Company                *uuid.UUID
	BoundAt                time.Time
}

func newBond(referred uuid.UUID) bond {
	c := uuid.New()
	return bond{ID: uuid.New(), Referred: referred, Referrer: uuid.New(), Company: &c, BoundAt: baseTime.Add(-time.Hour)}
}

// baseTime is the event time of the tests' histories: a little in the past.
var baseTime = time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second)

// event is one envelope ready to produce.
type event struct {
	messageID uuid.UUID
	eventType string
	key       string
	value     []byte
	headers   map[string]string
}

func (ev event) idempotencyKey() string {
	if ev.eventType == EventTypeBondCreated {
		return KeyPrefixBondCreated + ev.messageID.String()
	}
	return KeyPrefixBondClosed + ev.messageID.String()
}

// envelope builds the JSON envelope of docs/contract.md §4.
func envelope(eventType string, aggregate uuid.UUID, key uuid.UUID, at time.Time, payload any) event {
	id := uuid.New()
	p, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	v, err := json.Marshal(map[string]any{
		"MessageId":       id,
		"EventType":       eventType,
		"ContractVersion": 1,
		"CreatedAt":       at.Format(time.RFC3339Nano),
		"AggregateId":     aggregate,
		"AggregateType":   "ReferralBond",
		"Payload":         json.RawMessage(p),
	})
	if err != nil {
		panic(err)
	}
	return event{messageID: id, eventType: eventType, key: key.String(), value: v,
		headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
}

// created is a bond-created of b at Version version and event time at.
func created(b bond, version int64, at time.Time) event {
	p := map[string]any{
		"BondId": b.ID, "ReferredUserId": b.Referred, "ReferrerUserId": b.Referrer,
		"BoundAt": b.BoundAt.Format(time.RFC3339), "Version": version,
		"ReferralLinkId": uuid.New(), "Channel": "Link", "AppliedRule": "R1",
	}
	if b.Company != nil {
		p["ReferrerCompanyId"] = *b.Company
	} else {
		p["ReferrerCompanyId"] = nil
	}
	return envelope(EventTypeBondCreated, b.ID, b.Referred, at, p)
}

// closed is a bond-closed of b with status.
func closed(b bond, status string, version int64, at time.Time) event {
	p := map[string]any{
		"BondId": b.ID, "ReferredUserId": b.Referred, "Status": status, "Version": version,
		"RevokeReason": secretReason,
	}
	if strings.EqualFold(status, "Replaced") { // required with it
		p["ReplacedByBondId"] = uuid.New()
	}
	return envelope(EventTypeBondClosed, b.ID, b.Referred, at, p)
}

// replaced is the bond-closed of old on a rebind to next.
func replaced(old, next bond, version int64, at time.Time) event {
	p := map[string]any{
		"BondId": old.ID, "ReferredUserId": old.Referred, "Status": "Replaced", "ReplacedByBondId": next.ID,
		"Version": version,
	}
	return envelope(EventTypeBondClosed, old.ID, old.Referred, at, p)
}

// redeliver is the same message again (same MessageId, same bytes).
func redeliver(ev event) event { return ev }

// secretReason must never appear in a log line.
const secretReason = "fraud: card 4111-1111-1111-1111 flagged by ops"

// checkRow compares a replica row with what it should hold.
func checkRow(t *testing.T, got *ent.ReferralBondReplica, b bond, status string, version int64, syncedAt time.Time) {
	t.Helper()
	if got == nil {
		t.Fatalf("bond %s: no replica row", b.ID)
	}
	if got.Status != status || got.ReplicaVersion != version || !got.SyncedAt.Equal(syncedAt) {
		t.Errorf("bond %s: status %s replica_version %d synced_at %s; want %s %d %s",
			b.ID, got.Status, got.ReplicaVersion, got.SyncedAt.UTC(), status, version, syncedAt.UTC())
	}
	if got.ReferredUserID != b.Referred || got.ReferrerUserID != b.Referrer || !got.BoundAt.Equal(b.BoundAt) ||
		!equalIDs(got.ReferrerCompanyID, b.Company) {
		t.Errorf("bond %s: source fields %v/%v/%v/%s, want %v/%v/%v/%s", b.ID,
			got.ReferredUserID, got.ReferrerUserID, fmtID(got.ReferrerCompanyID), got.BoundAt,
			b.Referred, b.Referrer, fmtID(b.Company), b.BoundAt)
	}
}

// checkNoSecrets fails when a log line carries the RevokeReason.
func (e *env) checkNoSecrets() {
	e.t.Helper()
	if strings.Contains(e.logs.String(), "4111-1111") || strings.Contains(e.logs.String(), "RevokeReason") {
		e.t.Error("a log line carries the RevokeReason")
	}
}

// testWriter sends the console log to t.Log, shown for failed tests and
// with -v.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a runtime goroutine may log after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
