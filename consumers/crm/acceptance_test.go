package crm

import (
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// The spec's acceptance criteria, each end to end: envelope produced on the
// mock cluster → the consumer → rows in PostgreSQL → committed offsets
// (→ the DLQ, with its headers, where the criterion dead-letters).

// AC1: an Active lead of the pair + Action Shared → a SelectionAttached
// entry with the payload, last_event_at = greatest(…), ack.
func TestAC1_SharedAppendsSelectionAttached(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	l := h.insertLead("Active")
	other := h.insertLead("Active")
	// An Expired lead of the same pair must not be picked.
	expired := h.insertLeadFor(l.Agent, l.Investor, "Expired")
	before := h.leadState(l.ID)

	at := micro(time.Now().Add(-time.Hour))
	e := newEvent(l, "Shared", at).on(2)
	e.CreatedAt = time.Now().Add(-time.Minute) // the lag metric is now − CreatedAt
	// Member names and enum values in another case work too (docs/contract.md §4).
	lower := newEvent(other, "sHaReD", at).on(2)
	for k, v := range lower.Payload {
		delete(lower.Payload, k)
		lower.Payload[strings.ToLower(k)] = v
	}
	offs := h.produce(e, lower)
	run := h.start(0, "")

	h.waitOutcome(e.MessageID, "attached")
	h.waitOutcome(lower.MessageID, "attached")
	h.waitCommitted(Group, 2, offs[1]+1)

	rows := h.feed(e.MessageID)
	if len(rows) != 1 {
		t.Fatalf("%d feed entries for the message, want 1", len(rows))
	}
	r := rows[0]
	if r.LeadID != l.ID || r.Tenant != l.Tenant || r.Type != "SelectionAttached" || !r.OccurredAt.Equal(at) ||
		r.SourceMessageID.UUID != e.MessageID || r.CreatedBy.Valid || r.CreatedAt.IsZero() {
		t.Fatalf("feed entry %+v: want lead %s, tenant %s (the lead's), SelectionAttached, occurred_at %s, source_message_id %s, created_by NULL",
			r, l.ID, l.Tenant, at, e.MessageID)
	}
	var payload map[string]any
	if err := json.Unmarshal(r.Payload, &payload); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"SelectionId": e.SelectionID.String(), "SelectionTitle": "Квартиры у парка", "PropertyObjectsCount": float64(7)}
	if len(payload) != len(want) {
		t.Fatalf("payload %s: want exactly the members SelectionId, SelectionTitle, PropertyObjectsCount", r.Payload)
	}
	for k, v := range want {
		if payload[k] != v {
			t.Fatalf("payload %s: %s = %v, want %v", r.Payload, k, payload[k], v)
		}
	}

	after := h.leadState(l.ID)
	if !after.LastEventAt.Valid || !after.LastEventAt.Time.Equal(at) {
		t.Fatalf("last_event_at %v, want greatest(NULL, %s) = %s", after.LastEventAt, at, at)
	}
	if after.RowVersion != before.RowVersion+1 || !after.UpdatedAt.After(before.UpdatedAt) || after.Status != "Active" {
		t.Fatalf("lead after the append %+v: want row_version %d, updated_at moved, status unchanged", after, before.RowVersion+1)
	}
	if n := len(h.feedOf(expired.ID)); n != 0 {
		t.Fatalf("%d entries on the Expired lead of the pair", n)
	}
	if rows := h.feed(lower.MessageID); len(rows) != 1 || rows[0].LeadID != other.ID || rows[0].Type != "SelectionAttached" {
		t.Fatalf("case-insensitive event: %+v", rows)
	}

	// The mark: group, topic, partition and offset of the source message.
	var group, topic string
	var part int32
	var off int64
	if err := h.DB.QueryRow(`SELECT consumer_group, topic, "partition", "offset" FROM processed_messages WHERE idempotency_key = $1`,
		KeyPrefix+e.MessageID.String()).Scan(&group, &topic, &part, &off); err != nil {
		t.Fatal(err)
	}
	if group != Group || topic != Topic || part != 2 || off != offs[0] {
		t.Fatalf("mark (%s, %s, %d, %d), want (%s, %s, 2, %d)", group, topic, part, off, Group, Topic, offs[0])
	}

	// The domain event, after commit.
	kafkatest.Eventually(t, servicetest.Wait, func() bool { return len(h.pub.all()) == 2 }, "2 LeadEventAdded, got %v", h.pub.all())
	found := false
	for _, ev := range h.pub.all() {
		if ev.LeadID == l.ID {
			found = ev == LeadEventAdded{LeadID: l.ID, EventID: r.ID, Type: SelectionAttached}
		}
	}
	if !found {
		t.Fatalf("LeadEventAdded %v: want {%s %s SelectionAttached}", h.pub.all(), l.ID, r.ID)
	}

	// Logs and metrics of the Observability section.
	if n := len(h.Logs.Find("attached", map[string]any{"MessageId": e.MessageID.String(), "SelectionId": e.SelectionID.String(),
		"LeadId": l.ID.String(), "Action": "Shared", "AgentUserId": l.Agent.String(), "InvestorUserId": l.Investor.String()})); n != 1 {
		t.Fatalf("%d 'attached' log lines with the spec's fields, want 1", n)
	}
	// At the default level a message logs one line, its outcome's, with
	// the fields of the spec's "consumed" too; "consumed" is a debug line.
	if n := len(h.Logs.Find("consumed", map[string]any{"MessageId": e.MessageID.String()})); n != 0 {
		t.Fatalf("%d 'consumed' lines at the default level, want 0 (debug)", n)
	}
	if n := run.Counter(MetricConsumeDuration, nil); n < 2 {
		t.Fatalf("%s has %v observations, want ≥ 2", MetricConsumeDuration, n)
	}
	if lag := run.Counter(MetricLag, nil); lag < 59 {
		t.Fatalf("%s = %v, want ≥ 60 (now − CreatedAt of the newest envelope)", MetricLag, lag)
	}
	if n := run.Counter(MetricDLQ, nil) + run.Counter(MetricDuplicates, nil) + run.Counter(MetricLeadNotFound, nil); n != 0 {
		t.Fatalf("DLQ, duplicates and lead-not-found counters sum to %v, want 0", n)
	}
}

