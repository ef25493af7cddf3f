package rewards

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/ent"
)

// history is a realistic stretch of pin.referral.bonds.v1: bonds created,
// upserted, revoked, rebound (once and twice), closed with an unknown
// status, with duplicates (the same message twice), re-publications (a new
// MessageId, the same Version) and stale versions. Each referred user's
// events are in the producer's order; users are interleaved.
type history struct {
	events []event
	// want is every bond's last state, as the scenario that produced it
	// says (not computed by the code under test).
	want map[uuid.UUID]wantRow
	// keys is every distinct idempotency key: one mark each.
	keys map[string]bool
	// users is every referred user, with the bond that must be Active
	// (uuid.Nil: none).
	users map[uuid.UUID]uuid.UUID
}

type wantRow struct {
	bond     bond
	status   string
	version  int64
	syncedAt time.Time
}

// newHistory makes a history of n referred users, each with one of the
// scenarios below in turn.
func newHistory(n int) *history {
	h := &history{want: map[uuid.UUID]wantRow{}, keys: map[string]bool{}, users: map[uuid.UUID]uuid.UUID{}}
	clock := baseTime.Add(-5 * time.Minute)
	tick := func() time.Time { clock = clock.Add(time.Second); return clock }
	perUser := make([][]event, n)
	for i := range perUser {
		user := uuid.New()
		var evs []event
		emit := func(ev event) event { evs = append(evs, ev); h.keys[ev.idempotencyKey()] = true; return ev }
		final := func(b bond, status string, version int64, at time.Time) {
			h.want[b.ID] = wantRow{b, status, version, at}
		}
		a := newBond(user)
		t1 := tick()
		emit(created(a, 1, t1))
		switch i % 8 {
		case 0: // created only
			final(a, "Active", 1, t1)
			h.users[user] = a.ID
		case 1: // created, a newer created (upsert), stale re-publications of both
			t2 := tick()
			emit(created(a, 2, t2))
			emit(created(a, 1, tick()))
			emit(created(a, 2, tick())) // applied, it would move synced_at
			final(a, "Active", 2, t2)
			h.users[user] = a.ID
		case 2: // created, revoked
			t2 := tick()
			emit(closed(a, "Revoked", 2, t2))
			final(a, "Revoked", 2, t2)
		case 3: // rebind: the old bond's closed, then the new bond's created
			b := newBond(user)
			t2, t3 := tick(), tick()
			emit(replaced(a, b, 2, t2))
			emit(created(b, 1, t3))
			final(a, "Replaced", 2, t2)
			final(b, "Active", 1, t3)
			h.users[user] = b.ID
		case 4: // rebind, then the new bond revoked
			b := newBond(user)
			t2, t3, t4 := tick(), tick(), tick()
			emit(replaced(a, b, 2, t2))
			emit(created(b, 1, t3))
			emit(closed(b, "Revoked", 2, t4))
			final(a, "Replaced", 2, t2)
			final(b, "Revoked", 2, t4)
		case 5: // duplicates, re-publications and stale versions around a revoke
			first := evs[0]
			evs = append(evs, first)    // the same message again
			emit(created(a, 1, tick())) // re-published, same Version
			t2 := tick()
			r := emit(closed(a, "revoked", 2, t2)) // another case: stored as Revoked
			evs = append(evs, r)                   // the same closed again
			emit(closed(a, "Revoked", 2, tick()))  // re-published closed: stale
			emit(closed(a, "Replaced", 1, tick())) // an older version: stale
			emit(closed(a, "Revoked", 3, tick()))  // a newer closed: already closed
			final(a, "Revoked", 2, t2)
		case 6: // an unknown status: stored as it came
			t2 := tick()
			emit(closed(a, "OnHold", 2, t2))
			final(a, "OnHold", 2, t2)
		case 7: // two rebinds: a → b → c
			b, c := newBond(user), newBond(user)
			t2, t3, t4, t5 := tick(), tick(), tick(), tick()
			emit(replaced(a, b, 2, t2))
			emit(created(b, 1, t3))
			emit(replaced(b, c, 2, t4))
			emit(created(c, 1, t5))
			final(a, "Replaced", 2, t2)
			final(b, "Replaced", 2, t4)
			final(c, "Active", 1, t5)
			h.users[user] = c.ID
		}
		if _, ok := h.users[user]; !ok {
			h.users[user] = uuid.Nil
		}
		perUser[i] = evs
	}
	// Interleave the users, keeping each user's order.
	for more := true; more; {
		more = false
		for i := range perUser {
			if len(perUser[i]) > 0 {
				h.events = append(h.events, perUser[i][0])
				perUser[i] = perUser[i][1:]
				more = true
			}
		}
	}
	return h
}

