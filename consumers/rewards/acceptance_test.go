package rewards

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
)

// AC1: the first bond-created of a bond makes an Active row with
// replica_version = Version and synced_at = the event time; acked.
func TestAC1_FirstBondCreatedMakesActiveRow(t *testing.T) {
	e := newEnv(t)
	b := newBond(uuid.New())
	noCompany := newBond(uuid.New())
	noCompany.Company = nil
	at := baseTime.Add(3*time.Second + 250*time.Millisecond)
	evs := []event{created(b, 7, at), created(noCompany, 1, at.Add(time.Second))}
	e.produce(evs...)
	e.start()

	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Active", 7, at)
	checkRow(t, e.row(noCompany.ID), noCompany, "Active", 1, at.Add(time.Second))
	for _, ev := range evs {
		if got := e.outcome(ev); got != "created" {
			t.Errorf("outcome of %s = %q, want created", ev.messageID, got)
		}
	}
	// The bond is the basis of an accrual now.
	if got, err := ActiveBond(context.Background(), e.Client, b.Referred); err != nil || got == nil || got.ID != b.ID {
		t.Errorf("ActiveBond = %v, %v; want bond %s", got, err, b.ID)
	}
	e.AwaitDLQ(0)

	// Lag: now − max(synced_at).
	lag := e.Run.Counter(MetricLagSeconds, nil)
	if want := time.Since(at.Add(time.Second)).Seconds(); lag < want-5 || lag > want+5 {
		t.Errorf("%s = %.1f, want about %.1f", MetricLagSeconds, lag, want)
	}
	if n := e.Run.Counter(MetricConsumeDurationMs, nil); n != 2 {
		t.Errorf("%s has %v observations, want 2", MetricConsumeDurationMs, n)
	}
	lines := e.Logs.Find("created", nil)
	if len(lines) != 2 {
		t.Fatalf("%d log lines 'created', want 2", len(lines))
	}
	for _, f := range []string{"MessageId", "BondId", "ReferredUserId", "Version", "Status"} {
		if _, ok := lines[0][f]; !ok {
			t.Errorf("log line 'created' has no field %s: %v", f, lines[0])
		}
	}
}

// AC2: an Active row and a bond-closed Revoked with a higher Version: the
// row is Revoked (no longer a basis of accruals).
func TestAC2_ClosedRevokedWithHigherVersionRevokesActiveRow(t *testing.T) {
	e := newEnv(t)
	b := newBond(uuid.New())
	c, r := created(b, 1, baseTime), closed(b, "Revoked", 2, baseTime.Add(time.Minute))
	e.produce(c)
	e.start()
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Active", 1, baseTime)

	e.produce(r)
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Revoked", 2, baseTime.Add(time.Minute))
	if got := e.outcome(r); got != "closed" {
		t.Errorf("outcome = %q, want closed", got)
	}
	if got, err := ActiveBond(context.Background(), e.Client, b.Referred); got != nil || err != nil {
		t.Errorf("ActiveBond after the revoke = %v, %v; want none", got, err)
	}
	e.AwaitDLQ(0)
	lines := e.Logs.Find("closed", nil)
	if len(lines) != 1 || lines[0]["Status"] != "Revoked" || lines[0]["ReplicaVersion"] != float64(1) || lines[0]["Version"] != float64(2) {
		t.Errorf("log line 'closed' = %v", lines)
	}
	e.checkNoSecrets()
}

