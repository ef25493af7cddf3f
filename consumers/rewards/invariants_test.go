package rewards

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// BND-3: a bond-created for a referred user who already has another
// Active bond is REWARDS_BOND_REPLICA_ACTIVE_CONFLICT: dead-lettered at once
// (fail closed), the existing bond untouched, the partition going on.
func TestActiveConflict_SecondActiveBondIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	user := uuid.New()
	a, b := newBond(user), newBond(user)
	// The new bond's created before the old one's closed: out of the
	// producer's order.
	ca, cb, ra := created(a, 1, baseTime), created(b, 1, baseTime.Add(time.Second)), replaced(a, b, 2, baseTime.Add(2*time.Second))
	tps := e.produce(ca, cb, ra)
	e.start()
	e.waitCommitted()

	e.CheckDeadLetter(t, e.AwaitDLQ(1)[0], cb.message(), tps[1], CodeActiveConflict.Name, 1)
	if e.row(b.ID) != nil {
		t.Error("the conflicting bond has a row")
	}
	checkRow(t, e.row(a.ID), a, "Replaced", 2, baseTime.Add(2*time.Second))
	if got := e.outcome(cb); got != "" {
		t.Errorf("dead-lettered message has the mark %q", got)
	}
	if n := e.Run.Counter(MetricDLQ, map[string]string{"code": CodeActiveConflict.Name}); n != 1 {
		t.Errorf("%s = %v, want 1", MetricDLQ, n)
	}

	// Replaying the dead letter, now that the old bond is closed, applies it.
	e.produce(cb)
	e.waitCommitted()
	checkRow(t, e.row(b.ID), b, "Active", 1, baseTime.Add(time.Second))
}

// BND-4 and the contract: every other way a message is refused, each
// with its code in x-dlq-error-code; what the contract says to let through
// goes through.
func TestViolationsAreDeadLetteredWithTheirCode(t *testing.T) {
	e := newEnv(t)
	revoked, active := newBond(uuid.New()), newBond(uuid.New())
	setup := []event{
		created(revoked, 1, baseTime), closed(revoked, "Revoked", 2, baseTime),
		created(active, 1, baseTime),
	}
	e.produce(setup...)
	e.start()
	e.waitCommitted()

	otherUser := active
	otherUser.Referred = uuid.New()
	// Keyed by the other user, so on another partition than the Version 5
	// created below: its Version is above 5 so that the order between the
	// two partitions does not matter.
	mismatch := closed(otherUser, "Revoked", 9, baseTime)
	v2 := envelope(EventTypeBondCreated, active.ID, active.Referred, baseTime, map[string]any{
		"BondId": active.ID, "ReferredUserId": active.Referred, "ReferrerUserId": active.Referrer,
		"ReferrerCompanyId": active.Company, "BoundAt": active.BoundAt, "Version": 5})
	v2 = v2.edit(func(env *servicetest.Envelope) { env.ContractVersion = 2 })
	noTime := envelope(EventTypeBondClosed, active.ID, active.Referred, time.Time{}, map[string]any{
		"BondId": active.ID, "ReferredUserId": active.Referred, "Status": "Revoked", "Version": 9})
	noTime = noTime.edit(func(env *servicetest.Envelope) { env.Omit = []string{"CreatedAt"} })
	cases := []struct {
		ev   event
		code string // "" = not dead-lettered
	}{
		{created(revoked, 3, baseTime.Add(time.Minute)), CodeInvalid.Name},                           // BND-4
		{mismatch, CodeInvalid.Name},                                                                 // ReferredUserId differs from the row
		{closed(active, "Active", 2, baseTime), CodeInvalid.Name},                                    // not a closing status
		{envelope(EventTypeBondClosed, active.ID, active.Referred, baseTime, "x"), CodeInvalid.Name}, // Payload not an object
		{envelope(EventTypeBondClosed, active.ID, active.Referred, baseTime, map[string]any{ // wrong type
			"BondId": active.ID, "ReferredUserId": active.Referred, "Status": "Revoked", "Version": "2"}), CodeInvalid.Name},
		{noTime, CodeInvalid.Name}, // no event time for synced_at
		{event{messageID: uuid.New(), eventType: EventTypeBondCreated, key: active.Referred.String(), value: []byte("not json")}, consumer.EnvelopeInvalid.Name},
		{envelope("pin.referral.bond-renamed", active.ID, active.Referred, baseTime, map[string]any{}), ""}, // unknown type: skipped
		{v2, ""}, // ContractVersion 2: warned, processed
	}
	var evs []event
	for _, c := range cases {
		evs = append(evs, c.ev)
	}
	tps := e.produce(evs...)
	e.waitCommitted()

	want := 0
	for _, c := range cases {
		if c.code != "" {
			want++
		}
	}
	dead := e.AwaitDLQ(want)
	for i, c := range cases {
		if c.code == "" {
			continue
		}
		e.CheckDeadLetter(t, deadLetterOf(t, dead, c.ev), c.ev.message(), tps[i], c.code, 1)
	}
	checkRow(t, e.row(revoked.ID), revoked, "Revoked", 2, baseTime)
	// The ContractVersion 2 created went through: an upsert of the Active row.
	checkRow(t, e.row(active.ID), active, "Active", 5, baseTime)
	if n := e.Run.Counter(MetricContractMismatch, nil); n != 1 {
		t.Errorf("%s = %v, want 1", MetricContractMismatch, n)
	}
	if n := e.Run.Counter("pin_consumer_unknown_event_types_total", nil); n != 1 {
		t.Errorf("unknown event types = %v, want 1", n)
	}
	if n := e.Run.Counter(MetricDLQ, map[string]string{"code": CodeInvalid.Name}); n != 6 {
		t.Errorf("%s{code=%s} = %v, want 6", MetricDLQ, CodeInvalid.Name, n)
	}
	e.checkNoSecrets()
}