// AC2: Action Opened → a SelectionViewed entry, ack.
func TestAC2_OpenedAppendsSelectionViewed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	l := h.insertLead("Active")
	at := micro(time.Now().Add(-time.Minute))
	e := newEvent(l, "Opened", at).on(4)
	offs := h.produce(e)
	h.start(0, "")

	h.waitOutcome(e.MessageID, "viewed")
	h.waitCommitted(Group, 4, offs[0]+1)
	rows := h.feed(e.MessageID)
	if len(rows) != 1 || rows[0].Type != "SelectionViewed" || rows[0].LeadID != l.ID || rows[0].Tenant != l.Tenant {
		t.Fatalf("feed entries %+v: want one SelectionViewed on lead %s", rows, l.ID)
	}
	var payload LeadSelectionPayload
	if err := json.Unmarshal(rows[0].Payload, &payload); err != nil || payload.SelectionID != e.SelectionID ||
		payload.SelectionTitle != "Квартиры у парка" || payload.PropertyObjectsCount != 7 {
		t.Fatalf("payload %s (%v)", rows[0].Payload, err)
	}
	if s := h.leadState(l.ID); !s.LastEventAt.Time.Equal(at) {
		t.Fatalf("last_event_at %v, want %s", s.LastEventAt, at)
	}
	kafkatest.Eventually(t, servicetest.Wait, func() bool { return len(h.pub.all()) == 1 }, "one LeadEventAdded")
	if got := h.pub.all()[0]; got != (LeadEventAdded{LeadID: l.ID, EventID: rows[0].ID, Type: SelectionViewed}) {
		t.Fatalf("LeadEventAdded %+v", got)
	}
	if n := len(h.Logs.Find("viewed", map[string]any{"MessageId": e.MessageID.String(), "LeadId": l.ID.String(), "Action": "Opened"})); n != 1 {
		t.Fatalf("%d 'viewed' log lines, want 1", n)
	}
}