// AC3: a rebind — the old bond's closed (Replaced) then the new bond's
// created, one key — leaves the old bond Replaced and the new one Active;
// never two Active rows for the referred user.
func TestAC3_RebindReplacesOldBondAndActivatesNewOne(t *testing.T) {
	e := newEnv(t)
	user := uuid.New()
	old, next := newBond(user), newBond(user)
	e.produce(created(old, 1, baseTime))
	e.start()
	e.waitCommitted()

	// Consumed one by one, with the table checked after each.
	rp := replaced(old, next, 2, baseTime.Add(time.Minute))
	e.produce(rp)
	e.waitCommitted()
	checkRow(t, e.row(old.ID), old, "Replaced", 2, baseTime.Add(time.Minute))
	if n := e.activeCount(user); n != 0 {
		t.Errorf("%d Active rows between closed and created, want 0", n)
	}
	cr := created(next, 1, baseTime.Add(time.Minute+time.Second))
	e.produce(cr)
	e.waitCommitted()
	checkRow(t, e.row(old.ID), old, "Replaced", 2, baseTime.Add(time.Minute))
	checkRow(t, e.row(next.ID), next, "Active", 1, baseTime.Add(time.Minute+time.Second))
	if n := e.activeCount(user); n != 1 {
		t.Errorf("%d Active rows after the rebind, want 1", n)
	}

	// And a second rebind whose pair arrives together (one batch, one
	// transaction).
	third := newBond(user)
	rp2, cr2 := replaced(next, third, 2, baseTime.Add(2*time.Minute)), created(third, 1, baseTime.Add(2*time.Minute))
	e.produce(rp2, cr2)
	e.waitCommitted()
	checkRow(t, e.row(next.ID), next, "Replaced", 2, baseTime.Add(2*time.Minute))
	checkRow(t, e.row(third.ID), third, "Active", 1, baseTime.Add(2*time.Minute))
	if n := e.activeCount(user); n != 1 {
		t.Errorf("%d Active rows after the second rebind, want 1", n)
	}
	if got, _ := ActiveBond(context.Background(), e.Client, user); got == nil || got.ID != third.ID {
		t.Errorf("ActiveBond = %v, want %s", got, third.ID)
	}
	for ev, want := range map[*event]string{&rp: "closed", &cr: "created", &rp2: "closed", &cr2: "created"} {
		if got := e.outcome(*ev); got != want {
			t.Errorf("outcome of %s = %q, want %s", ev.eventType, got, want)
		}
	}
	e.AwaitDLQ(0)
	if lines := e.Logs.Find("closed", nil); len(lines) != 2 || lines[0]["ReplacedByBondId"] != next.ID.String() {
		t.Errorf("log lines 'closed' = %v, want ReplacedByBondId %s", lines, next.ID)
	}
}

// AC4: Version ≤ replica_version is skipped as stale: state unchanged, the
// mark written, acked, counted.
func TestAC4_VersionNotAboveReplicaVersionIsSkippedStale(t *testing.T) {
	e := newEnv(t)
	b := newBond(uuid.New())
	t0 := baseTime
	// The newer created carries another ReferrerUserId: a source-immutable
	// field, kept as it is and the difference logged.
	changed := b
	changed.Referrer = uuid.New()
	first, upsert := created(b, 1, t0), created(changed, 3, t0.Add(time.Minute))
	e.produce(first, upsert)
	e.start()
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Active", 3, t0.Add(time.Minute))
	if got := e.outcome(upsert); got != "updated" {
		t.Errorf("outcome of the newer created = %q, want updated", got)
	}
	if w := e.Logs.Find("immutable-field-differs", nil); len(w) != 1 || w[0]["level"] != "warn" || w[0]["BondId"] != b.ID.String() {
		t.Errorf("immutable-field-differs lines = %v", w)
	}

	stale := []event{
		created(b, 2, t0.Add(2*time.Minute)),            // lower, created
		created(b, 3, t0.Add(2*time.Minute)),            // equal, created
		closed(b, "Revoked", 3, t0.Add(2*time.Minute)),  // equal, closed
		closed(b, "Replaced", 1, t0.Add(2*time.Minute)), // lower, closed
	}
	e.produce(stale...)
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Active", 3, t0.Add(time.Minute))
	for _, ev := range stale {
		if got := e.outcome(ev); got != "skipped-stale" {
			t.Errorf("outcome of a stale %s = %q, want skipped-stale", ev.eventType, got)
		}
	}
	if n := e.Run.Counter(MetricStaleEvents, nil); n != 4 {
		t.Errorf("%s = %v, want 4", MetricStaleEvents, n)
	}
	if n := e.Run.Counter(MetricStaleEvents, map[string]string{"event_type": "bond-closed"}); n != 2 {
		t.Errorf("%s{event_type=bond-closed} = %v, want 2", MetricStaleEvents, n)
	}
	if lines := e.Logs.Find("skipped-stale", nil); len(lines) != 4 || lines[0]["ReplicaVersion"] != float64(3) {
		t.Errorf("log lines 'skipped-stale' = %v", lines)
	}
	e.AwaitDLQ(0)
}