// check compares the replica with the history's last states: one row per
// bond, each in its last state, at most one Active row per user.
func (h *history) check(t *testing.T, e *env) {
	t.Helper()
	rows, err := e.Client.ReferralBondReplica.Query().All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(h.want) {
		t.Errorf("%d replica rows, want %d (one per bond)", len(rows), len(h.want))
	}
	for _, r := range rows {
		w, ok := h.want[r.ID]
		if !ok {
			t.Errorf("unexpected row %s", r.ID)
			continue
		}
		checkRow(t, r, w.bond, w.status, w.version, w.syncedAt)
	}
	for user, active := range h.users {
		got, err := ActiveBond(context.Background(), e.Client, user)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case active == uuid.Nil && got != nil:
			t.Errorf("user %s: Active bond %s, want none", user, got.ID)
		case active != uuid.Nil && (got == nil || got.ID != active):
			t.Errorf("user %s: Active bond %v, want %s", user, got, active)
		}
	}
}

// snapshot is the whole replica and every mark, to compare before and
// after a replay.
type snapshot struct {
	rows  map[uuid.UUID]ent.ReferralBondReplica
	marks map[string]ent.ProcessedMessage
}

func (e *env) snapshot() snapshot {
	e.T.Helper()
	ctx := context.Background()
	s := snapshot{rows: map[uuid.UUID]ent.ReferralBondReplica{}, marks: map[string]ent.ProcessedMessage{}}
	rows, err := e.Client.ReferralBondReplica.Query().All(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	for _, r := range rows {
		r.SyncedAt, r.BoundAt = r.SyncedAt.UTC(), r.BoundAt.UTC()
		s.rows[r.ID] = ent.ReferralBondReplica{ID: r.ID, ReferredUserID: r.ReferredUserID, ReferrerUserID: r.ReferrerUserID,
			ReferrerCompanyID: r.ReferrerCompanyID, Status: r.Status, BoundAt: r.BoundAt, ReplicaVersion: r.ReplicaVersion, SyncedAt: r.SyncedAt}
	}
	marks, err := e.Client.ProcessedMessage.Query().All(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	for _, m := range marks {
		s.marks[m.ID] = ent.ProcessedMessage{ID: m.ID, ConsumerGroup: m.ConsumerGroup, Topic: m.Topic,
			Partition: m.Partition, Offset: m.Offset, Outcome: m.Outcome, ProcessedAt: m.ProcessedAt.UTC()}
	}
	return s
}

func sameRow(a, b ent.ReferralBondReplica) bool {
	return a.ID == b.ID && a.ReferredUserID == b.ReferredUserID && a.ReferrerUserID == b.ReferrerUserID &&
		equalIDs(a.ReferrerCompanyID, b.ReferrerCompanyID) && a.Status == b.Status && a.BoundAt.Equal(b.BoundAt) &&
		a.ReplicaVersion == b.ReplicaVersion && a.SyncedAt.Equal(b.SyncedAt)
}

func sameMark(a, b ent.ProcessedMessage) bool {
	return a.ID == b.ID && a.ConsumerGroup == b.ConsumerGroup && a.Topic == b.Topic && a.Partition == b.Partition &&
		a.Offset == b.Offset && a.Outcome == b.Outcome && a.ProcessedAt.Equal(b.ProcessedAt)
}

// AC9: reading the whole topic from offset 0 (a new group on an empty
// replica: how the replica is first filled) converges to the last state of
// every bond, with nothing duplicated: one row per bond, one mark per
// distinct message. Reading it all again changes nothing.
func TestAC9_ReadingTopicFromOffsetZeroConvergesToLastState(t *testing.T) {
	e := newEnv(t)
	h := newHistory(48)
	e.produce(h.events...)
	e.start()
	e.waitCommitted()
	h.check(t, e)
	if n := e.countMarks(); n != len(h.keys) {
		t.Errorf("%d marks, want %d (one per distinct message)", n, len(h.keys))
	}
	e.AwaitDLQ(0)
	if n := e.Run.Counter("pin_consumer_messages_total", map[string]string{"outcome": "skipped-duplicate"}); n != float64(len(h.events)-len(h.keys)) {
		t.Errorf("skipped-duplicate = %v, want %d", n, len(h.events)-len(h.keys))
	}
	before := e.snapshot()

	// Again, from offset 0.
	e.Stop()
	e.resetGroup(allPartitions(0))
	e.start()
	e.waitCommitted()
	h.check(t, e)
	after := e.snapshot()
	if len(after.rows) != len(before.rows) || len(after.marks) != len(before.marks) {
		t.Fatalf("re-read: %d rows %d marks, before %d rows %d marks", len(after.rows), len(after.marks), len(before.rows), len(before.marks))
	}
	for id, r := range before.rows {
		if !sameRow(r, after.rows[id]) {
			t.Errorf("re-read changed row %s: %+v → %+v", id, r, after.rows[id])
		}
	}
	if n := e.Run.Counter("pin_consumer_messages_total", map[string]string{"outcome": "skipped-duplicate"}); n != float64(len(h.events)) {
		t.Errorf("re-read: skipped-duplicate = %v, want every message (%d)", n, len(h.events))
	}
	e.AwaitDLQ(0)
}