// The single-active conflict is detected on the view its Read read, before
// any statement: the handler's refusal leaves the transaction, and the
// view, as they were, and the messages after it decide on them.
func TestActiveConflictLeavesTransactionUsable(t *testing.T) {
	t.Parallel()
	client, _, _ := pgtest.NewClient(t)
	ctx := context.Background()
	user := uuid.New()
	a, b := newBond(user), newBond(user)
	h := &handler{m: newMetrics(prometheus.NewRegistry()), lag: newSyncedLag()}
	msgs := []*consumer.Message{
		message(t, created(a, 1, baseTime)), message(t, created(b, 1, baseTime)),
		message(t, replaced(a, b, 2, baseTime)), message(t, created(b, 1, baseTime)),
	}

	tx, v := readInTx(ctx, t, client, msgs)
	if out, err := h.bondCreated(ctx, v, msgs[0]); err != nil || out != OutcomeCreated {
		t.Fatalf("first created: %q, %v", out, err)
	}
	_, err := h.bondCreated(ctx, v, msgs[1])
	if code, ok := consumer.CodeOf(err); !ok || code.Name != CodeActiveConflict.Name {
		t.Fatalf("second Active bond: %v, want %s", err, CodeActiveConflict.Name)
	}
	// The transaction still works: the old bond's closed and the new bond's
	// created apply in it.
	if out, err := h.bondClosed(ctx, v, msgs[2]); err != nil || out != OutcomeClosed {
		t.Fatalf("closed after the conflict: %q, %v", out, err)
	}
	if out, err := h.bondCreated(ctx, v, msgs[3]); err != nil || out != OutcomeCreated {
		t.Fatalf("created after the close: %q, %v", out, err)
	}
	if err := write(ctx, tx, v, nil); err != nil {
		t.Fatalf("the writer: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	got, err := ActiveBond(ctx, client, user)
	if err != nil || got == nil || got.ID != b.ID {
		t.Fatalf("ActiveBond = %v, %v; want %s", got, err, b.ID)
	}

}

// Two processors of the same bond-created (a rebalance overlap): the second
// does not see the first's uncommitted row, its insert waits for the first
// transaction and then fails on the primary key — a lost race, which the
// runtime runs again at once. Read then reads the now-visible row and the
// handler decides on it (skipped-stale) instead of reporting a conflict.
func TestConcurrentCreateOfSameBondIsDecidedAgain(t *testing.T) {
	t.Parallel()
	client, db, _ := pgtest.NewClient(t)
	ctx := context.Background()
	b := newBond(uuid.New())
	h := &handler{m: newMetrics(prometheus.NewRegistry()), lag: newSyncedLag()}
	ev := created(b, 1, baseTime)

	first, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback() }()
	if out, err := handleInTx(ctx, first, h.bondCreated, message(t, ev)); err != nil || out != OutcomeCreated {
		t.Fatalf("first: %q, %v", out, err)
	}
	type result struct {
		out  consumer.Outcome
		err  error
		lost error // the first try's failure
	}
	done := make(chan result, 1)
	go func() {
		try := func() (consumer.Outcome, error) {
			second, err := client.Tx(ctx)
			if err != nil {
				return "", err
			}
			defer func() { _ = second.Rollback() }()
			out, err := handleInTx(ctx, second, h.bondCreated, message(t, ev))
			if err == nil {
				err = second.Commit()
			}
			return out, err
		}
		out, err := try()
		var lost error
		if pqErr := (*pq.Error)(nil); errors.As(err, &pqErr) && pqErr.Code == "23505" { // the runtime's lost race
			lost = err
			out, err = try()
		}
		done <- result{out, err, lost}
	}()
	// The second insert waits on the first transaction's row lock.
	kafkatest.Eventually(t, 10*time.Second, func() bool {
		n, err := consumertest.LockWaiters(ctx, db, `%INSERT INTO "referral_bond_replicas"%`)
		return err == nil && n == 1
	}, "the second insert waits for the first transaction")
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.lost == nil {
		t.Fatalf("second: the first try ended %q, %v; want a unique violation (a lost race)", r.out, r.err)
	}
	if r.err != nil || r.out != consumer.SkippedStale {
		t.Fatalf("second, run again: %q, %v; want skipped-stale", r.out, r.err)
	}
}

// ActiveBond: the Active bond of a referred user, or none.
func TestActiveBond(t *testing.T) {
	t.Parallel()
	client, _, _ := pgtest.NewClient(t)
	ctx := context.Background()
	insert := func(b bond, status string) {
		t.Helper()
		if err := client.ReferralBondReplica.Create().SetID(b.ID).SetReferredUserID(b.Referred).
			SetReferrerUserID(b.Referrer).SetNillableReferrerCompanyID(b.Company).SetStatus(status).
			SetBoundAt(b.BoundAt).SetReplicaVersion(1).SetSyncedAt(baseTime).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	withActive, onlyClosed, unknownOnly, nobody := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	current := newBond(withActive)
	insert(newBond(withActive), "Replaced")
	insert(current, "Active")
	insert(newBond(withActive), "Revoked")
	insert(newBond(onlyClosed), "Revoked")
	insert(newBond(unknownOnly), "OnHold")

	got, err := ActiveBond(ctx, client, withActive)
	if err != nil || got == nil || got.ID != current.ID || got.ReferrerUserID != current.Referrer {
		t.Errorf("ActiveBond(with an Active bond) = %v, %v; want %s", got, err, current.ID)
	}
	for name, user := range map[string]uuid.UUID{"only closed": onlyClosed, "unknown status": unknownOnly, "no bond": nobody} {
		if got, err := ActiveBond(ctx, client, user); got != nil || err != nil {
			t.Errorf("ActiveBond(%s) = %v, %v; want nil, nil", name, got, err)
		}
	}
	// Inside a transaction, through tx.Client().
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if got, err := ActiveBond(ctx, tx.Client(), withActive); err != nil || got == nil || got.ID != current.ID {
		t.Errorf("ActiveBond in a transaction = %v, %v", got, err)
	}
	// The partial unique index holds the rule: a second Active row fails.
	err = client.ReferralBondReplica.Create().SetID(uuid.New()).SetReferredUserID(withActive).SetReferrerUserID(uuid.New()).
		SetStatus("Active").SetBoundAt(baseTime).SetReplicaVersion(1).SetSyncedAt(baseTime).Exec(ctx)
	if !ent.IsConstraintError(err) {
		t.Errorf("second Active row: %v, want a constraint error", err)
	}
}

// message is what the runtime hands a handler for ev.
func message(t *testing.T, ev event) *consumer.Message {
	t.Helper()
	env, err := consumer.DecodeEnvelope(ev.value)
	if err != nil {
		t.Fatal(err)
	}
	return &consumer.Message{Envelope: env, Topic: Topic, Key: []byte(ev.key)}
}

// A rebind in one transaction — the committed Active bond of a referred
// user closed, its successor created — is written with one statement, the
// close before the insert: the successor takes the single-active index's
// place the close left. The test fails when the writer sends more than one
// statement, or when the insert meets the old Active row (an insert before
// the update: a unique violation).
func TestARebindIsWrittenInOneStatementCloseFirst(t *testing.T) {
	t.Parallel()
	_, db, _ := pgtest.NewClient(t)
	client, sent := consumertest.NewStatementsClient(db)
	ctx := context.Background()
	user := uuid.New()
	old, next := newBond(user), newBond(user)
	h := &handler{m: newMetrics(prometheus.NewRegistry()), lag: newSyncedLag()}

	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := handleInTx(ctx, tx, h.bondCreated, message(t, created(old, 1, baseTime))); err != nil || out != OutcomeCreated {
		t.Fatalf("the first bond: %q, %v", out, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	msgs := []*consumer.Message{message(t, replaced(old, next, 2, baseTime)), message(t, created(next, 1, baseTime))}
	tx, v := readInTx(ctx, t, client, msgs)
	if out, err := h.bondClosed(ctx, v, msgs[0]); err != nil || out != OutcomeClosed {
		t.Fatalf("closed: %q, %v", out, err)
	}
	if out, err := h.bondCreated(ctx, v, msgs[1]); err != nil || out != OutcomeCreated {
		t.Fatalf("created: %q, %v", out, err)
	}
	// With the transaction's marks, inserted first in the same statement.
	marks := consumer.NewMarks(Group, Topic)
	marks.Add(KeyPrefixBondClosed+msgs[0].MessageID.String(), 0, 1, OutcomeClosed)
	marks.Add(KeyPrefixBondCreated+msgs[1].MessageID.String(), 0, 2, OutcomeCreated)
	sent.Start()
	if err := write(ctx, tx, v, marks); err != nil {
		t.Fatalf("the writer: %v", err)
	}
	if writes := sent.Stop(); len(writes) != 1 || !strings.Contains(writes[0], "pin_marks") {
		t.Fatalf("the writer sent %d statements, want 1 with the marks: %q", len(writes), writes)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	got, err := ActiveBond(ctx, client, user)
	if err != nil || got == nil || got.ID != next.ID {
		t.Fatalf("ActiveBond = %v, %v; want %s", got, err, next.ID)
	}
	var status string
	var version int64
	if err := db.QueryRow(`SELECT status, replica_version FROM referral_bond_replicas WHERE bond_id = $1`, old.ID).Scan(&status, &version); err != nil ||
		status != "Replaced" || version != 2 {
		t.Fatalf("the old bond: %s v%d (%v), want Replaced v2", status, version, err)
	}
	var marked int
	if err := db.QueryRow(`SELECT count(*) FROM processed_messages WHERE idempotency_key IN ($1, $2) AND outcome IN ('closed', 'created')`,
		KeyPrefixBondClosed+msgs[0].MessageID.String(), KeyPrefixBondCreated+msgs[1].MessageID.String()).Scan(&marked); err != nil || marked != 2 {
		t.Fatalf("%d marks (%v), want 2", marked, err)
	}
}

// readInTx begins a transaction on client, rolled back when the test ends
// unless it committed, and reads the view of msgs in it.
func readInTx(ctx context.Context, t *testing.T, client *ent.Client, msgs []*consumer.Message) (*ent.Tx, *view) {
	t.Helper()
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	v, err := read(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	return tx, v
}