// AC3: no Active lead → CRM_SELECTION_LEAD_NOT_FOUND, retried with backoff
// (parked, the partition goes on); the lead appears → appended; it never
// appears → DLQ after the first attempt and 6 retries.
func TestAC3_NoActiveLeadIsRetriedThenAppendedOrDeadLettered(t *testing.T) {
	t.Parallel()
	at := micro(time.Now().Add(-time.Hour))

	t.Run("the lead appears later: appended, and the partition did not wait", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		pair := testLead{Agent: uuid.New(), Investor: uuid.New()}
		waiting := newEvent(pair, "Shared", at).on(3)
		existing := h.insertLead("Active")
		next := newEvent(existing, "Shared", at).on(3)
		offs := h.produce(waiting, next)
		// Retries after 0.3, 0.6, 1.2, … s: 18.9 s before the DLQ, ample
		// time to look at the waiting message.
		run := h.start(0.01, "")

		// The later event of the same partition is applied while the
		// first waits, and the partition's offset moves past both.
		h.waitOutcome(next.MessageID, "attached")
		h.waitCommitted(Group, 3, offs[1]+1)
		if out := h.outcome(waiting.MessageID); out != "" || len(h.feed(waiting.MessageID)) != 0 {
			t.Fatalf("the waiting message has outcome %q and %d entries, want none", out, len(h.feed(waiting.MessageID)))
		}
		// Retried with backoff: parked, then re-driven at least once.
		kafkatest.Eventually(t, servicetest.Wait, func() bool {
			return h.Count(`SELECT count(*) FROM parked_messages WHERE message_id = $1 AND error_code = $2 AND attempts >= 2`,
				waiting.MessageID, CodeLeadNotFound.Name) == 1
		}, "the waiting message parked and retried")
		if n := run.Counter(MetricLeadNotFound, nil); n < 2 {
			t.Fatalf("%s = %v, want ≥ 2", MetricLeadNotFound, n)
		}
		if n := run.Counter(MetricRetries, map[string]string{"class": "retry-later", "code": CodeLeadNotFound.Name}); n < 2 {
			t.Fatalf("%s{retry-later, %s} = %v, want ≥ 2", MetricRetries, CodeLeadNotFound.Name, n)
		}
		if n := len(h.Logs.Find("skipped-lead-not-found", map[string]any{"MessageId": waiting.MessageID.String(),
			"SelectionId": waiting.SelectionID.String(), "Action": "Shared", "AgentUserId": pair.Agent.String(),
			"InvestorUserId": pair.Investor.String()})); n < 2 {
			t.Fatalf("%d 'skipped-lead-not-found' log lines with the spec's fields, want ≥ 2", n)
		}

		l := h.insertLeadFor(pair.Agent, pair.Investor, "Active")
		h.waitOutcome(waiting.MessageID, "attached")
		rows := h.feed(waiting.MessageID)
		if len(rows) != 1 || rows[0].LeadID != l.ID || rows[0].Tenant != l.Tenant {
			t.Fatalf("entries %+v: want one on the new lead %s", rows, l.ID)
		}
		kafkatest.Eventually(t, servicetest.Wait, func() bool {
			return h.Count(`SELECT count(*) FROM parked_messages`) == 0
		}, "the parked row removed")
		// The re-driven append raises its domain event too.
		kafkatest.Eventually(t, servicetest.Wait, func() bool {
			for _, ev := range h.pub.all() {
				if ev == (LeadEventAdded{LeadID: l.ID, EventID: rows[0].ID, Type: SelectionAttached}) {
					return true
				}
			}
			return false
		}, "LeadEventAdded of the re-driven append, got %v", h.pub.all())
		if n := h.Cluster.Count(t, DLQTopic); n != 0 {
			t.Fatalf("%d dead letters, want 0", n)
		}
	})

	t.Run("the lead never appears: DLQ with x-attempts 7", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		e := newEvent(testLead{Agent: uuid.New(), Investor: uuid.New()}, "Shared", at).on(5)
		began := time.Now()
		offs := h.produce(e)
		run := h.start(0, "") // RETRY_TIME_SCALE 0.001: 30 ms … 960 ms, 1.89 s in all

		h.waitCommitted(Group, 5, offs[0]+1) // acknowledged once parked
		ms := h.AwaitDLQ(1)
		if took := time.Since(began); took < 1890*time.Millisecond {
			t.Fatalf("dead-lettered after %s: the backoff (30, 60, 120, 240, 480, 960 s × 0.001) was not waited", took)
		}
		h.checkDeadLetter(ms[0], e, offs[0], CodeLeadNotFound.Name, 7)
		kafkatest.Eventually(t, servicetest.Wait, func() bool {
			return h.Count(`SELECT count(*) FROM parked_messages`) == 0
		}, "the parked row removed")
		if out := h.outcome(e.MessageID); out != "" || len(h.feed(e.MessageID)) != 0 {
			t.Fatalf("dead-lettered message has outcome %q and %d entries, want none", out, len(h.feed(e.MessageID)))
		}
		if n := run.Counter(MetricLeadNotFound, nil); n != 7 {
			t.Fatalf("%s = %v, want 7 (one per attempt)", MetricLeadNotFound, n)
		}
		if n := run.Counter(MetricRetries, map[string]string{"class": "retry-later", "code": CodeLeadNotFound.Name}); n != 6 {
			t.Fatalf("%s{retry-later} = %v, want 6", MetricRetries, n)
		}
		if n := run.Counter(MetricDLQ, map[string]string{"code": CodeLeadNotFound.Name}); n != 1 {
			t.Fatalf("%s{%s} = %v, want 1", MetricDLQ, CodeLeadNotFound.Name, n)
		}
		if n := len(h.Logs.Find("dead-lettered", map[string]any{"MessageId": e.MessageID.String(), "code": CodeLeadNotFound.Name,
			"SelectionId": e.SelectionID.String(), "Action": "Shared"})); n != 1 {
			t.Fatalf("%d 'dead-lettered' log lines with the spec's fields, want 1", n)
		}
	})
}

