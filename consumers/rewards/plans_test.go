package rewards

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/ent"
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
	var query string
	drv := dialect.DebugWithContext(entsql.OpenDB(dialect.Postgres, e.DB), func(_ context.Context, v ...any) {
		s := fmt.Sprint(v...)
		if q, _, ok := strings.Cut(s, " args="); ok && strings.Contains(q, "FOR UPDATE") {
			_, query, _ = strings.Cut(q, "query=")
		}
	})
	ctx := context.Background()
	tx, err := ent.NewClient(ent.Driver(drv)).Tx(ctx)
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
	if _, err := read(ctx, tx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if query == "" {
		t.Fatal("read sent no FOR UPDATE statement")
	}

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
	if !strings.Contains(plan, `"Actual Rows": 4`) {
		t.Fatalf("the read did not lock the 4 rows: %s", plan)
	}
}
