package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/rewards"
)

// ids makes readable UUIDs for hand-made sequences: id(1) is
// 00000000-0000-4000-8000-000000000001.
func id(n int) uuid.UUID { return uuid.MustParse(fmt.Sprintf("00000000-0000-4000-8000-%012d", n)) }

// at is the n-th second of the test's clock.
func at(n int) time.Time { return epoch.Add(time.Duration(n) * time.Second) }

func created(msg, bond, referred int, version int64) *event {
	return &event{id: id(msg), route: rewards.KeyPrefixBondCreated, note: fmt.Sprintf("created %d v%d", bond, version),
		body: bondCreated{bond: id(bond), referred: id(referred), referrer: id(9000), boundAt: at(0), version: version, at: at(msg)}}
}

func closed(msg, bond, referred int, status string, version int64) *event {
	return &event{id: id(msg), route: rewards.KeyPrefixBondClosed, note: fmt.Sprintf("closed %d v%d", bond, version),
		body: bondClosed{bond: id(bond), referred: id(referred), status: status, version: version, at: at(msg)}}
}

// expect sets what the generator would have meant: the test states it.
func expect(e *event, code string) *event { e.want = code; return e }

func TestRewardsModel(t *testing.T) {
	t.Run("a created inserts an Active row; the same message again changes nothing", func(t *testing.T) {
		c := created(1, 100, 10, 1)
		x := modelRewards(inOrder([]*event{c, c}))
		row := x.rows[id(100)]
		if row.status != "Active" || row.version != 1 || !row.synced.Equal(at(1)) {
			t.Fatalf("row %+v", row)
		}
		if len(x.marks) != 1 || x.marks[c.markKey()].outcomes[0] != outCreated {
			t.Fatalf("marks %+v, want one created", x.marks)
		}
	})
	t.Run("an older Version is skipped as stale, with a mark", func(t *testing.T) {
		x := modelRewards(inOrder([]*event{created(1, 100, 10, 2), created(2, 100, 10, 1), closed(3, 100, 10, "Revoked", 2)}))
		if row := x.rows[id(100)]; row.version != 2 || row.status != "Active" || !row.synced.Equal(at(1)) {
			t.Fatalf("row %+v", row)
		}
		for _, m := range []int{2, 3} {
			key := (&event{id: id(m), route: rewards.KeyPrefixBondCreated}).markKey()
			if m == 3 {
				key = (&event{id: id(m), route: rewards.KeyPrefixBondClosed}).markKey()
			}
			if got := x.marks[key].outcomes; len(got) != 1 || got[0] != outStale {
				t.Errorf("message %d: outcomes %v, want skipped-stale", m, got)
			}
		}
	})
	t.Run("a higher Version moves an Active row on; the source-immutable fields stay", func(t *testing.T) {
		up := created(2, 100, 10, 3)
		b := up.body.(bondCreated)
		b.referrer = id(9999)
		up.body = b
		x := modelRewards(inOrder([]*event{created(1, 100, 10, 1), up}))
		if row := x.rows[id(100)]; row.version != 3 || row.referrer != id(9000) || !row.synced.Equal(at(2)) {
			t.Fatalf("row %+v", row)
		}
	})
	t.Run("a closed row is terminal: created again is invalid, closed again skipped", func(t *testing.T) {
		x := modelRewards(inOrder([]*event{
			created(1, 100, 10, 1), closed(2, 100, 10, "revoked", 2),
			expect(created(3, 100, 10, 3), rewardsInvalid), closed(4, 100, 10, "Replaced", 5),
		}))
		if row := x.rows[id(100)]; row.status != "Revoked" || row.version != 2 {
			t.Fatalf("row %+v, want Revoked (the spec's spelling) v2", row)
		}
		if d := x.dlq[pos{0, 2}]; d.code != rewardsInvalid {
			t.Fatalf("created on a closed bond: DLQ %q, want %s", d.code, rewardsInvalid)
		}
		if got := x.marks[(&event{id: id(4), route: rewards.KeyPrefixBondClosed}).markKey()].outcomes; got[0] != outAlreadyClosed {
			t.Fatalf("closed again: %v", got)
		}
		if len(x.disagree) != 0 {
			t.Fatal(x.disagree)
		}
	})
	t.Run("rebind: the old bond Replaced, the new one Active; never two Active", func(t *testing.T) {
		x := modelRewards(inOrder([]*event{
			created(1, 100, 10, 1), expect(created(2, 101, 10, 1), rewardsConflict),
			closed(3, 100, 10, "Replaced", 2), created(4, 101, 10, 1),
		}))
		if x.rows[id(100)].status != "Replaced" || x.rows[id(101)].status != "Active" {
			t.Fatalf("rows %+v", x.rows)
		}
		if x.dlq[pos{0, 1}].code != rewardsConflict {
			t.Fatalf("a second Active bond: DLQ %+v", x.dlq)
		}
	})
	t.Run("orphan, mismatched and unknown statuses", func(t *testing.T) {
		x := modelRewards(inOrder([]*event{
			expect(closed(1, 100, 10, "Revoked", 2), rewardsOrphan),
			created(2, 101, 11, 1), expect(closed(3, 101, 12, "Revoked", 2), rewardsInvalid),
			closed(4, 101, 11, "Frozen", 3), created(5, 102, 11, 1),
		}))
		if x.dlq[pos{0, 0}].code != rewardsOrphan || x.dlq[pos{0, 2}].code != rewardsInvalid {
			t.Fatalf("dlq %+v", x.dlq)
		}
		if x.rows[id(101)].status != "Frozen" || x.rows[id(102)].status != "Active" {
			t.Fatalf("an unknown status is stored as it came and is not Active: %+v", x.rows)
		}
		if len(x.disagree) != 0 {
			t.Fatal(x.disagree)
		}
	})
	t.Run("poison of a fixed code and unknown event types", func(t *testing.T) {
		p := &event{id: id(1), code: rewardsInvalid, want: rewardsInvalid, note: "poison: Version 0", route: rewards.KeyPrefixBondCreated}
		u := &event{id: id(2), unknownType: true}
		x := modelRewards(inOrder([]*event{p, u}))
		if len(x.dlq) != 1 || len(x.marks) != 0 || x.poisonKeys[p.markKey()] == "" {
			t.Fatalf("dlq %+v marks %+v", x.dlq, x.marks)
		}
	})
}

