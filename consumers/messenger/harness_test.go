package messenger

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
	"github.com/pin-platform/pin/ent"
)

// env is one end-to-end set-up: a broker with the contract's topics (3
// partitions each), a fresh migrated database and the consumer running
// against both.
type env struct{ *servicetest.Env }

func newEnv(t *testing.T, o consumertest.Options) *env {
	t.Helper()
	e := &env{servicetest.New(t, New, 3)}
	e.Start(o)
	return e
}

// provision creates the lead's chat as the provisioning consumer would.
func (e *env) provision(lead uuid.UUID) uuid.UUID {
	e.T.Helper()
	id := uuid.New()
	e.Exec(`INSERT INTO chats (id, kind, lead_id) VALUES ($1, 'Lead', $2)`, id, lead)
	return id
}

// ev is a lead-participants-changed event as CRM publishes it.
type ev struct {
	ID        uuid.UUID
	Lead      uuid.UUID
	Version   int64
	Active    []member
	Delta     []change
	ChangedAt time.Time
	Partition int32 // -1 (by key) unless set with on()
}

type change struct {
	User         uuid.UUID
	Type, Role   string
	PreviousRole string
}

func newEv(lead uuid.UUID, version int64, active ...member) ev {
	return ev{
		ID: uuid.New(), Lead: lead, Version: version, Active: active, Partition: -1,
		ChangedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Add(time.Duration(version) * time.Minute),
	}
}

func (x ev) with(delta ...change) ev { x.Delta = delta; return x }
func (x ev) on(partition int32) ev   { x.Partition = partition; return x }

func (x ev) payload() map[string]any {
	active := make([]map[string]any, len(x.Active))
	for i, a := range x.Active {
		active[i] = map[string]any{"UserId": a.UserID, "Role": a.Role}
	}
	delta := make([]map[string]any, len(x.Delta))
	for i, d := range x.Delta {
		delta[i] = map[string]any{"UserId": d.User, "ChangeType": d.Type, "Role": d.Role}
		if d.PreviousRole != "" {
			delta[i]["PreviousRole"] = d.PreviousRole
		}
	}
	return map[string]any{
		"LeadId":             x.Lead,
		"TenantId":           tenant,
		"ChangedByUserId":    x.Lead, // any id: ignored
		"ActiveParticipants": active,
		"Participants":       delta,
		"Version":            x.Version,
		"ChangedAt":          x.ChangedAt.Format(time.RFC3339Nano),
	}
}

// createdAt is the CreatedAt of every test event: an event is a function
// of its fields, so that a test can build again what it sent.
var createdAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// envelope is x's envelope (docs/contract.md §4.1).
func (x ev) envelope() servicetest.Envelope {
	return servicetest.Envelope{MessageID: x.ID, EventType: EventType, CreatedAt: createdAt,
		AggregateID: x.Lead, AggregateType: "Lead", Payload: x.payload()}
}

func (x ev) message() kafkatest.Message { return x.envelope().Message(x.Lead, x.Partition, nil) }

// produce publishes events in order and returns where they landed.
func (e *env) produce(xs ...ev) []kafka.TopicPartition {
	e.T.Helper()
	ms := make([]kafkatest.Message, len(xs))
	for i, x := range xs {
		ms[i] = x.message()
	}
	return e.Produce(ms...)
}

// outcome returns the outcome stored in the message's idempotency mark, or
// "" when it has none.
func (e *env) outcome(id uuid.UUID) string {
	e.T.Helper()
	return e.Outcome(EventType, id)
}

// awaitOutcome waits for the message's idempotency mark and checks its
// outcome.
func (e *env) awaitOutcome(id uuid.UUID, want consumer.Outcome) {
	e.T.Helper()
	e.AwaitOutcome(EventType, id, want)
}

