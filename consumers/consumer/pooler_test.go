package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/migrate/localpg"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// Behind PgBouncer in transaction mode (four server connections for eight
// clients) two pools with the default cache run statements of the same
// shape and different text: no statement ever returns the other pool's
// answer, every failure is a lost statement (the world's: retried), and
// each pool then stops preparing and says so once.
func TestStatementCacheBehindATransactionPoolerNeverRunsAnotherClientsStatement(t *testing.T) {
	t.Parallel()
	url := pgtest.Bouncer(t, pgtest.NewEmptyDB(t), localpg.BouncerOptions{})
	ctx := context.Background()
	var logs [2]consumertest.LogBuffer
	var wrong, lost, runs atomic.Int64
	var lostBy [2]atomic.Int64
	var wg sync.WaitGroup
	for p, name := range []string{"A", "B"} {
		log := zerolog.New(&logs[p])
		db, err := consumer.OpenDB(url, consumer.DBOptions{StatementCache: consumer.DefaultStatementCache, Metrics: prometheus.NewRegistry(), Logger: &log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		db.SetMaxOpenConns(4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 150 {
					k := (i + g) % 4
					// Same parameters, same result type; another text per pool.
					q := fmt.Sprintf(`SELECT '%s' || $1::text`, name+strings.Repeat("x", k))
					want := name + strings.Repeat("x", k) + "-" + fmt.Sprint(i)
					for try := 0; ; try++ {
						var got string
						err := db.QueryRowContext(ctx, q, "-"+fmt.Sprint(i)).Scan(&got)
						var pqErr *pq.Error
						if err != nil && errors.As(err, &pqErr) && consumer.InfraCause(err) == "pooler" && try < 5 {
							lost.Add(1)
							lostBy[p].Add(1)
							continue
						}
						if err != nil {
							t.Errorf("pool %s: %s: %v (cause %q)", name, q, err, consumer.InfraCause(err))
							return
						}
						runs.Add(1)
						if got != want {
							wrong.Add(1)
							t.Errorf("pool %s ran another client's statement: %q, want %q", name, got, want)
						}
						break
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d statements, %d lost to the pooler and retried, %d wrong", runs.Load(), lost.Load(), wrong.Load())
	if runs.Load() != 2*4*150 {
		t.Fatalf("%d statements ran, want %d", runs.Load(), 2*4*150)
	}
	for p := range logs {
		warned := logs[p].Lines(func(m map[string]any) bool {
			return m["level"] == "warn" && strings.Contains(fmt.Sprint(m["message"]), "pooler in transaction mode")
		})
		if want := min(lostBy[p].Load(), 1); int64(len(warned)) != want {
			t.Errorf("pool %d lost %d statements and warned %d times, want %d:\n%s", p, lostBy[p].Load(), len(warned), want, logs[p].String())
		}
	}
	if lost.Load() == 0 {
		t.Fatal("no statement was lost to the pooler: the server connections were not shared, the test proves nothing")
	}
}

// Two server connections behind PgBouncer, and two pools that each
// prepared a statement of the same shape on one of them: a transaction of
// one pool that lands on the other's server connection runs its own
// statement or fails as the world's (26000), never the other's (lib/pq
// names both "1"), and the retry runs unprepared.
func TestACachedStatementOnAnotherClientsServerConnectionIsNeverItsStatement(t *testing.T) {
	t.Parallel()
	url := pgtest.Bouncer(t, pgtest.NewEmptyDB(t), localpg.BouncerOptions{PoolSize: 2})
	ctx := context.Background()
	type client struct {
		name string
		log  consumertest.LogBuffer
		c    *sql.Conn
		pid  int
	}
	query := func(cl *client) string { return fmt.Sprintf(`SELECT '%s' || $1::text`, cl.name) }
	pidOf := func(tx *sql.Tx) int {
		var pid int
		if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	var txs []*sql.Tx
	clients := []*client{{name: "A"}, {name: "B"}}
	for _, cl := range clients {
		log := zerolog.New(&cl.log)
		db, err := consumer.OpenDB(url, consumer.DBOptions{StatementCache: consumer.DefaultStatementCache, Metrics: prometheus.NewRegistry(), Logger: &log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		cl.c = pinned(t, db)
		// In a transaction the server connection is the client's: the
		// statement is prepared on it (the second run) and runs there.
		tx, err := cl.c.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
		cl.pid = pidOf(tx)
		for i := range 3 {
			var got string
			if err := tx.QueryRowContext(ctx, query(cl), fmt.Sprint(i)).Scan(&got); err != nil || got != cl.name+fmt.Sprint(i) {
				t.Fatalf("%s on its own server connection: %q, %v", cl.name, got, err)
			}
		}
	}
	if clients[0].pid == clients[1].pid {
		t.Fatalf("both transactions on server connection %d", clients[0].pid)
	}
	for _, tx := range txs {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// A third client takes one server connection; the pool whose
	// statement is there gets the other one.
	plain, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	hold, err := plain.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback() }()
	held := pidOf(hold)
	victim, other := clients[0], clients[1]
	if held == other.pid {
		victim, other = other, victim
	}
	tx, err := victim.c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pid := pidOf(tx); pid != other.pid {
		t.Fatalf("%s is on server connection %d, want %s's %d", victim.name, pid, other.name, other.pid)
	}
	var got string
	err = tx.QueryRowContext(ctx, query(victim), "x").Scan(&got)
	_ = tx.Rollback()
	switch {
	case err == nil && got == victim.name+"x":
		t.Fatalf("%s's statement ran on %s's server connection: the test's premise is wrong", victim.name, other.name)
	case err == nil:
		t.Fatalf("%s ran %s's statement: %q", victim.name, other.name, got)
	case consumer.InfraCause(err) != "pooler":
		t.Fatalf("%s: %v, cause %q; want the world's (pooler)", victim.name, err, consumer.InfraCause(err))
	default:
		if err := victim.c.QueryRowContext(ctx, query(victim), "y").Scan(&got); err != nil || got != victim.name+"y" {
			t.Fatalf("%s, again: %q, %v", victim.name, got, err)
		}
		warned := victim.log.Lines(func(m map[string]any) bool {
			return m["level"] == "warn" && strings.Contains(fmt.Sprint(m["message"]), "DATABASE_STATEMENT_CACHE=0")
		})
		if len(warned) != 1 {
			t.Fatalf("%d warnings, want one naming the pooler and the setting:\n%s", len(warned), victim.log.String())
		}
	}
}