// AC5: a bond-closed redelivered on a Replaced/Revoked row is
// skipped-already-closed and acked, whatever its Version: the closed
// published again (a new MessageId, the Version that closed the row), and
// with a higher Version or another status. The same message again is a
// duplicate (the mark).
func TestAC5_RedeliveredClosedOnTerminalRowIsSkippedAlreadyClosed(t *testing.T) {
	e := newEnv(t)
	b := newBond(uuid.New())
	c, r := created(b, 1, baseTime), closed(b, "Revoked", 2, baseTime.Add(time.Minute))
	e.produce(c, r)
	e.start()
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Revoked", 2, baseTime.Add(time.Minute))

	republished := closed(b, "Revoked", 3, baseTime.Add(2*time.Minute))
	otherStatus := closed(b, "Replaced", 4, baseTime.Add(3*time.Minute))
	sameVersion := closed(b, "Revoked", 2, baseTime.Add(2*time.Minute))
	e.produce(redeliver(r), republished, otherStatus, sameVersion)
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Revoked", 2, baseTime.Add(time.Minute))
	for ev, want := range map[*event]string{&r: "closed", &republished: "skipped-already-closed",
		&otherStatus: "skipped-already-closed", &sameVersion: "skipped-already-closed"} {
		if got := e.outcome(*ev); got != want {
			t.Errorf("outcome = %q, want %s", got, want)
		}
	}
	if n := e.countMarks(); n != 5 {
		t.Errorf("%d marks, want 5 (the redelivery adds none)", n)
	}
	if n := e.Run.Counter("pin_consumer_messages_total", map[string]string{"outcome": "skipped-duplicate"}); n != 1 {
		t.Errorf("skipped-duplicate messages = %v, want 1", n)
	}
	if n := len(e.Logs.Find("skipped-already-closed", nil)); n != 3 {
		t.Errorf("%d log lines 'skipped-already-closed', want 3", n)
	}
	if n := e.Run.Counter(MetricStaleEvents, nil); n != 0 {
		t.Errorf("rewards_bond_replica_stale_events_total = %v, want 0: a closed on a terminal row is not stale", n)
	}
	e.AwaitDLQ(0)
}

// AC6: a bond-closed for a bond the replica does not hold is re-read three
// times at once, then dead-lettered as REWARDS_BOND_EVENT_ORPHAN_CLOSED
// (x-attempts 4) and acked; replaying the topic from offset 0 makes the
// replica converge.
func TestAC6_OrphanClosedRetriedThenDeadLetteredAndReplayConverges(t *testing.T) {
	e := newEnv(t)
	b := newBond(uuid.New())
	c, r := created(b, 1, baseTime), closed(b, "Revoked", 2, baseTime.Add(time.Minute))
	tps := e.produce(c, r)
	if tps[0].Partition != tps[1].Partition {
		t.Fatal("one key, two partitions")
	}
	// The group's offset is past the created (it was consumed into a
	// database that was since lost): the closed finds no row.
	e.resetGroup(map[int32]int64{tps[1].Partition: int64(tps[1].Offset)})
	e.start()
	e.waitCommitted()
	if row := e.row(b.ID); row != nil {
		t.Fatalf("row %v, want none", row)
	}
	if got := e.outcome(r); got != "" {
		t.Errorf("a dead-lettered message has the mark %q", got)
	}
	dead := e.AwaitDLQ(1)
	e.CheckDeadLetter(t, dead[0], r.message(), tps[1], CodeOrphanClosed.Name, 4)
	if n := e.Run.Counter("pin_consumer_retries_total", map[string]string{"class": "retry-now", "code": CodeOrphanClosed.Name}); n != 3 {
		t.Errorf("retry-now retries = %v, want 3", n)
	}
	if n := e.Run.Counter(MetricDLQ, map[string]string{"code": CodeOrphanClosed.Name}); n != 1 {
		t.Errorf("%s{code=%s} = %v, want 1", MetricDLQ, CodeOrphanClosed.Name, n)
	}
	dl := e.Logs.Find("dead-lettered", nil)
	if len(dl) != 1 || dl[0]["BondId"] != b.ID.String() || dl[0]["ReferredUserId"] != b.Referred.String() ||
		dl[0]["Version"] != float64(2) || dl[0]["code"] != CodeOrphanClosed.Name || dl[0]["attempts"] != float64(4) {
		t.Errorf("dead-lettered log lines = %v", dl)
	}

	// The operator's recovery: reset the group to offset 0 and replay.
	e.Stop()
	e.resetGroup(allPartitions(0))
	e.start()
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Revoked", 2, baseTime.Add(time.Minute))
	if got := e.outcome(c); got != "created" {
		t.Errorf("outcome of the replayed created = %q", got)
	}
	if got := e.outcome(r); got != "closed" {
		t.Errorf("outcome of the replayed closed = %q", got)
	}
	e.AwaitDLQ(1) // nothing new
}

