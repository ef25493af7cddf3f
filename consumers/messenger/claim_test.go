package messenger

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// The chats' claim (claimSQL) locks every chat of the transaction in id
// order, once, before it updates any: its CTE is counted in an InitPlan
// that a one-time filter checks before the join is read. The shape is the
// planner's, not a documented guarantee: this test fails if a planner
// (or an edit) makes it another, under the settings of the runtime's
// transactions.
func TestTheChatsClaimLocksThemAllBeforeItUpdates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	tx, err := e.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a rolled-back read: nothing to keep
	if _, err := tx.Exec(consumer.PlanSettings); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`PREPARE claim_shape(uuid[], bigint[], bigint[], bigint[]) AS ` + claimSQL); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(`EXPLAIN (COSTS OFF) EXECUTE claim_shape('{}', '{}', '{}', '{}')`)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	at := func(s string) int {
		i := strings.Index(text, s)
		if i < 0 {
			t.Fatalf("no %q in the claim's plan:\n%s", s, text)
		}
		return i
	}
	// The CTE: rows locked as they come out of the id order.
	if cte, lock := at("CTE locked"), at("LockRows"); lock < cte {
		t.Fatalf("LockRows outside the CTE:\n%s", text)
	}
	// Counted once, then checked before the join is read.
	init, filter := at("InitPlan"), at("One-Time Filter")
	if filter < init {
		t.Fatalf("the one-time filter comes before the InitPlan:\n%s", text)
	}
	if strings.Count(text, "LockRows") != 1 {
		t.Fatalf("the chats are locked by more than one node:\n%s", text)
	}
}

// A claim that waits for a chat another transaction holds, which then
// commits a new row_version, sees that version (PostgreSQL re-checks the
// condition on the newest row): the chat is not updated, its first event
// is MSG_CONCURRENT_UPDATE, re-run at once on a fresh read, and applied.
func TestAClaimWaitingOnAChatsLockSeesItsNewVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	lead, a, b := uuid.New(), uuid.New(), uuid.New()
	chatID := e.provision(lead)
	v1 := newEv(lead, 1, member{a, RoleExecutor})
	e.produce(v1)
	e.awaitOutcome(v1.ID, Synced)
	retries := func() float64 {
		return e.Run.Counter("pin_consumer_retries_total", map[string]string{"class": "retry-now", "code": CodeConcurrentUpdate.Name})
	}
	r0 := retries()

	holder := make(chan *sql.Tx, 1)
	var fired atomic.Bool
	onBeforeWrite(t, chatID, func(context.Context) {
		if fired.Swap(true) {
			return
		}
		tx, err := e.DB.Begin()
		if err == nil {
			_, err = tx.Exec(`UPDATE chats SET row_version = row_version + 1 WHERE id = $1`, chatID)
		}
		if err != nil {
			t.Errorf("the holder: %v", err)
			if tx != nil {
				_ = tx.Rollback() // its lock must not hold the consumer
			}
			tx = nil
		}
		holder <- tx
	})
	v2 := newEv(lead, 2, member{a, RoleExecutor}, member{b, RoleCoAgent})
	tps := e.produce(v2)
	tx := <-holder
	if tx == nil {
		t.FailNow()
	}
	kafkatest.Eventually(t, servicetest.Wait, func() bool {
		n, err := consumertest.LockWaiters(context.Background(), e.DB, "WITH locked AS%")
		return err == nil && n == 1
	}, "the claim waiting for the holder's lock")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	e.awaitOutcome(v2.ID, Synced)
	e.awaitCommitted(tps...)
	if r := retries() - r0; r != 1 {
		t.Fatalf("%v retry-now of MSG_CONCURRENT_UPDATE, want 1", r)
	}
	checkActive(t, e.DB, chatID, member{a, RoleExecutor}, member{b, RoleCoAgent})
	if s := e.chat(chatID); s.RowVersion != 3 || s.LeadMemberVersion.Int64 != 2 {
		t.Fatalf("chat %+v, want row_version 3 (v1, the holder's, v2) and lead_member_version 2", s)
	}
}
