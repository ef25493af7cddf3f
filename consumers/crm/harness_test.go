package crm

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// harness is one test's world: a broker with the contract's topics (6
// partitions each), a fresh migrated database and, once started, the
// consumer.
type harness struct {
	*servicetest.Env
	pub   *recorder
	edits chan error // how each editLead ended
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return &harness{Env: servicetest.New(t, New, 6), pub: &recorder{}, edits: make(chan error, 64)}
}

// start runs the consumer with retry delays scaled by scale (0: the
// consumertest default, 0.001). group, when not empty, replaces the
// service's group (a replica filled from offset 0).
func (h *harness) start(scale float64, group string) *consumertest.Running {
	h.T.Helper()
	build := func(reg prometheus.Registerer) consumer.Service {
		svc := Options{Publisher: h.pub.publish}.New(reg)
		if group != "" {
			svc.Group = group
		}
		return svc
	}
	// Registered before Start: runs once the consumer stopped.
	h.T.Cleanup(func() {
		for _, l := range h.Logs.Find("handler panicked", nil) {
			h.T.Errorf("the handler panicked: %v\n%v", l["panic"], l["stack"])
		}
	})
	return h.StartService(build, consumertest.Options{RetryTimeScale: scale})
}

// testLead is a row of leads inserted by a test.
type testLead struct {
	ID, Tenant, Agent, Investor uuid.UUID
}

// insertLead inserts a lead of a new pair with the given status, the way
// the contract says tests insert leads.
func (h *harness) insertLead(status string) testLead {
	h.T.Helper()
	return h.insertLeadFor(uuid.New(), uuid.New(), status)
}