// AC7: an unknown Status in a bond-closed is warned (unknown-bond-status),
// counted, stored as it came; the row is not Active any more; acked.
func TestAC7_UnknownStatusIsStoredAsItCameAndRowIsNotActive(t *testing.T) {
	e := newEnv(t)
	b, lower := newBond(uuid.New()), newBond(uuid.New())
	c, u := created(b, 1, baseTime), closed(b, "Frozen-By-Compliance", 2, baseTime.Add(time.Minute))
	// A known status in another case is not unknown: stored as spelt in the spec.
	c2, l := created(lower, 1, baseTime), closed(lower, "rEvOkEd", 2, baseTime.Add(time.Minute))
	e.produce(c, u, c2, l)
	e.start()
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Frozen-By-Compliance", 2, baseTime.Add(time.Minute))
	checkRow(t, e.row(lower.ID), lower, "Revoked", 2, baseTime.Add(time.Minute))
	if got := e.outcome(u); got != "closed" {
		t.Errorf("outcome = %q, want closed", got)
	}
	if got, err := ActiveBond(context.Background(), e.Client, b.Referred); got != nil || err != nil {
		t.Errorf("ActiveBond = %v, %v; want none: an unknown status is no basis", got, err)
	}
	if n := e.Run.Counter(MetricUnknownStatus, nil); n != 1 {
		t.Errorf("%s = %v, want 1", MetricUnknownStatus, n)
	}
	warn := e.Logs.Find("unknown-bond-status", nil)
	if len(warn) != 1 || warn[0]["level"] != "warn" || warn[0]["BondId"] != b.ID.String() ||
		warn[0]["EventStatus"] != "Frozen-By-Compliance" || warn[0]["MessageId"] != u.messageID.String() {
		t.Errorf("warning lines = %v", warn)
	}
	e.AwaitDLQ(0)
	e.checkNoSecrets()

	// A bond-created never re-activates it (fail closed): INVALID.
	again := created(b, 3, baseTime.Add(2*time.Minute))
	tps := e.produce(again)
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Frozen-By-Compliance", 2, baseTime.Add(time.Minute))
	e.CheckDeadLetter(t, e.AwaitDLQ(1)[0], again.message(), tps[0], CodeInvalid.Name, 1)
}

// AC8: an empty BondId or ReferredUserId is REWARDS_BOND_EVENT_INVALID:
// dead-lettered at once (x-attempts 1), no mark, acked, and the partition
// goes on.
func TestAC8_EmptyBondOrReferredUserIdIsDeadLetteredInvalid(t *testing.T) {
	e := newEnv(t)
	user := uuid.New()
	b := newBond(user)
	empty := b
	empty.ID = uuid.Nil
	bad := []event{
		created(empty, 1, baseTime), // BondId Guid.Empty
		envelope(EventTypeBondCreated, b.ID, user, baseTime, map[string]any{ // ReferredUserId missing
			"BondId": b.ID, "ReferrerUserId": b.Referrer, "BoundAt": baseTime, "Version": 1}),
		envelope(EventTypeBondClosed, b.ID, user, baseTime, map[string]any{ // BondId ""
			"BondId": "", "ReferredUserId": user, "Status": "Revoked", "Version": 2}),
		envelope(EventTypeBondClosed, b.ID, user, baseTime, map[string]any{ // ReferredUserId Guid.Empty
			"BondId": b.ID, "ReferredUserId": uuid.Nil, "Status": "Revoked", "Version": 2}),
	}
	good := created(b, 1, baseTime) // same key, after them
	tps := e.produce(append(bad, good)...)
	e.start()
	e.waitCommitted()

	dead := e.AwaitDLQ(len(bad))
	for i, ev := range bad {
		e.CheckDeadLetter(t, deadLetterOf(t, dead, ev), ev.message(), tps[i], CodeInvalid.Name, 1)
		if got := e.outcome(ev); got != "" {
			t.Errorf("dead-lettered message %d has the mark %q", i, got)
		}
	}
	checkRow(t, e.row(b.ID), b, "Active", 1, baseTime)
	if n := e.Run.Counter(MetricDLQ, map[string]string{"code": CodeInvalid.Name}); n != float64(len(bad)) {
		t.Errorf("%s = %v, want %d", MetricDLQ, n, len(bad))
	}
	if n := len(e.Logs.Find("dead-lettered", nil)); n != len(bad) {
		t.Errorf("%d log lines 'dead-lettered', want %d", n, len(bad))
	}
}