// AC4: an Action outside SelectionShareAction →
// CRM_SELECTION_UNKNOWN_ACTION in the DLQ at once (and the alert's counter).
func TestAC4_UnknownActionIsDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	l := h.insertLead("Active")
	at := micro(time.Now().Add(-time.Minute))
	bad := newEvent(l, "Forwarded", at).on(1)
	good := newEvent(l, "Shared", at).on(1)
	offs := h.produce(bad, good)
	run := h.start(0, "")

	h.waitOutcome(good.MessageID, "attached") // the partition goes on
	h.waitCommitted(Group, 1, offs[1]+1)
	ms := h.AwaitDLQ(1)
	h.checkDeadLetter(ms[0], bad, offs[0], CodeUnknownAction.Name, 1)
	if r := kafkatest.Header(ms[0], "x-dlq-reason"); !strings.Contains(r, `"Forwarded"`) {
		t.Fatalf("x-dlq-reason %q does not name the value", r)
	}
	if out := h.outcome(bad.MessageID); out != "" || len(h.feed(bad.MessageID)) != 0 {
		t.Fatalf("dead-lettered message has outcome %q and %d entries, want none (a replay processes it again)", out, len(h.feed(bad.MessageID)))
	}
	if n := run.Counter(MetricDLQ, map[string]string{"code": CodeUnknownAction.Name}); n != 1 {
		t.Fatalf("%s{%s} = %v, want 1", MetricDLQ, CodeUnknownAction.Name, n)
	}
	if n := run.Counter(MetricRetries, nil); n != 0 {
		t.Fatalf("%s = %v, want 0: not retried", MetricRetries, n)
	}
	if n := len(h.Logs.Find("dead-lettered", map[string]any{"MessageId": bad.MessageID.String(), "code": CodeUnknownAction.Name,
		"SelectionId": bad.SelectionID.String(), "Action": "Forwarded", "AgentUserId": l.Agent.String(), "InvestorUserId": l.Investor.String()})); n != 1 {
		t.Fatalf("%d 'dead-lettered' log lines with the spec's fields, want 1", n)
	}
}

// AC5: the same MessageId again, or a replay from offset 0, appends
// nothing twice; both idempotency layers count as duplicates.
func TestAC5_RedeliveryAndReplayDuplicateNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	l := h.insertLead("Active")
	at := micro(time.Now().Add(-time.Hour))
	e := newEvent(l, "Shared", at).on(0)
	again := *e // the same message once more, on another partition (a producer retry)
	again.Partition = 3
	// The second layer: a feed entry of this message exists but its mark
	// does not (the key cache was bypassed: a lost mark, another writer).
	// Its OccurredAt is later, so a lead update would show.
	pre := newEvent(l, "Shared", at.Add(time.Minute)).on(0)
	h.Exec(`INSERT INTO lead_events (lead_id, tenant_id, type, occurred_at, source_message_id, payload)
		VALUES ($1, $2, 'SelectionAttached', $3, $4, '{"pre": true}')`, l.ID, l.Tenant, at.Add(time.Minute), pre.MessageID)

	offs := h.produce(e, e, pre)
	offs3 := h.produce(&again)
	run := h.start(0, "")

	h.waitOutcome(e.MessageID, "attached")
	h.waitOutcome(pre.MessageID, "skipped-duplicate")
	h.waitCommitted(Group, 0, offs[2]+1)
	h.waitCommitted(Group, 3, offs3[0]+1)
	check := func(stage string) {
		t.Helper()
		if rows := h.feed(e.MessageID); len(rows) != 1 {
			t.Fatalf("%s: %d entries of the message, want 1", stage, len(rows))
		}
		if rows := h.feed(pre.MessageID); len(rows) != 1 || string(rows[0].Payload) != `{"pre": true}` {
			t.Fatalf("%s: entries of the pre-existing message %+v, want the one row as it was", stage, rows)
		}
		if n := h.Count(`SELECT count(*) FROM lead_events`); n != 2 {
			t.Fatalf("%s: %d feed entries, want 2", stage, n)
		}
		s := h.leadState(l.ID)
		if s.RowVersion != 1 || !s.LastEventAt.Time.Equal(at) {
			t.Fatalf("%s: lead %+v: want row_version 1 and last_event_at %s (duplicates leave it alone)", stage, s, at)
		}
		if n := h.Count(`SELECT count(*) FROM processed_messages`); n != 2 {
			t.Fatalf("%s: %d marks, want 2", stage, n)
		}
		if n := len(h.pub.all()); n != 1 {
			t.Fatalf("%s: %d LeadEventAdded, want 1", stage, n)
		}
	}
	check("redelivery")
	// Both layers are counted: the second copy on partition 0 (the key),
	// the copy on partition 3 (the key, or the unique index when it raced
	// the first), and pre (the unique index only).
	h.AwaitCounter(MetricDuplicates, nil, 3)
	if n := len(h.Logs.Find("skipped-duplicate", map[string]any{"MessageId": pre.MessageID.String(),
		"duplicate": "source_message_id", "LeadId": l.ID.String()})); n != 1 {
		t.Fatalf("%d 'skipped-duplicate' log lines for the second layer, want 1", n)
	}

	// A replica filled from offset 0: a new group reads everything again.
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}
	h.start(0, "crm-selections-replay")
	h.waitCommitted("crm-selections-replay", 0, offs[2]+1)
	h.waitCommitted("crm-selections-replay", 3, offs3[0]+1)
	h.AwaitCounter(MetricDuplicates, nil, 4)
	check("replay")
}

