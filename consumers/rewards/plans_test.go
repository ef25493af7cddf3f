package rewards

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// The bonds' read (read, lockedRows) looks its rows up whatever the
// table's statistics said when its connection planned it: each connection
// plans a statement once, for any arguments (force_generic_plan), and the
// read's former condition, `bond_id = ANY($1) OR (referred_user_id =
// ANY($2) AND status = 'Active')`, planned while the replica had been
// analyzed empty (a fresh deployment, until autovacuum analyzes it again),
// read every row through the primary key in id order and filtered them: a
// read's p99 reached 407 ms as the replica filled. The test analyzes the
// empty table, adds 1,000 Active bonds, and runs the generic plan of the
// statement read sends for two bonds and two users.
func TestTheBondsReadLooksItsRowsUp(t *testing.T) {
	e := newEnv(t)                           // parallel
	e.Exec(`ANALYZE referral_bond_replicas`) // empty: its statistics say so
	bonds := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	users := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New()}

	// The statement read sends for bonds 0 and 1 of users 2 and 3.
	client, sent := consumertest.NewStatementsClient(e.DB)
	ctx := context.Background()
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a read: nothing to keep
	var msgs []*consumer.Message
	for i := range 2 {
		payload, err := json.Marshal(map[string]string{"BondId": bonds[i].String(), "ReferredUserId": users[i+2].String()})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, &consumer.Message{Envelope: consumer.Envelope{MessageID: uuid.New(), EventType: EventTypeBondCreated,
			ContractVersion: 1, Payload: payload}, Topic: Topic})
	}
	sent.Start()
	if _, err := read(ctx, tx, msgs); err != nil {
		t.Fatal(err)
	}
	reads := sent.Stop()
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if len(reads) != 1 || !strings.Contains(reads[0], "FOR UPDATE") {
		t.Fatalf("read sent %q, want one FOR UPDATE statement", reads)
	}
	query := reads[0]

	// Planned on the empty table; then 1,000 Active bonds, and the 4.
	var values []string
	for i := range bonds {
		values = append(values, fmt.Sprintf("('%s'::uuid, '%s'::uuid)", bonds[i], users[i]))
	}
	fill := `INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at)
		SELECT b, u, gen_random_uuid(), 'Active', now(), 1, now() FROM (SELECT gen_random_uuid(), gen_random_uuid() FROM generate_series(1, 1000)
		UNION ALL VALUES ` + strings.Join(values, ", ") + `) AS r(b, u)`
	read, plan := consumertest.RowsRead(t, e.DB, "referral_bond_replicas", "bonds_read", "uuid[], uuid[]", query, fill,
		fmt.Sprintf("'{%s,%s}', '{%s,%s}'", bonds[0], bonds[1], users[2], users[3]))
	if read > 8 {
		t.Fatalf("the generic plan read %d bond rows to lock 4: %s", read, plan)
	}
	var top []struct {
		Plan struct {
			Rows float64 `json:"Actual Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &top); err != nil || len(top) != 1 {
		t.Fatalf("EXPLAIN's JSON: %v", err)
	}
	if top[0].Plan.Rows != 4 {
		t.Fatalf("the read locked %v rows, want the 2 bonds and the 2 users' Active bonds: %s", top[0].Plan.Rows, plan)
	}
}

// A read that waits on the lock of its referred user's Active bond, which
// another transaction closes meanwhile, gets that bond as it is now:
// lockedRows takes the user's Active bonds from the statement's snapshot,
// so the row stays in the view, Revoked, where the former condition's
// re-check dropped it. The single-active check looks at Active rows only,
// and the new bond is created.
func TestAReadWaitingOnABondThatClosesCreatesTheNewOne(t *testing.T) {
	e := newEnv(t) // parallel
	referred := uuid.New()
	old, next := newBond(referred), newBond(referred)
	e.Exec(`INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at)
		VALUES ($1, $2, $3, 'Active', $4, 1, now())`, old.ID, old.Referred, old.Referrer, old.BoundAt)
	e.start()

	holder, err := e.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	if _, err := holder.Exec(`SELECT 1 FROM referral_bond_replicas WHERE bond_id = $1 FOR UPDATE`, old.ID); err != nil {
		t.Fatal(err)
	}
	ev := created(next, 1, baseTime)
	e.produce(ev)
	kafkatest.Eventually(t, servicetest.Wait, func() bool { // the consumer's read waits for the old bond
		n, err := consumertest.LockWaiters(context.Background(), e.DB, "%FOR UPDATE%")
		return err == nil && n > 0
	}, "the consumer's read waiting for the old bond's lock")
	if _, err := holder.Exec(`UPDATE referral_bond_replicas SET status = 'Revoked', replica_version = 2 WHERE bond_id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted()
	if got := e.outcome(ev); got != string(OutcomeCreated) {
		t.Fatalf("outcome %q, want %q", got, OutcomeCreated)
	}
	if r := e.row(next.ID); r == nil || r.Status != string(StatusActive) {
		t.Fatalf("the new bond: %+v, want Active", r)
	}
	if n := e.activeCount(referred); n != 1 {
		t.Fatalf("%d Active bonds of the referred user, want 1", n)
	}
}
