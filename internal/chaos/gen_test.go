package chaos

import (
	"testing"
)

// inOrder is the records of events as one partition holding them in the
// order they were made: the model then sees what the generator meant.
func inOrder(evs []*event) []record {
	recs := make([]record, len(evs))
	for i, e := range evs {
		recs[i] = record{pos: pos{0, int64(i)}, ev: e}
	}
	return recs
}

func TestGeneratedStreamsAgreeWithTheModel(t *testing.T) {
	for _, n := range []int{300, 20000} {
		evs := generateRewards(7, n)
		if x := modelRewards(inOrder(evs)); len(x.disagree) > 0 {
			t.Errorf("rewards, %d events: %d disagreements, e.g. %s", n, len(x.disagree), x.disagree[0])
		}
		mevs, leads := generateMessenger(7, n)
		if x := modelMessenger(inOrder(mevs), leads); len(x.disagree) > 0 {
			t.Errorf("messenger, %d events: %d disagreements, e.g. %s", n, len(x.disagree), x.disagree[0])
		}
		cevs, pairs, _ := generateCRM(7, n)
		if x := modelCRM(inOrder(cevs), pairs); len(x.disagree) > 0 {
			t.Errorf("crm, %d events: %d disagreements, e.g. %s", n, len(x.disagree), x.disagree[0])
		}
	}
}