// AC6: the lead leaves Active between its resolution and the write →
// CRM_LEAD_NOT_ACTIVE, nothing appended; handled like a missing lead.
func TestAC6_LeadLeavingActiveBeforeTheWriteAppendsNothing(t *testing.T) {
	// Where production meets it: before the writer's statement, or while
	// it runs, between the feed's insert and the lock (held: the expiry
	// commits once the lock waits for it).
	for _, where := range editMoments {
		t.Run(where.name, func(t *testing.T) {
			h := newHarness(t)
			hooks := newHooks(t, &testHookBeforeWriting)
			h.start(0, "")
			at := micro(time.Now().Add(-time.Hour))
			expire := func(tx *sql.Tx, id uuid.UUID) error {
				_, err := tx.Exec(`UPDATE leads SET status = 'Expired', row_version = row_version + 1, updated_at = now() WHERE id = $1`, id)
				return err
			}

			t.Run("it stays inactive: not appended, retried, then the DLQ", func(t *testing.T) {
				l := h.insertLead("Active")
				hooks.once(l.ID, func() { h.editLead(where.held, func(tx *sql.Tx) error { return expire(tx, l.ID) }) })
				e := newEvent(l, "Shared", at).on(1)
				offs := h.produce(e)

				h.waitParked(t, e, CodeLeadNotActive)
				h.checkEdits(t, 1)
				if n := h.retries("retry-later", CodeLeadNotActive); n != 1 {
					t.Fatalf("%s{retry-later, %s} = %v, want 1", MetricRetries, CodeLeadNotActive.Name, n)
				}
				h.waitCommitted(Group, 1, offs[0]+1)
				// The later attempts find no Active lead for the pair.
				ms := h.AwaitDLQ(1)
				h.checkDeadLetter(ms[0], e, offs[0], CodeLeadNotFound.Name, 7)
				if n := len(h.feedOf(l.ID)); n != 0 {
					t.Fatalf("%d entries on the lead that left Active, want 0", n)
				}
				if s := h.leadState(l.ID); s.Status != "Expired" || s.RowVersion != 1 || s.LastEventAt.Valid {
					t.Fatalf("lead %+v: want Expired, row_version 1 (the expiry's), last_event_at NULL", s)
				}
				if out := h.outcome(e.MessageID); out != "" {
					t.Fatalf("outcome %q, want no mark", out)
				}
			})

			t.Run("the pair's lead is renewed: the retry appends to the new Active lead", func(t *testing.T) {
				old := h.insertLead("Active")
				renewed := testLead{ID: uuid.New(), Tenant: uuid.New(), Agent: old.Agent, Investor: old.Investor}
				hooks.once(old.ID, func() {
					h.editLead(where.held, func(tx *sql.Tx) error {
						if err := expire(tx, old.ID); err != nil {
							return err
						}
						_, err := tx.Exec(`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status)
							VALUES ($1, $2, $3, $4, 'Active')`, renewed.ID, renewed.Tenant, renewed.Agent, renewed.Investor)
						return err
					})
				})
				e := newEvent(old, "Shared", at).on(2)
				h.produce(e)

				h.waitOutcome(e.MessageID, "attached")
				h.checkEdits(t, 1)
				if n := len(h.feedOf(old.ID)); n != 0 {
					t.Fatalf("%d entries on the lead that left Active, want 0", n)
				}
				rows := h.feed(e.MessageID)
				if len(rows) != 1 || rows[0].LeadID != renewed.ID || rows[0].Tenant != renewed.Tenant {
					t.Fatalf("entries %+v: want one on the renewed lead %s", rows, renewed.ID)
				}
				if n := h.retries("retry-later", CodeLeadNotActive); n != 2 {
					t.Fatalf("%s{retry-later, %s} = %v, want 2", MetricRetries, CodeLeadNotActive.Name, n)
				}
			})
		})
	}
}

