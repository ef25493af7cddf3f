package crm

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The events of one lead arrive on every partition (the key is the
// SelectionId), so the batches of the six partition workers update the same
// lead rows at the same time — here 8 leads, far hotter than production.
// They must wait for each other, not deadlock or lose an update: every
// event is appended once (or dead-lettered with the spec's code), each
// lead's row_version counts its appends and last_event_at is the newest
// OccurredAt of its feed.
func TestBatchesOfAllPartitionsOnTheSameLeadsNeitherDeadlockNorLoseAnUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const nLeads, nEvents = 8, 900
	leads := make([]testLead, nLeads)
	for i := range leads {
		leads[i] = h.insertLead("Active")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	base := micro(time.Now().Add(-time.Hour))
	evs := make([]*event, nEvents)
	for i := range evs {
		l := leads[rng.IntN(nLeads)]
		at := base.Add(time.Duration(rng.IntN(3600)) * time.Second)
		action := "Shared"
		if i%3 == 0 {
			action = "Opened"
		}
		evs[i] = newEvent(l, action, at).on(int32(i % 6))
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

	// Every event is in the feed: the writer locks the leads of every
	// transaction, a message's alone too, and reads them again under the
	// lock, so none loses a race to another partition's (a dead letter of
	// any code is a failure).
	if n := h.Run.Counter(MetricDLQ, nil); n != 0 {
		t.Errorf("%v dead letters (%v of them %s), want 0", n,
			h.Run.Counter(MetricDLQ, map[string]string{"code": CodeConcurrentUpdate.Name}), CodeConcurrentUpdate.Name)
	}
	if n := h.Count(`SELECT count(*) FROM lead_events`); n != nEvents {
		t.Fatalf("lead_events = %d, want %d", n, nEvents)
	}
	// No update of a lead is lost: row_version counts its appends, and
	// last_event_at is the newest OccurredAt of its feed.
	for _, l := range leads {
		s := h.leadState(l.ID)
		feed := h.feedOf(l.ID)
		var newest time.Time
		for _, f := range feed {
			if f.OccurredAt.After(newest) {
				newest = f.OccurredAt
			}
		}
		if s.RowVersion != int64(len(feed)) || !s.LastEventAt.Valid || !s.LastEventAt.Time.Equal(newest) {
			t.Errorf("lead %s: row_version %d, last_event_at %v; want %d (its feed entries), %s", l.ID, s.RowVersion, s.LastEventAt.Time, len(feed), newest)
		}
	}
	// Writers lock their leads in id order: no deadlock and no
	// serialization failure between partitions.
	for _, code := range []string{"40P01", "40001"} {
		if n := h.Run.Counter(MetricRetries, map[string]string{"code": code}); n != 0 {
			t.Errorf("%s{code=%s} = %v, want 0", MetricRetries, code, n)
		}
	}
	if n := h.Run.Counter("pin_consumer_batch_size", nil); n == 0 {
		t.Error("no batch was committed: the test did not exercise batches")
	}
}
