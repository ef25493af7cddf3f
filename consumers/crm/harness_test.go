package crm

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// wait is the deadline of every poll in these tests.
const wait = 30 * time.Second

// harness is one test's world: a mock cluster with the contract's topics, a
// fresh migrated database and, once started, the consumer.
type harness struct {
	t    *testing.T
	kc   *kafkatest.Cluster
	db   *sql.DB
	url  string
	run  *consumertest.Running
	pub  *recorder
	logs *logSink
	// optimistic runs the consumer with Prepare's lead locks released as
	// soon as it has read (releasingLocks): the lead may then move between
	// its read and the write, which the writer's update, conditioned on
	// the row_version read and on status Active, must catch (spec step
	// 5). Tests that move the lead there (testHookBeforeWrite) need it: in
	// production the lead stays locked from Prepare's read to the commit,
	// so it cannot move.
	optimistic bool
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	kc := kafkatest.NewCluster(t, map[string]int{Topic: 6, DLQTopic: 6})
	_, db, url := pgtest.NewClient(t)
	return &harness{t: t, kc: kc, db: db, url: url, pub: &recorder{}, logs: &logSink{}}
}

// start runs the consumer with retry delays scaled by scale (0: the
// consumertest default, 0.001). group, when not empty, replaces the
// service's group (a replica filled from offset 0).
func (h *harness) start(scale float64, group string) *consumertest.Running {
	h.t.Helper()
	var w io.Writer = h.logs
	if testing.Verbose() {
		w = io.MultiWriter(h.logs, zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true})
	}
	log := zerolog.New(w).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	build := func(reg prometheus.Registerer) consumer.Service {
		svc := Options{Publisher: h.pub.publish}.New(reg)
		if h.optimistic {
			svc.Prepare = releasingLocks(svc.Prepare)
		}
		if group != "" {
			svc.Group = group
		}
		return svc
	}
	// Registered before Start: runs once the consumer stopped.
	h.t.Cleanup(func() {
		for _, l := range h.logs.lines("handler panicked", nil) {
			h.t.Errorf("the handler panicked: %v\n%v", l["panic"], l["stack"])
		}
	})
	h.run = consumertest.Start(h.t, h.kc.Bootstrap, h.url, build, consumertest.Options{RetryTimeScale: scale, Logger: &log})
	return h.run
}

// releasingLocks runs prepare in a savepoint that it rolls back at once:
// the view prepare returns keeps what it read, and the row locks it took
// are released.
func releasingLocks(prepare func(context.Context, *ent.Tx, []*consumer.Message) (context.Context, error)) func(context.Context, *ent.Tx, []*consumer.Message) (context.Context, error) {
	return func(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT crm_optimistic"); err != nil {
			return nil, err
		}
		hctx, err := prepare(ctx, tx, msgs)
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT crm_optimistic; RELEASE SAVEPOINT crm_optimistic"); rerr != nil && err == nil {
			err = rerr
		}
		return hctx, err
	}
}

// testLead is a row of leads inserted by a test.
type testLead struct {
	ID, Tenant, Agent, Investor uuid.UUID
}

// insertLead inserts a lead of a new pair with the given status, the way
// the contract says tests insert leads.
func (h *harness) insertLead(status string) testLead {
	h.t.Helper()
	return h.insertLeadFor(uuid.New(), uuid.New(), status)
}

