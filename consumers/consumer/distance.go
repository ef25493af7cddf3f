package consumer

import (
	"context"
	"database/sql"
	"time"
)

// How far PostgreSQL is decides two defaults (DESIGN.md, "Scheduling").
// A transaction of messages is a chain of four or five round trips
// (BEGIN, Read, Write's statements with the marks in the first, COMMIT),
// each waited for; it was six when these figures were taken. On one
// machine they cost little and two lanes keep the cores busy; a
// millisecond away they are a fifth of a lane's time, and with two lanes
// the machine idled a fifth of a backlog's run. Three lanes of up to 512
// messages a partition carried 2–14 % more events a second there and
// used 80–92 % of what the cores allowed against 73–81 % (bench/README.md,
// session 15); they cost crm a fifth more of its own CPU per event (a
// larger live heap for the collector to scan), which on loopback buys
// no more events a second. So when neither CONSUMER_TRANSACTIONS nor
// CONSUMER_BATCH_SIZE is set, Run measures the round trip before it
// consumes, and a database farRoundTrip or more away gets
// farTransactions lanes of farBatchSize.
const (
	farRoundTrip    = 500 * time.Microsecond
	farTransactions = 3
	farBatchSize    = 512
	// distancePings: the least of this many pings is the distance, less
	// the waits of a busy machine (a ping on loopback takes 0.03–0.06 ms
	// at best, up to milliseconds on two busy cores).
	distancePings = 5
)

// roundTrip is the shortest of distancePings pings of db.
func roundTrip(ctx context.Context, db *sql.DB) (time.Duration, error) {
	best := time.Duration(-1)
	for range distancePings {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t0 := time.Now()
		err := db.PingContext(pctx)
		d := time.Since(t0)
		cancel()
		if err != nil {
			return 0, err
		}
		if best < 0 || d < best {
			best = d
		}
	}
	return best, nil
}

// lanesFor is how many transactions run at once and how many messages of
// a partition each takes, for cfg and a database rtt away.
func lanesFor(cfg Config, rtt time.Duration) (transactions, batch int) {
	if !cfg.FollowDistance || rtt < farRoundTrip {
		return cfg.Transactions, cfg.BatchSize
	}
	return max(cfg.Transactions, farTransactions), min(max(cfg.BatchSize, farBatchSize), MaxBatchSize)
}

// backlogFor is how many messages waiting open a lane beyond the first
// (scheduler.go) for svc, batches of batch messages and a database rtt
// away: a batch's worth near, none (any run) far or for an EagerLanes
// service. Far, a lane's transaction waits on its round trips, and one
// lane kept busy at half load held the runs behind it: messenger's p99
// 514–539 ms, rewards' 81 against 62–69 (bench/README.md, session 25).
func backlogFor(svc Service, rtt time.Duration, batch int) int {
	if svc.EagerLanes || rtt >= farRoundTrip {
		return 0
	}
	return batch
}

// followDistance measures the database's distance and sets from it how
// the lanes beyond the first open (backlogFor) and, unless the operator
// chose them, the lanes and the batch size (lanesFor); it says so. Run
// calls it before any worker or re-drive asks the scheduler for a lane;
// until then, and if the distance cannot be measured, every lane opens
// for any run, as for a far database.
func (r *Runtime) followDistance(ctx context.Context) {
	rtt, err := roundTrip(ctx, r.db)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Int("transactions", r.cfg.Transactions).Int("batch_size", r.cfg.BatchSize).
				Msg("the database's round trip could not be measured: the lanes and batch size stay as they are, each lane opening for any run")
		}
		return
	}
	n, b := lanesFor(r.cfg, rtt)
	r.cfg.Transactions, r.cfg.BatchSize = n, b
	r.cfg.QueueSize = max(r.cfg.QueueSize, b)
	backlog := backlogFor(r.svc, rtt, b)
	r.sched = newScheduler(n, sharedLimit*b, r.cfg.TransactionBytes, backlog)
	msg := "database distance measured: the transactions at once and their batch size follow it (set CONSUMER_TRANSACTIONS or CONSUMER_BATCH_SIZE to choose them)"
	if !r.cfg.FollowDistance {
		msg = "database distance measured: the transactions at once and their batch size are as set"
	}
	r.log.Info().Float64("round_trip_ms", float64(rtt.Microseconds())/1000).
		Int("transactions", r.sched.lanes).Int("batch_size", r.cfg.BatchSize).Int("queue_size", r.cfg.QueueSize).Bool("far", rtt >= farRoundTrip).
		Int("lane_backlog", backlog).Msg(msg)
}