// A lead whose tenant changes at every attempt, while the writer's
// statement runs (after the feed's insert, before the lock: held), is
// re-run at once in a fresh transaction, 3 times, re-reading the lead
// each time, then dead-lettered as CRM_CONCURRENT_UPDATE (x-attempts 4)
// with nothing appended.
func TestConcurrentEditOfTheLeadIsRetriedThenDeadLettered(t *testing.T) {
	h := newHarness(t)
	hooks := newHooks(t, &testHookBeforeWriting)
	h.start(0, "")
	at := micro(time.Now().Add(-time.Hour))
	l := h.insertLead("Active")
	calls := hooks.always(l.ID, func() {
		h.editLead(true, func(tx *sql.Tx) error {
			_, err := tx.Exec(`UPDATE leads SET tenant_id = gen_random_uuid(), row_version = row_version + 1, updated_at = now() WHERE id = $1`, l.ID)
			return err
		})
	})
	e := newEvent(l, "Shared", at).on(4)
	offs := h.produce(e)
	ms := h.AwaitDLQ(1)
	h.checkDeadLetter(ms[0], e, offs[0], CodeConcurrentUpdate.Name, 4)
	h.waitCommitted(Group, 4, offs[0]+1)
	h.checkEdits(t, 4)
	if n := len(h.feedOf(l.ID)); n != 0 {
		t.Fatalf("%d entries, want 0", n)
	}
	if n := calls(); n != 4 {
		t.Fatalf("%d attempts reached the writer, want 4", n)
	}
	if s := h.leadState(l.ID); s.RowVersion != 4 || s.LastEventAt.Valid {
		t.Fatalf("lead %+v: want row_version 4 (the edits' only), last_event_at NULL", s)
	}
	if n := h.retries("retry-now", CodeConcurrentUpdate); n != 3 {
		t.Fatalf("%s{retry-now} = %v, want 3 (the 4th attempt is dead-lettered)", MetricRetries, n)
	}
}

// An edit that holds the lead when the writer comes to lock it (another
// lane's writer, the CRM's own edit) is waited for, and the writer takes
// the lead as the edit left it: appended on the row_version moved, with
// no retry. The test fails when the update misses a lead its lock had to
// wait for (a condition the newest version never met).
func TestAnEditHoldingTheLeadIsWaitedForAndTaken(t *testing.T) {
	h := newHarness(t)
	hooks := newHooks(t, &testHookBeforeWriting)
	h.start(0, "")
	at := micro(time.Now().Add(-time.Hour))
	l := h.insertLead("Active")
	hooks.once(l.ID, func() {
		h.editLead(true, func(tx *sql.Tx) error {
			_, err := tx.Exec(`UPDATE leads SET row_version = row_version + 5, updated_at = now() WHERE id = $1`, l.ID)
			return err
		})
	})
	e := newEvent(l, "Shared", at).on(2)
	offs := h.produce(e)
	h.waitOutcome(e.MessageID, "attached")
	h.waitCommitted(Group, 2, offs[0]+1)
	h.checkEdits(t, 1)
	if s := h.leadState(l.ID); s.RowVersion != 6 || !s.LastEventAt.Time.Equal(at) {
		t.Fatalf("lead %+v: want row_version 6 (the edit's 5 and ours), last_event_at %s", s, at)
	}
	if n := h.retries("retry-now", CodeConcurrentUpdate); n != 0 {
		t.Fatalf("%s{retry-now} = %v, want 0", MetricRetries, n)
	}
}