func (h *harness) insertLeadFor(agent, investor uuid.UUID, status string) testLead {
	h.t.Helper()
	l := testLead{ID: uuid.New(), Tenant: uuid.New(), Agent: agent, Investor: investor}
	h.exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, $2, $3, $4, $5)`,
		l.ID, l.Tenant, l.Agent, l.Investor, status)
	return l
}

func (h *harness) exec(q string, args ...any) {
	h.t.Helper()
	if _, err := h.db.Exec(q, args...); err != nil {
		h.t.Fatalf("%s: %v", q, err)
	}
}

// execAsync is exec for the consumer's goroutines (hooks): a failure is
// reported without stopping the goroutine.
func (h *harness) execAsync(q string, args ...any) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.db.ExecContext(ctx, q, args...); err != nil {
		h.t.Errorf("%s: %v", q, err)
	}
}

func (h *harness) count(q string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRow(q, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// event is a selection-shared message to produce.
type event struct {
	MessageID   uuid.UUID
	SelectionID uuid.UUID
	Payload     map[string]any
	CreatedAt   time.Time
	Version     int
	Partition   int32
}

// newEvent is a valid event of action for lead l, on partition 0.
func newEvent(l testLead, action string, occurredAt time.Time) *event {
	sel := uuid.New()
	return &event{
		MessageID:   uuid.New(),
		SelectionID: sel,
		CreatedAt:   occurredAt,
		Version:     1,
		Payload: map[string]any{
			"SelectionId":          sel.String(),
			"SelectionTitle":       "Квартиры у парка",
			"PropertyObjectsCount": 7,
			"Action":               action,
			"AgentUserId":          l.Agent.String(),
			"InvestorUserId":       l.Investor.String(),
			"OccurredAt":           occurredAt.Format(time.RFC3339Nano),
		},
	}
}

func (e *event) on(partition int32) *event { e.Partition = partition; return e }

func (e *event) value() []byte {
	b, err := json.Marshal(map[string]any{
		"MessageId":       e.MessageID.String(),
		"EventType":       EventType,
		"ContractVersion": e.Version,
		"CreatedAt":       e.CreatedAt.UTC().Format(time.RFC3339Nano),
		"AggregateId":     e.SelectionID.String(),
		"AggregateType":   "Selection",
		"Payload":         e.Payload,
	})
	if err != nil {
		panic(err)
	}
	return b
}

func (e *event) message() kafkatest.Message {
	return kafkatest.Message{Partition: e.Partition, Key: []byte(e.SelectionID.String()), Value: e.value(),
		Headers: map[string]string{"x-test-origin": "crm"}}
}

// produce writes the events in order and returns their offsets.
func (h *harness) produce(evs ...*event) []int64 {
	h.t.Helper()
	msgs := make([]kafkatest.Message, len(evs))
	for i, e := range evs {
		msgs[i] = e.message()
	}
	var offs []int64
	for _, tp := range h.kc.Produce(h.t, Topic, msgs...) {
		offs = append(offs, int64(tp.Offset))
	}
	return offs
}

// outcome is the processed_messages outcome of the message ("" when it has
// no mark).
func (h *harness) outcome(id uuid.UUID) string {
	h.t.Helper()
	var out string
	err := h.db.QueryRow(`SELECT outcome FROM processed_messages WHERE idempotency_key = $1`, KeyPrefix+id.String()).Scan(&out)
	if err == sql.ErrNoRows {
		return ""
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *harness) waitOutcome(id uuid.UUID, want string) {
	h.t.Helper()
	kafkatest.Eventually(h.t, wait, func() bool { return h.outcome(id) == want }, "outcome of %s: got %q, want %q", id, h.outcome(id), want)
}

// waitCommitted waits until the group committed offset want on partition.
func (h *harness) waitCommitted(group string, partition int32, want int64) {
	h.t.Helper()
	kafkatest.Eventually(h.t, wait, func() bool {
		return h.kc.Committed(h.t, group, Topic)[partition] == want
	}, "committed offset of %s on partition %d: want %d", group, partition, want)
}

// dlq reads n dead letters.
func (h *harness) dlq(n int) []*kafka.Message {
	h.t.Helper()
	ms := h.kc.ReadAll(h.t, DLQTopic, n, wait)
	if len(ms) != n {
		h.t.Fatalf("read %d dead letters, want %d", len(ms), n)
	}
	return ms
}

// checkDeadLetter checks the DLQ copy of e: key, value and original
// headers byte for byte, and the contract's x-* headers.
func (h *harness) checkDeadLetter(m *kafka.Message, e *event, offset int64, code string, attempts int) {
	h.t.Helper()
	want := e.message()
	if !bytes.Equal(m.Key, want.Key) || !bytes.Equal(m.Value, want.Value) {
		h.t.Errorf("dead letter key/value differ from the original:\n%s\n%s", m.Value, want.Value)
	}
	if m.TopicPartition.Partition != e.Partition {
		h.t.Errorf("dead letter on DLQ partition %d, want %d (the source's)", m.TopicPartition.Partition, e.Partition)
	}
	hd := func(k string) string { return kafkatest.Header(m, k) }
	checks := map[string]string{
		"x-test-origin":                  "crm",
		consumer.HeaderErrorCode:         code,
		consumer.HeaderSourceTopic:       Topic,
		consumer.HeaderOriginalPartition: strconv.Itoa(int(e.Partition)),
		consumer.HeaderOriginalOffset:    strconv.FormatInt(offset, 10),
		consumer.HeaderConsumerGroup:     Group,
		consumer.HeaderAttempts:          strconv.Itoa(attempts),
	}
	for k, v := range checks {
		if got := hd(k); got != v {
			h.t.Errorf("dead letter header %s = %q, want %q", k, got, v)
		}
	}
	if hd(consumer.HeaderReason) == "" {
		h.t.Errorf("dead letter has no %s", consumer.HeaderReason)
	}
	if _, err := time.Parse(time.RFC3339, hd(consumer.HeaderDLQAt)); err != nil {
		h.t.Errorf("dead letter %s = %q: %v", consumer.HeaderDLQAt, hd(consumer.HeaderDLQAt), err)
	}
}

// feedRow is a lead_events row.
type feedRow struct {
	ID, LeadID, Tenant uuid.UUID
	Type               string
	OccurredAt         time.Time
	SourceMessageID    uuid.NullUUID
	Payload            []byte
	CreatedBy          uuid.NullUUID
	CreatedAt          time.Time
}

// feed returns the lead_events rows of the message.
func (h *harness) feed(msgID uuid.UUID) []feedRow {
	h.t.Helper()
	return h.feedWhere(`source_message_id = $1`, msgID)
}

func (h *harness) feedOf(leadID uuid.UUID) []feedRow {
	h.t.Helper()
	return h.feedWhere(`lead_id = $1`, leadID)
}

func (h *harness) feedWhere(where string, arg any) []feedRow {
	h.t.Helper()
	rows, err := h.db.Query(`SELECT id, lead_id, tenant_id, type, occurred_at, source_message_id, payload, created_by_user_id, created_at
		FROM lead_events WHERE `+where+` ORDER BY occurred_at`, arg)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []feedRow
	for rows.Next() {
		var r feedRow
		if err := rows.Scan(&r.ID, &r.LeadID, &r.Tenant, &r.Type, &r.OccurredAt, &r.SourceMessageID, &r.Payload, &r.CreatedBy, &r.CreatedAt); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// leadRow is the lead's mutable state.
type leadRow struct {
	Status      string
	LastEventAt sql.NullTime
	RowVersion  int64
	UpdatedAt   time.Time
}

func (h *harness) leadState(id uuid.UUID) leadRow {
	h.t.Helper()
	var r leadRow
	if err := h.db.QueryRow(`SELECT status, last_event_at, row_version, updated_at FROM leads WHERE id = $1`, id).
		Scan(&r.Status, &r.LastEventAt, &r.RowVersion, &r.UpdatedAt); err != nil {
		h.t.Fatal(err)
	}
	return r
}

// recorder is a Publisher that keeps the domain events.
type recorder struct {
	mu     sync.Mutex
	events []LeadEventAdded
}

func (r *recorder) publish(_ context.Context, e LeadEventAdded) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []LeadEventAdded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]LeadEventAdded(nil), r.events...)
}

// logSink keeps the consumer's JSON log lines.
type logSink struct{ consumertest.LogBuffer }

// lines returns the log lines whose message is msg and whose fields include
// every one of match.
func (s *logSink) lines(msg string, match map[string]string) []map[string]any {
	return s.Lines(func(l map[string]any) bool {
		if l["message"] != msg {
			return false
		}
		for k, v := range match {
			if s, _ := l[k].(string); s != v {
				return false
			}
		}
		return true
	})
}

// micro truncates t to PostgreSQL's timestamp precision.
func micro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// hooks dispatches testHookBeforeWrite by lead.
type hooks struct {
	mu    sync.Mutex
	by    map[uuid.UUID]func()
	once1 map[uuid.UUID]bool
	calls map[uuid.UUID]int
}

// newHooks installs testHookBeforeWrite for the test. Tests that use it do
// not run in parallel: it is a package variable.
func newHooks(t *testing.T) *hooks {
	t.Helper()
	hk := &hooks{by: map[uuid.UUID]func(){}, once1: map[uuid.UUID]bool{}, calls: map[uuid.UUID]int{}}
	testHookBeforeWrite = func(_ context.Context, leadID uuid.UUID) {
		hk.mu.Lock()
		fn := hk.by[leadID]
		hk.calls[leadID]++
		if hk.once1[leadID] {
			delete(hk.by, leadID)
		}
		hk.mu.Unlock()
		if fn != nil {
			fn()
		}
	}
	// Registered before the consumer starts, so it runs after it stopped.
	t.Cleanup(func() { testHookBeforeWrite = nil })
	return hk
}

// once runs fn at the first write of lead id.
func (hk *hooks) once(id uuid.UUID, fn func()) {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	hk.by[id], hk.once1[id] = fn, true
}

// always runs fn at every write of lead id; calls reports how many there
// were.
func (hk *hooks) always(id uuid.UUID, fn func()) (calls func() int) {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	hk.by[id] = fn
	return func() int {
		hk.mu.Lock()
		defer hk.mu.Unlock()
		return hk.calls[id]
	}
}