// awaitCommitted waits until the group's committed offsets are just past
// every given position.
func (e *env) awaitCommitted(tps ...kafka.TopicPartition) {
	e.T.Helper()
	e.AwaitCommitted(Group, servicetest.Past(tps...))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// chatState is what the database holds about a chat.
type chatState struct {
	LeadMemberVersion sql.NullInt64
	RowVersion        int64
}

func (e *env) chat(id uuid.UUID) chatState {
	e.T.Helper()
	return chatOf(e.T, e.DB, id)
}

func chatOf(t testing.TB, db *sql.DB, id uuid.UUID) chatState {
	t.Helper()
	var s chatState
	if err := db.QueryRow(`SELECT lead_member_version, row_version FROM chats WHERE id = $1`, id).
		Scan(&s.LeadMemberVersion, &s.RowVersion); err != nil {
		t.Fatalf("read chat: %v", err)
	}
	return s
}

// participant is a chat_participants row.
type participant struct {
	UserID  uuid.UUID
	Role    string
	Removed bool
}

func (e *env) participants(chatID uuid.UUID) []participant { return participantsOf(e.T, e.DB, chatID) }

func participantsOf(t testing.TB, db *sql.DB, chatID uuid.UUID) []participant {
	t.Helper()
	rows, err := db.Query(`SELECT user_id, role, removed_at IS NOT NULL FROM chat_participants WHERE chat_id = $1 ORDER BY user_id`, chatID)
	if err != nil {
		t.Fatalf("read participants: %v", err)
	}
	defer rows.Close()
	var out []participant
	for rows.Next() {
		var p participant
		if err := rows.Scan(&p.UserID, &p.Role, &p.Removed); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// active returns the chat's active members, sorted by user id.
func (e *env) active(chatID uuid.UUID) []member { return activeOf(e.T, e.DB, chatID) }

func activeOf(t testing.TB, db *sql.DB, chatID uuid.UUID) []member {
	t.Helper()
	var out []member
	for _, p := range participantsOf(t, db, chatID) {
		if !p.Removed {
			out = append(out, member{UserID: p.UserID, Role: p.Role})
		}
	}
	sortMembers(out)
	return out
}

// checkActive fails unless the chat's active members are exactly want.
func checkActive(t testing.TB, db *sql.DB, chatID uuid.UUID, want ...member) {
	t.Helper()
	want = slices.Clone(want)
	sortMembers(want)
	if got := activeOf(t, db, chatID); !slices.Equal(got, want) {
		t.Fatalf("active members %v, want %v", got, want)
	}
}

// chatEvent is a chat_events row.
type chatEvent struct {
	Type            string
	UserID          uuid.UUID
	Role            string
	PreviousRole    sql.NullString
	OccurredAt      time.Time
	SourceMessageID uuid.UUID
}

func (e *env) events(chatID uuid.UUID) []chatEvent { return eventsOf(e.T, e.DB, chatID) }

func eventsOf(t testing.TB, db *sql.DB, chatID uuid.UUID) []chatEvent {
	t.Helper()
	rows, err := db.Query(`SELECT type, user_id, role, previous_role, occurred_at, source_message_id
		FROM chat_events WHERE chat_id = $1 ORDER BY created_at, id`, chatID)
	if err != nil {
		t.Fatalf("read chat_events: %v", err)
	}
	defer rows.Close()
	var out []chatEvent
	for rows.Next() {
		var x chatEvent
		if err := rows.Scan(&x.Type, &x.UserID, &x.Role, &x.PreviousRole, &x.OccurredAt, &x.SourceMessageID); err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}

// eventsOfMessage returns the facts a message wrote.
func (e *env) eventsOfMessage(chatID, msgID uuid.UUID) []chatEvent {
	var out []chatEvent
	for _, x := range e.events(chatID) {
		if x.SourceMessageID == msgID {
			out = append(out, x)
		}
	}
	return out
}

// push is a chat_updates row.
type push struct {
	ID         uuid.UUID
	Recipients []uuid.UUID
	Revoked    []uuid.UUID
	Pushed     bool
}

func (e *env) pushes(chatID uuid.UUID) []push { return pushesOf(e.T, e.DB, chatID) }

func pushesOf(t testing.TB, db *sql.DB, chatID uuid.UUID) []push {
	t.Helper()
	rows, err := db.Query(`SELECT id, recipient_user_ids, revoked_user_ids, pushed_at IS NOT NULL
		FROM chat_updates WHERE chat_id = $1 ORDER BY created_at, id`, chatID)
	if err != nil {
		t.Fatalf("read chat_updates: %v", err)
	}
	defer rows.Close()
	var out []push
	for rows.Next() {
		var p push
		var rec, rev pq.StringArray
		if err := rows.Scan(&p.ID, &rec, &rev, &p.Pushed); err != nil {
			t.Fatal(err)
		}
		p.Recipients, p.Revoked = parseIDs(t, rec), parseIDs(t, rev)
		out = append(out, p)
	}
	return out
}

func parseIDs(t testing.TB, s []string) []uuid.UUID {
	out := make([]uuid.UUID, len(s))
	for i, v := range s {
		out[i] = uuid.MustParse(v)
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

func ids(us ...uuid.UUID) []uuid.UUID {
	out := slices.Clone(us)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	if out == nil {
		out = []uuid.UUID{}
	}
	return out
}

func sameIDs(a, b []uuid.UUID) bool { return slices.Equal(ids(a...), ids(b...)) }

// logged returns the consumer's log lines whose message begins with
// prefix and whose fields include every one of want.
func (e *env) logged(prefix string, want map[string]any) []map[string]any {
	return e.Logs.Lines(func(m map[string]any) bool {
		s, _ := m["message"].(string)
		return strings.HasPrefix(s, prefix) && servicetest.HasFields(m, want)
	})
}

// applyDirect runs the handler on x in its own transaction, as the runtime
// does (without the idempotency mark), and commits when it succeeds.
func applyDirect(ctx context.Context, client *ent.Client, h *handler, x ev) (consumer.Outcome, error) {
	tx, err := client.Tx(ctx)
	if err != nil {
		return "", err
	}
	m := &consumer.Message{Envelope: consumer.Envelope{
		MessageID: x.ID, EventType: EventType, ContractVersion: 1, Payload: must(json.Marshal(x.payload())),
	}, Topic: Topic}
	out, err := handleInTx(ctx, tx, h, m)
	if err != nil {
		_ = tx.Rollback()
		return "", err
	}
	return out, tx.Commit()
}

// handleInTx runs m in tx the way the runtime runs a transaction of one
// message, the mark aside: the service's read, the route on its view, then
// its write. It neither commits nor rolls back.
func handleInTx(ctx context.Context, tx *ent.Tx, h *handler, m *consumer.Message) (consumer.Outcome, error) {
	v, err := read(ctx, tx, []*consumer.Message{m})
	if err != nil {
		return "", err
	}
	out, err := h.handle(ctx, v, m)
	if err != nil {
		return "", err
	}
	return out, write(ctx, tx, v, nil)
}

// tenant is the TenantId of every test event (the consumer ignores it).
var tenant = uuid.MustParse("7e57e57e-0000-4000-8000-000000000001")

func jsonRaw(v any) (json.RawMessage, error) { return json.Marshal(v) }
