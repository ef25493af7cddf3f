package messenger

import (
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
)

// Several snapshots of one lead in one batch: their chat_updates rows are
// written by one multi-row INSERT, and must still be ordered as the
// snapshots were (created_at strictly increasing), since that is the order
// in which a pusher delivers them.
func TestChatUpdatesOfOneBatchKeepTheSnapshotsOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, consumertest.Options{})
	e.Stop() // produce first: one batch on restart
	lead := uuid.New()
	chatID := e.provision(lead)
	users := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	var evs []ev
	for v := 1; v <= len(users); v++ {
		// Version v: the first v users, the executor first.
		active := []member{{users[0], RoleExecutor}}
		for _, u := range users[1:v] {
			active = append(active, member{u, RoleCoAgent})
		}
		evs = append(evs, newEv(lead, int64(v), active...).on(0))
	}
	tps := e.produce(evs...)
	e.Start(consumertest.Options{})
	e.awaitCommitted(tps...)

	ps := e.pushes(chatID) // ORDER BY created_at, id
	if len(ps) != len(evs) {
		t.Fatalf("%d chat_updates rows, want %d", len(ps), len(evs))
	}
	for i, p := range ps {
		if len(p.Recipients) != i+1 {
			t.Fatalf("chat_updates row %d has %d recipients, want %d (version %d's): out of order", i, len(p.Recipients), i+1, i+1)
		}
	}
	var distinct int
	if err := e.DB.QueryRow(`SELECT count(DISTINCT created_at) FROM chat_updates WHERE chat_id = $1`, chatID).Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != len(evs) {
		t.Fatalf("%d distinct created_at for %d rows", distinct, len(evs))
	}
	if n := e.Run.Counter("pin_consumer_batch_size", nil); n == 0 {
		t.Fatal("no batch was committed")
	}
}