func TestRewardsCompare(t *testing.T) {
	x := modelRewards(inOrder([]*event{created(1, 100, 10, 1), created(2, 101, 11, 1), closed(3, 101, 11, "Revoked", 2), created(4, 102, 12, 1)}))
	got := map[uuid.UUID]bondRow{}
	for k, v := range x.rows {
		got[k] = v
	}
	t.Run("the model's rows: nothing off", func(t *testing.T) {
		var tl Tally
		x.compare(&tl, got)
		if !tl.OK() {
			t.Fatal(tl.Notes())
		}
	})
	got[id(101)] = bondRow{referred: id(11), referrer: id(9000), status: "Active", boundAt: at(0), version: 1, synced: at(2)}
	delete(got, id(102))
	r := x.rows[id(100)]
	r.referred = id(11) // a second Active bond of user 11
	got[id(100)] = r
	got[id(103)] = bondRow{status: "Active", version: 1}
	var tl Tally
	x.compare(&tl, got)
	// lost: 101 behind (v1 of v2), 102 missing; wrong: 100's immutable
	// fields, 103 unknown; doubled: user 11 with two Active bonds.
	if tl.lost != 2 || tl.wrong != 2 || tl.doubled != 1 {
		t.Fatalf("lost %d wrong %d doubled %d: %v", tl.lost, tl.wrong, tl.doubled, tl.Notes())
	}
}
