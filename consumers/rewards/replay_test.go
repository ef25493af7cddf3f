package rewards

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// The replay of the issue: a realistic history is consumed; the group is
// reset to offset 0 while new messages arrive; consuming again leaves the
// table as it was except for the new messages' effects, keeps every mark as
// it was (outcome, partition, offset, processed_at) and adds marks for the
// new messages only. A dead-lettered message has no mark, so the replay
// dead-letters it again (docs/contract.md §4).
func TestReplay_GroupResetToOffsetZeroKeepsTableAndAddsOnlyNewKeys(t *testing.T) {
	e := newEnv(t)
	h := newHistory(40)
	var active wantRow // an Active bond of the history, revoked after the reset
	for _, w := range h.want {
		if w.status == "Active" {
			active = w
			break
		}
	}
	bad := created(bond{ID: uuid.New(), Referred: uuid.New(), Referrer: uuid.New(), BoundAt: baseTime}, 0, baseTime) // Version 0
	e.produce(append(h.events, bad)...)
	e.start()
	e.waitCommitted()
	h.check(t, e)
	e.AwaitDLQ(1)
	before := e.snapshot()
	if len(before.marks) != len(h.keys) {
		t.Fatalf("%d marks after the first read, want %d", len(before.marks), len(h.keys))
	}

	e.Stop()
	e.resetGroup(allPartitions(0))
	newcomer := newBond(uuid.New())
	at := baseTime.Add(time.Hour)
	fresh := []event{created(newcomer, 1, at), closed(active.bond, "Revoked", active.version+1, at)}
	e.produce(fresh...)
	e.start()
	e.waitCommitted()
	after := e.snapshot()

	// Marks: the old ones untouched, one new per new message, no other.
	for k, m := range before.marks {
		if got, ok := after.marks[k]; !ok || !sameMark(m, got) {
			t.Errorf("mark %s changed: %+v → %+v", k, m, got)
		}
	}
	if len(after.marks) != len(before.marks)+len(fresh) {
		t.Errorf("%d marks after the replay, want %d + %d new", len(after.marks), len(before.marks), len(fresh))
	}
	for _, ev := range fresh {
		if _, ok := after.marks[ev.idempotencyKey()]; !ok || before.marks[ev.idempotencyKey()].ID != "" {
			t.Errorf("no new mark for %s", ev.idempotencyKey())
		}
	}

	// Rows: identical, but for the new messages' effects.
	if len(after.rows) != len(before.rows)+1 {
		t.Errorf("%d rows after the replay, want %d", len(after.rows), len(before.rows)+1)
	}
	for id, r := range before.rows {
		if id == active.bond.ID {
			continue
		}
		if !sameRow(r, after.rows[id]) {
			t.Errorf("the replay changed row %s: %+v → %+v", id, r, after.rows[id])
		}
	}
	checkRow(t, e.row(active.bond.ID), active.bond, "Revoked", active.version+1, at)
	checkRow(t, e.row(newcomer.ID), newcomer, "Active", 1, at)

	// The invalid message again, and nothing else.
	dead := e.AwaitDLQ(2)
	for _, m := range dead {
		if string(m.Value) != string(bad.value) {
			t.Errorf("unexpected dead letter %s", m.Value)
		}
	}
}
