package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/crm"
)

// pairs of the crm tests: pair 1 has lead 601 (and the Expired 602), pair
// 2 gets lead 603 late, pair 3 never has an Active lead.
var (
	pair1, pair2, pair3 = pair{id(31), id(41)}, pair{id(32), id(42)}, pair{id(33), id(43)}
	crmPairs            = map[pair]crmLead{
		pair1: {id: id(601), tenant: id(700), expired: id(602)},
		pair2: {id: id(603), tenant: id(700), when: late},
		pair3: {tenant: id(700), when: never},
	}
)

func share(msg int, p pair, action, title string, occurred time.Time) *event {
	return &event{id: id(msg), route: crm.KeyPrefix, note: "selection",
		body: selectionShared{selection: id(800 + msg), agent: p.agent, investor: p.investor, action: action, title: title, count: msg, at: occurred}}
}

func TestCRMModel(t *testing.T) {
	long := strings.Repeat("ж", 300)
	s1 := share(1, pair1, "Shared", "Flats", at(10))
	x := modelCRM(inOrder([]*event{
		s1, s1, share(2, pair1, "opened", long, at(5)), share(3, pair2, "Shared", "Lofts", at(7)),
		expect(share(4, pair3, "Shared", "Houses", at(8)), crmLeadNotFound),
	}), crmPairs)
	if len(x.disagree) != 0 {
		t.Fatal(x.disagree)
	}
	t.Run("one feed entry per MessageId, on the pair's Active lead", func(t *testing.T) {
		if len(x.feed) != 3 || x.feed[id(1)].lead != id(601) || x.feed[id(1)].typ != "SelectionAttached" || x.feed[id(3)].lead != id(603) {
			t.Fatalf("feed %+v", x.feed)
		}
		if len(x.marks) != 3 || x.marks[s1.markKey()].outcomes[0] != outAttached {
			t.Fatalf("marks %+v", x.marks)
		}
	})
	t.Run("Opened is SelectionViewed; a title is cut to 256 characters", func(t *testing.T) {
		e := x.feed[id(2)]
		if e.typ != "SelectionViewed" || len([]rune(e.title)) != 256 {
			t.Fatalf("%s, %d characters", e.typ, len([]rune(e.title)))
		}
	})
	t.Run("an older OccurredAt leaves last_event_at where it is", func(t *testing.T) {
		if got := x.leads[id(601)].lastEventAt; !got.Equal(at(10)) {
			t.Fatalf("last_event_at %s, want %s", got, at(10))
		}
		if !x.leads[id(602)].lastEventAt.IsZero() || x.leads[id(602)].status != "Expired" {
			t.Fatalf("the Expired lead: %+v", x.leads[id(602)])
		}
	})
	t.Run("no Active lead ever: the DLQ", func(t *testing.T) {
		if x.dlq[pos{0, 4}].code != crmLeadNotFound {
			t.Fatalf("dlq %+v", x.dlq)
		}
	})
}

func TestCRMCompare(t *testing.T) {
	x := modelCRM(inOrder([]*event{share(1, pair1, "Shared", "Flats", at(10)), share(2, pair1, "Shared", "Lofts", at(11))}), crmPairs)
	leads := map[uuid.UUID]leadRow{}
	for k, v := range x.leads {
		leads[k] = v
	}
	feed := map[uuid.UUID][]feedEntry{}
	for k, v := range x.feed {
		feed[k] = []feedEntry{v}
	}
	var ok Tally
	x.compare(&ok, leads, feed, 0)
	if !ok.OK() {
		t.Fatal(ok.Notes())
	}
	feed[id(1)] = append(feed[id(1)], feed[id(1)][0]) // doubled
	delete(feed, id(2))                               // lost
	feed[id(3)] = []feedEntry{{lead: id(601)}}        // wrong
	l := leads[id(601)]
	l.lastEventAt = at(10) // lost: the newest entry's time is missing
	leads[id(601)] = l
	var tl Tally
	x.compare(&tl, leads, feed, 1)
	if tl.lost != 2 || tl.doubled != 1 || tl.wrong != 2 {
		t.Fatalf("lost %d doubled %d wrong %d: %v", tl.lost, tl.doubled, tl.wrong, tl.Notes())
	}
}

func TestCompareMessages(t *testing.T) {
	poisonA := expect(&event{id: id(1), code: rewardsInvalid, route: "r:", note: "poison: Version 0"}, rewardsInvalid)
	poisonB := expect(&event{code: EnvelopeInvalid, note: "poison: tombstone"}, EnvelopeInvalid)
	good := created(3, 100, 10, 1)
	x := modelRewards(inOrder([]*event{poisonA, poisonB, good, poisonA}))
	t.Run("every poison message in the DLQ with its code, every mark there", func(t *testing.T) {
		var tl Tally
		compareMessages(&tl, &x.expectation, map[string]string{good.markKey(): outCreated},
			map[pos][]string{{0, 0}: {rewardsInvalid}, {0, 1}: {EnvelopeInvalid}, {0, 3}: {rewardsInvalid, rewardsInvalid}})
		if !tl.OK() || tl.poison != 3 || tl.events != 4 {
			t.Fatalf("%s: %v", tl.Line(), tl.Notes())
		}
	})
	t.Run("poison missing or with another code, a good message dead-lettered, a poison one processed", func(t *testing.T) {
		var tl Tally
		compareMessages(&tl, &x.expectation, map[string]string{poisonA.markKey(): outStale},
			map[pos][]string{{0, 1}: {"SOMETHING_ELSE"}, {0, 2}: {rewardsConflict}})
		if tl.poisonOK != 0 || tl.poison != 3 || tl.notPoison != 1 || tl.lost != 1 || tl.wrong != 1 {
			t.Fatalf("%s: %v", tl.Line(), tl.Notes())
		}
		if !strings.Contains(strings.Join(tl.Notes(), "\n"), "processed, not dead-lettered") {
			t.Fatalf("notes %v", tl.Notes())
		}
	})
}