// An edit of the lead after Read resolved it and before the writer locked
// it is what production meets (Read locks nothing): the writer reads the
// lead again under its lock. An edit that leaves the lead as the event
// needs it (a row_version moved) is taken as it is, with no retry; another
// tenant or pair is a race with an operation on the lead, re-run at once
// on a fresh read: the entry takes the lead's tenant now (CRM-4), and a
// lead of another pair is not the event's.
func TestAnEditBeforeTheWritersLockIsReadUnderIt(t *testing.T) {
	h := newHarness(t)
	hooks := newHooks(t, &testHookBeforeWriting)
	h.start(0, "")
	at := micro(time.Now().Add(-time.Hour))
	// editOnce sets set (and updated_at) on lead l at its first write,
	// before the lock; args are $2, ….
	editOnce := func(l testLead, set string, args ...any) {
		hooks.once(l.ID, func() {
			h.execAsync(`UPDATE leads SET `+set+`, updated_at = now() WHERE id = $1`, append([]any{l.ID}, args...)...)
		})
	}

	t.Run("row_version moved: appended on it, no retry", func(t *testing.T) {
		l := h.insertLead("Active")
		editOnce(l, `row_version = row_version + 5`)
		e := newEvent(l, "Shared", at).on(0)
		offs := h.produce(e)
		h.waitOutcome(e.MessageID, "attached")
		h.waitCommitted(Group, 0, offs[0]+1)
		if s := h.leadState(l.ID); s.RowVersion != 6 || !s.LastEventAt.Time.Equal(at) {
			t.Fatalf("lead %+v: want row_version 6 (the edit's 5 and ours), last_event_at %s", s, at)
		}
		if n := h.retries("retry-now", CodeConcurrentUpdate); n != 0 {
			t.Fatalf("%s{retry-now} = %v, want 0", MetricRetries, n)
		}
	})

	t.Run("another tenant: re-run at once, the entry in the tenant now", func(t *testing.T) {
		l := h.insertLead("Active")
		moved := uuid.New()
		editOnce(l, `tenant_id = $2, row_version = row_version + 1`, moved)
		e := newEvent(l, "Shared", at).on(3)
		offs := h.produce(e)
		h.waitOutcome(e.MessageID, "attached")
		h.waitCommitted(Group, 3, offs[0]+1)
		if rows := h.feed(e.MessageID); len(rows) != 1 || rows[0].LeadID != l.ID || rows[0].Tenant != moved {
			t.Fatalf("entries %+v, want one on %s in tenant %s", rows, l.ID, moved)
		}
		if n := h.retries("retry-now", CodeConcurrentUpdate); n != 1 {
			t.Fatalf("%s{retry-now} = %v, want 1", MetricRetries, n)
		}
	})

	t.Run("another agent: re-run at once, the pair's lead then not found", func(t *testing.T) {
		l := h.insertLead("Active")
		editOnce(l, `executor_agent_user_id = $2, row_version = row_version + 1`, uuid.New())
		e := newEvent(l, "Shared", at).on(4)
		h.produce(e)
		h.waitParked(t, e, CodeLeadNotFound)
		if rows := h.feed(e.MessageID); len(rows) != 0 {
			t.Fatalf("entries %+v on a lead of another pair, want none", rows)
		}
		if n := h.retries("retry-now", CodeConcurrentUpdate); n != 2 {
			t.Fatalf("%s{retry-now} = %v, want 2 (the tenant's and this one)", MetricRetries, n)
		}
	})
}

// A lead deleted after Read resolved it (a lead without entries; the
// feed's foreign key keeps the others), before the writer's statement or
// while it runs (held: the delete commits once the statement's lock waits
// for it, after the feed's insert), fails the statement's foreign-key
// check, which names no message: the batch's messages go again alone,
// where the deleted lead's finds no lead, as any missing lead (its 7
// attempts, then the DLQ with that code, never another), and the other
// is appended.
func TestALeadDeletedBeforeTheWriteIsNotFound(t *testing.T) {
	for _, where := range editMoments {
		t.Run(where.name, func(t *testing.T) {
			h := newHarness(t)
			hooks := newHooks(t, &testHookBeforeWriting)
			at := micro(time.Now().Add(-time.Hour))
			gone, kept := h.insertLead("Active"), h.insertLead("Active")
			hooks.once(gone.ID, func() {
				h.editLead(where.held, func(tx *sql.Tx) error {
					_, err := tx.Exec(`DELETE FROM leads WHERE id = $1`, gone.ID)
					return err
				})
			})
			e, other := newEvent(gone, "Shared", at).on(5), newEvent(kept, "Shared", at).on(5)
			offs := h.produce(e, other) // before the start: one batch
			h.start(0, "")
			h.waitOutcome(other.MessageID, "attached")
			h.checkEdits(t, 1)
			ms := h.AwaitDLQ(1)
			h.checkDeadLetter(ms[0], e, offs[0], CodeLeadNotFound.Name, 7)
			h.waitCommitted(Group, 5, offs[1]+1)
			if n := h.Count(`SELECT count(*) FROM lead_events WHERE source_message_id = $1`, e.MessageID); n != 0 {
				t.Fatalf("%d entries of the deleted lead's event, want 0", n)
			}
		})
	}
}

