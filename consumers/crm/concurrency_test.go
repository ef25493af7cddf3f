package crm

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The events of one lead arrive on every partition (the key is the
// SelectionId), so the batches of the six partition workers update the same
// lead rows at the same time. They must wait for each other, not deadlock
// or miss each other's row_version: every event is appended once, each
// lead's row_version counts its appends, last_event_at is the newest
// OccurredAt, and nothing is retried.
func TestBatchesOfAllPartitionsOnTheSameLeadsNeitherDeadlockNorRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const nLeads, nEvents = 40, 900
	leads := make([]testLead, nLeads)
	for i := range leads {
		leads[i] = h.insertLead("Active")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	base := micro(time.Now().Add(-time.Hour))
	perLead := map[uuid.UUID]int64{}
	newest := map[uuid.UUID]time.Time{}
	evs := make([]*event, nEvents)
	for i := range evs {
		l := leads[rng.IntN(nLeads)]
		at := base.Add(time.Duration(rng.IntN(3600)) * time.Second)
		action := "Shared"
		if i%3 == 0 {
			action = "Opened"
		}
		evs[i] = newEvent(l, action, at).on(int32(i % 6))
		perLead[l.ID]++
		if at.After(newest[l.ID]) {
			newest[l.ID] = at
		}
	}
	h.produce(evs...) // all before the start: full batches on every partition
	h.start(0, "")
	perPartition := map[int32]int64{} // a fresh topic: offsets start at 0
	for _, e := range evs {
		perPartition[e.Partition]++
	}
	for p, n := range perPartition {
		h.waitCommitted(Group, p, n)
	}

	if n := h.count(`SELECT count(*) FROM lead_events`); n != nEvents {
		t.Fatalf("lead_events = %d, want %d", n, nEvents)
	}
	for _, l := range leads {
		s := h.leadState(l.ID)
		if s.RowVersion != perLead[l.ID] || !s.LastEventAt.Valid || !s.LastEventAt.Time.Equal(newest[l.ID]) {
			t.Errorf("lead %s: row_version %d, last_event_at %v; want %d, %s", l.ID, s.RowVersion, s.LastEventAt.Time, perLead[l.ID], newest[l.ID])
		}
		if n := len(h.feedOf(l.ID)); int64(n) != perLead[l.ID] {
			t.Errorf("lead %s: %d feed entries, want %d", l.ID, n, perLead[l.ID])
		}
	}
	// Batches lock their leads up front in id order: no deadlock, no
	// serialization failure, nothing dead-lettered. (A message handled on
	// its own — the first of a fetch — reads its lead optimistically, as
	// the spec says, and may lose a race to a batch: CRM_CONCURRENT_UPDATE,
	// re-run at once.)
	for _, code := range []string{"40P01", "40001"} {
		if n := h.run.Counter(MetricRetries, map[string]string{"code": code}); n != 0 {
			t.Errorf("%s{code=%s} = %v, want 0", MetricRetries, code, n)
		}
	}
	if n := h.run.Counter(MetricDLQ, nil); n != 0 {
		t.Errorf("%s = %v, want 0", MetricDLQ, n)
	}
	if n := h.run.Counter(MetricRetries, nil); n != 0 {
		t.Logf("%s = %v: messages handled on their own lost a race to a batch", MetricRetries, n)
	}
	if n := h.run.Counter("pin_consumer_batch_size", nil); n == 0 {
		t.Error("no batch was committed: the test did not exercise batches")
	}
}