func (h *harness) insertLeadFor(agent, investor uuid.UUID, status string) testLead {
	h.T.Helper()
	l := testLead{ID: uuid.New(), Tenant: uuid.New(), Agent: agent, Investor: investor}
	h.Exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, $2, $3, $4, $5)`,
		l.ID, l.Tenant, l.Agent, l.Investor, status)
	return l
}

// retries is the spec's retry counter of code in class ("retry-now",
// "retry-later").
func (h *harness) retries(class string, code consumer.Code) float64 {
	return h.Run.Counter(MetricRetries, map[string]string{"class": class, "code": code.Name})
}

// waitParked waits for e's message to be parked with code; t is the
// (sub)test that waits.
func (h *harness) waitParked(t testing.TB, e *event, code consumer.Code) {
	t.Helper()
	kafkatest.Eventually(t, servicetest.Wait, func() bool {
		return len(h.Logs.Find("parked", map[string]any{"MessageId": e.MessageID.String(), "code": code.Name})) == 1
	}, "the message parked with %s", code.Name)
}

// execAsync is Exec for the consumer's goroutines (hooks): a failure is
// reported without stopping the goroutine.
func (h *harness) execAsync(q string, args ...any) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.DB.ExecContext(ctx, q, args...); err != nil {
		h.T.Errorf("%s: %v", q, err)
	}
}

// writerLike matches the writer's statement (writeSQL) in
// pg_stat_activity.
const writerLike = "WITH inserted AS (INSERT INTO%"

// editMoments are the two moments a test edits a lead at (editLead):
// before the writer's statement, or while it runs (held).
var editMoments = []struct {
	name string
	held bool
}{
	{"before the writer's statement", false},
	{"after the feed's insert, before the lock", true},
}

// editLead runs edit, an edit of leads, in a transaction of its own: for
// the writer's hook (testHookBeforeWriting). Held, the edit commits only
// once the writer's statement (writeSQL) waits for it, blocked by the
// edit's session: an edit that commits while that statement runs, after
// the feed's insert and before the leads' lock. How it ended goes to
// h.edits (checkEdits), which holds 64 unread.
func (h *harness) editLead(held bool, edit func(*sql.Tx) error) {
	tx, err := h.DB.Begin()
	var pid int
	if err == nil {
		if err = tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err == nil {
			err = edit(tx)
		}
		if err != nil {
			_ = tx.Rollback()
		}
	}
	if err != nil || !held {
		if err == nil {
			err = tx.Commit()
		}
		h.edits <- err
		return
	}
	go func() {
		deadline := time.Now().Add(servicetest.Wait)
		for {
			n, err := consumertest.BlockedBy(context.Background(), h.DB, writerLike, pid)
			if err == nil && n >= 1 {
				h.edits <- tx.Commit()
				return
			}
			if time.Now().After(deadline) {
				_ = tx.Rollback()
				h.edits <- fmt.Errorf("the writer's statement never waited for the edit (%v)", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// checkEdits fails t unless n edits (editLead) ended, each committed.
func (h *harness) checkEdits(t testing.TB, n int) {
	t.Helper()
	for i := range n {
		select {
		case err := <-h.edits:
			if err != nil {
				t.Fatalf("edit %d: %v", i+1, err)
			}
		case <-time.After(servicetest.Wait):
			t.Fatalf("%d of %d edits ended", i, n)
		}
	}
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

// envelope is e's envelope (docs/contract.md §4.1).
func (e *event) envelope() servicetest.Envelope {
	return servicetest.Envelope{MessageID: e.MessageID, EventType: EventType, ContractVersion: e.Version,
		CreatedAt: e.CreatedAt, AggregateID: e.SelectionID, AggregateType: "Selection", Payload: e.Payload}
}

func (e *event) value() []byte { return e.envelope().Value() }

func (e *event) message() kafkatest.Message {
	return e.envelope().Message(e.SelectionID, e.Partition, map[string]string{"x-test-origin": "crm"})
}

// produce writes the events in order and returns their offsets.
func (h *harness) produce(evs ...*event) []int64 {
	h.T.Helper()
	msgs := make([]kafkatest.Message, len(evs))
	for i, e := range evs {
		msgs[i] = e.message()
	}
	var offs []int64
	for _, tp := range h.Produce(msgs...) {
		offs = append(offs, int64(tp.Offset))
	}
	return offs
}

// outcome is the processed_messages outcome of the message ("" when it has
// no mark).
func (h *harness) outcome(id uuid.UUID) string {
	h.T.Helper()
	return h.Outcome(EventType, id)
}

func (h *harness) waitOutcome(id uuid.UUID, want consumer.Outcome) {
	h.T.Helper()
	h.AwaitOutcome(EventType, id, want)
}

// waitCommitted waits until the group committed offset want on partition.
func (h *harness) waitCommitted(group string, partition int32, want int64) {
	h.T.Helper()
	h.AwaitCommitted(group, map[int32]int64{partition: want})
}

// checkDeadLetter checks the DLQ copy of e, produced at offset
// (servicetest.Env.CheckDeadLetter).
func (h *harness) checkDeadLetter(m *kafka.Message, e *event, offset int64, code string, attempts int) {
	h.T.Helper()
	h.CheckDeadLetter(h.T, m, e.message(), kafka.TopicPartition{Partition: e.Partition, Offset: kafka.Offset(offset)}, code, attempts)
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
	h.T.Helper()
	return h.feedWhere(`source_message_id = $1`, msgID)
}

func (h *harness) feedOf(leadID uuid.UUID) []feedRow {
	h.T.Helper()
	return h.feedWhere(`lead_id = $1`, leadID)
}

func (h *harness) feedWhere(where string, arg any) []feedRow {
	h.T.Helper()
	rows, err := h.DB.Query(`SELECT id, lead_id, tenant_id, type, occurred_at, source_message_id, payload, created_by_user_id, created_at
		FROM lead_events WHERE `+where+` ORDER BY occurred_at`, arg)
	if err != nil {
		h.T.Fatal(err)
	}
	defer rows.Close()
	var out []feedRow
	for rows.Next() {
		var r feedRow
		if err := rows.Scan(&r.ID, &r.LeadID, &r.Tenant, &r.Type, &r.OccurredAt, &r.SourceMessageID, &r.Payload, &r.CreatedBy, &r.CreatedAt); err != nil {
			h.T.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		h.T.Fatal(err)
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
	h.T.Helper()
	var r leadRow
	if err := h.DB.QueryRow(`SELECT status, last_event_at, row_version, updated_at FROM leads WHERE id = $1`, id).
		Scan(&r.Status, &r.LastEventAt, &r.RowVersion, &r.UpdatedAt); err != nil {
		h.T.Fatal(err)
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

// micro truncates t to PostgreSQL's timestamp precision.
func micro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// hooks dispatches the writer's hook (testHookBeforeWriting) by lead.
type hooks struct {
	mu    sync.Mutex
	by    map[uuid.UUID]func()
	once1 map[uuid.UUID]bool
	calls map[uuid.UUID]int
}

// newHooks installs hooks as the writer's hook at
// (&testHookBeforeWriting) for the test. Tests that use it do not run in
// parallel: it is a package variable.
func newHooks(t *testing.T, at *func(context.Context, uuid.UUID)) *hooks {
	t.Helper()
	hk := &hooks{by: map[uuid.UUID]func(){}, once1: map[uuid.UUID]bool{}, calls: map[uuid.UUID]int{}}
	*at = func(_ context.Context, leadID uuid.UUID) {
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
	t.Cleanup(func() { *at = nil })
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