// AC7: a title of 300 characters is stored cut to 256 characters (runes,
// never bytes), with a warning; the event is kept.
func TestAC7_LongTitleIsCutTo256CharactersWithAWarning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	l := h.insertLead("Active")
	at := micro(time.Now().Add(-time.Minute))
	long := strings.Repeat("Дом🏠", 75) // 300 characters of 2 and 4 bytes: 750 bytes
	long256 := string([]rune(long)[:256])
	exact := strings.Repeat("ж", 256)
	e := newEvent(l, "Shared", at).on(0)
	e.Payload["SelectionTitle"] = long
	e2 := newEvent(l, "Opened", at).on(0)
	e2.Payload["SelectionTitle"] = exact
	offs := h.produce(e, e2)
	h.start(0, "")

	h.waitOutcome(e.MessageID, "attached")
	h.waitOutcome(e2.MessageID, "viewed")
	h.waitCommitted(Group, 0, offs[1]+1)
	var title string
	var chars, bytes int
	if err := h.DB.QueryRow(`SELECT payload->>'SelectionTitle', char_length(payload->>'SelectionTitle'), octet_length(payload->>'SelectionTitle')
		FROM lead_events WHERE source_message_id = $1`, e.MessageID).Scan(&title, &chars, &bytes); err != nil {
		t.Fatal(err)
	}
	if title != long256 || chars != 256 || bytes != len(long256) {
		t.Fatalf("stored title of %d characters, %d bytes; want the first 256 characters of the original (%d bytes)", chars, bytes, len(long256))
	}
	warns := h.Logs.Find("selection-title-truncated", map[string]any{"level": "warn", "MessageId": e.MessageID.String(),
		"SelectionId": e.SelectionID.String(), "Action": "Shared"})
	if len(warns) == 0 || warns[0]["SelectionTitleRunes"] != float64(300) {
		t.Fatalf("warnings %v: want one naming the 300-character title", warns)
	}
	if err := h.DB.QueryRow(`SELECT payload->>'SelectionTitle' FROM lead_events WHERE source_message_id = $1`, e2.MessageID).Scan(&title); err != nil || title != exact {
		t.Fatalf("a title of exactly 256 characters must be kept whole (%v)", err)
	}
	if n := len(h.Logs.Find("selection-title-truncated", map[string]any{"MessageId": e2.MessageID.String()})); n != 0 {
		t.Fatalf("%d warnings for a 256-character title, want 0", n)
	}
}

// AC8: an older OccurredAt never moves last_event_at backwards.
func TestAC8_OlderOccurredAtNeverMovesLastEventAtBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	t0 := micro(time.Now().Add(-10 * time.Hour))
	t1, t2 := t0.Add(time.Hour), t0.Add(2*time.Hour)
	l := h.insertLead("Active")
	h.Exec(`UPDATE leads SET last_event_at = $2 WHERE id = $1`, l.ID, t0)
	ahead := h.insertLead("Active") // a feed already ahead of every event
	future := micro(time.Now().Add(24 * time.Hour))
	h.Exec(`UPDATE leads SET last_event_at = $2 WHERE id = $1`, ahead.ID, future)

	newest := newEvent(l, "Shared", t2).on(0)
	older := newEvent(l, "Opened", t1).on(0)
	oldest := newEvent(l, "Shared", t0.Add(-time.Hour)).on(0)
	behind := newEvent(ahead, "Shared", t1).on(0)
	offs := h.produce(newest, older, oldest, behind)
	h.start(0, "")

	for _, e := range []*event{newest, older, oldest, behind} {
		h.waitOutcome(e.MessageID, map[string]consumer.Outcome{"Shared": "attached", "Opened": "viewed"}[e.Payload["Action"].(string)])
	}
	h.waitCommitted(Group, 0, offs[3]+1)
	if rows := h.feedOf(l.ID); len(rows) != 3 || !rows[0].OccurredAt.Equal(t0.Add(-time.Hour)) || !rows[2].OccurredAt.Equal(t2) {
		t.Fatalf("entries %+v: want the 3 events, each with its own occurred_at", rows)
	}
	if s := h.leadState(l.ID); !s.LastEventAt.Time.Equal(t2) || s.RowVersion != 3 {
		t.Fatalf("lead %+v: want last_event_at %s (the newest) and row_version 3", s, t2)
	}
	if s := h.leadState(ahead.ID); !s.LastEventAt.Time.Equal(future) || s.RowVersion != 1 {
		t.Fatalf("lead %+v: want last_event_at %s kept and row_version 1", s, future)
	}
	if n := len(h.feedOf(ahead.ID)); n != 1 {
		t.Fatalf("%d entries on the lead ahead, want 1 (the event is kept)", n)
	}
}
