package rewards

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/referralbondreplica"
)

// env is one end-to-end test: its own broker (source and DLQ topics with
// the contract's 6 partitions), its own migrated database, and the rewards
// consumer running against both once started.
type env struct{ *servicetest.Env }

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	return &env{servicetest.New(t, New, 6)}
}

// start runs the rewards consumer (group pin-rewards-referral-bonds).
func (e *env) start() {
	e.T.Helper()
	e.Start(consumertest.Options{
		// Commit stored offsets every 100 ms instead of every second: the
		// tests wait for commits after each step.
		Kafka: kafka.ConfigMap{"auto.commit.interval.ms": 100},
	})
}

// produce writes the events to the source topic, keyed by ReferredUserId
// (partitioned by key, as the producer does), and returns where they landed.
func (e *env) produce(evs ...event) []kafka.TopicPartition {
	e.T.Helper()
	msgs := make([]kafkatest.Message, len(evs))
	for i, ev := range evs {
		msgs[i] = ev.message()
	}
	return e.Produce(msgs...)
}

// waitCommitted waits until the group committed every produced message,
// and checks it committed nothing beyond.
func (e *env) waitCommitted() {
	e.T.Helper()
	e.AwaitCommitted(Group, e.Produced())
}

func (e *env) countMarks() int {
	e.T.Helper()
	n, err := e.Client.ProcessedMessage.Query().Count(context.Background())
	if err != nil {
		e.T.Fatal(err)
	}
	return n
}

// outcome is the outcome stored with a message's mark ("" without a mark).
func (e *env) outcome(ev event) string {
	e.T.Helper()
	return e.Outcome(ev.eventType, ev.messageID)
}

// row is the replica row of a bond, or nil.
func (e *env) row(id uuid.UUID) *ent.ReferralBondReplica {
	e.T.Helper()
	r, err := e.Client.ReferralBondReplica.Get(context.Background(), id)
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

// activeCount is how many Active rows a referred user has.
func (e *env) activeCount(referred uuid.UUID) int {
	e.T.Helper()
	n, err := e.Client.ReferralBondReplica.Query().
		Where(referralbondreplica.ReferredUserID(referred), referralbondreplica.Status("Active")).Count(context.Background())
	if err != nil {
		e.T.Fatal(err)
	}
	return n
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

// resetGroup sets the group's committed offsets of the given source
// partitions, as `kafka-consumer-groups --reset-offsets` does, while no
// member of the group runs. Once the group exists, the mock cluster only
// takes commits from a member, so the reset joins the group for the commit.
func (e *env) resetGroup(offsets map[int32]int64) {
	e.T.Helper()
	topic := Topic
	var tps []kafka.TopicPartition
	for p, off := range offsets {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(off)})
	}
	sort.Slice(tps, func(i, j int) bool { return tps[i].Partition < tps[j].Partition })
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": e.Cluster.Bootstrap, "group.id": Group, "enable.auto.commit": false,
		"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
	})
	if err != nil {
		e.T.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CommitOffsets(tps); err == nil {
		return // a group no member ever joined
	}
	if err := c.Subscribe(Topic, nil); err != nil {
		e.T.Fatal(err)
	}
	kafkatest.Eventually(e.T, servicetest.Wait, func() bool {
		c.Poll(50)
		asg, err := c.Assignment()
		return err == nil && len(asg) == 6
	}, "the reset joins group %s", Group)
	if _, err := c.CommitOffsets(tps); err != nil {
		e.T.Fatalf("reset offsets of %s: %v", Group, err)
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
	env       servicetest.Envelope // what value was built from
}

func (ev event) idempotencyKey() string {
	if ev.eventType == EventTypeBondCreated {
		return KeyPrefixBondCreated + ev.messageID.String()
	}
	return KeyPrefixBondClosed + ev.messageID.String()
}

// message is ev to produce: on the partition of its key.
func (ev event) message() kafkatest.Message {
	return kafkatest.Message{Partition: -1, Key: []byte(ev.key), Value: ev.value, Headers: ev.headers}
}

// edit is the same message (MessageId) with its envelope changed by fn.
func (ev event) edit(fn func(env *servicetest.Envelope)) event {
	fn(&ev.env)
	ev.value = ev.env.Value()
	return ev
}

// envelope builds the JSON envelope of docs/contract.md §4.1.
func envelope(eventType string, aggregate uuid.UUID, key uuid.UUID, at time.Time, payload any) event {
	env := servicetest.Envelope{MessageID: uuid.New(), EventType: eventType, CreatedAt: at,
		AggregateID: aggregate, AggregateType: "ReferralBond", Payload: payload}
	return event{messageID: env.MessageID, eventType: eventType, key: key.String(), value: env.Value(), env: env,
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
	e.T.Helper()
	if strings.Contains(e.Logs.String(), "4111-1111") || strings.Contains(e.Logs.String(), "RevokeReason") {
		e.T.Error("a log line carries the RevokeReason")
	}
}
