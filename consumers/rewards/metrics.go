package rewards

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

// Metric names of the spec's Observability section. The runtime feeds the
// first four (consumer.SpecMetrics); this package feeds the next two, after
// the transaction committed, and MetricBondReplicas through the runtime's
// schedule (consumer.PeriodicGauge).
const (
	MetricConsumeDurationMs = "rewards_referral_bonds_consume_duration_ms"
	MetricDLQ               = "rewards_referral_bonds_dlq_total"
	MetricContractMismatch  = "rewards_contract_mismatch_total"
	MetricLagSeconds        = "rewards_referral_bonds_lag_seconds"
	MetricStaleEvents       = "rewards_bond_replica_stale_events_total"
	MetricUnknownStatus     = "rewards_bond_unknown_status_total"
	// MetricBondReplicas{status} is the replica's bonds by status, counted
	// from the database every REWARDS_RECONCILE_INTERVAL (the replica's half
	// of the reconciliation with the referral service), with
	// MetricBondReplicas+"_timestamp_seconds" and +"_errors_total"
	// (consumer.PeriodicGauge). Only Active is counted: the partial unique
	// index answers it, the closed bonds would take a scan of the table.
	MetricBondReplicas = "rewards_bond_replicas"
)

// ReconcileIntervalVar is the schedule of MetricBondReplicas (default 1m).
const ReconcileIntervalVar = "REWARDS_RECONCILE_INTERVAL"

type metrics struct {
	stale         *prometheus.CounterVec // {event_type}
	unknownStatus prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricStaleEvents,
			Help: "Bond events skipped by the version guard (Version <= replica_version, BND-1).",
		}, []string{"event_type"}),
		unknownStatus: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricUnknownStatus,
			Help: "bond-closed events with a Status this consumer does not know (stored as it came, not Active).",
		}),
	}
	reg.MustRegister(m.stale, m.unknownStatus)
	for _, t := range []EventType{BondCreatedEvent, BondClosedEvent} {
		m.stale.WithLabelValues(t.String()) // at 0 from the start
	}
	return m
}

// Querier is what CountActive reads with: an *ent.Client or a *sql.DB.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

const countActiveSQL = `SELECT count(*) FROM referral_bond_replicas WHERE status = 'Active'`

// CountActive is the number of Active bonds in the replica: one count that
// the partial unique index ux_referral_bond_replicas_referred_active
// answers, whatever the number of closed bonds. The predicate is a literal,
// not a parameter, so that even a generic (prepared) plan can use that
// index.
func CountActive(ctx context.Context, q Querier) (int64, error) {
	rows, err := q.QueryContext(ctx, countActiveSQL)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, err
		}
		return 0, errors.New("count of Active bonds: no row")
	}
	if err := rows.Scan(&n); err != nil {
		return 0, err
	}
	return n, rows.Err()
}

// bondReplicas is the PeriodicGauge of MetricBondReplicas.
func bondReplicas() consumer.PeriodicGauge {
	return consumer.PeriodicGauge{
		Name:        MetricBondReplicas,
		Help:        "Bonds of the replica by status, counted from referral_bond_replicas every " + ReconcileIntervalVar + " (Active only: compared with the referral service's count).",
		Label:       "status",
		IntervalVar: ReconcileIntervalVar,
		Interval:    time.Minute,
		Compute: func(ctx context.Context, client *ent.Client) (map[string]float64, error) {
			n, err := CountActive(ctx, client)
			if err != nil {
				return nil, err
			}
			return map[string]float64{string(StatusActive): float64(n)}, nil
		},
	}
}

// syncedLag is the lag gauge's source (MetricLagSeconds: now −
// max(synced_at), the event time of the newest applied event) without a
// scan of the table per scrape. max(synced_at) has no index: the query
// read the whole replica, 8 ms at 100,000 bonds and 341 ms at 1,000,000
// (bench/README.md, issue 28, session 12), on every scrape, under the
// gauge's 2 s timeout, past which the gauge read 0: a large replica's lag
// alert went blind. The process instead reads max(synced_at) once, in the
// background (seed), and from then on takes the newest synced_at it
// commits itself (applied, after the commit). So each instance reports
// the freshness of what it applies: a stalled instance shows its lag even
// while others write, which the table's max hid (the alert takes the max
// over instances).
type syncedLag struct {
	newest  consumer.Latest
	seeding atomic.Bool // a seed runs, or has succeeded
	seeded  atomic.Bool
	// seedTimeout bounds the one read of max(synced_at).
	seedTimeout time.Duration
}

func newSyncedLag() *syncedLag { return &syncedLag{seedTimeout: time.Minute} }

// applied records the synced_at of a committed write.
func (l *syncedLag) applied(at time.Time) { l.newest.Observe(at) }

// source is the consumer.SpecMetrics LagSource: the newest synced_at known,
// ok false while none is (an empty replica, or the seed not read yet). The
// first call starts the seed; a failed seed is tried again by the next.
func (l *syncedLag) source(_ context.Context, client *ent.Client) (time.Time, bool, error) {
	if !l.seeded.Load() && l.seeding.CompareAndSwap(false, true) {
		go l.seed(client)
	}
	t, ok := l.newest.Load()
	return t, ok, nil
}

func (l *syncedLag) seed(client *ent.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), l.seedTimeout)
	defer cancel()
	t, ok, err := lastSyncedAt(ctx, client)
	if err != nil {
		l.seeding.Store(false) // the next scrape tries again
		return
	}
	if ok {
		l.applied(t)
	}
	l.seeded.Store(true)
}

// lastSyncedAt is max(synced_at), the event time of the newest applied
// event: a scan of the replica, read once per process (syncedLag). ok is
// false while the replica is empty.
func lastSyncedAt(ctx context.Context, client *ent.Client) (time.Time, bool, error) {
	rows, err := client.QueryContext(ctx, `SELECT max(synced_at) FROM referral_bond_replicas`)
	if err != nil {
		return time.Time{}, false, err
	}
	defer rows.Close()
	var t sql.NullTime
	if rows.Next() {
		if err := rows.Scan(&t); err != nil {
			return time.Time{}, false, err
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, false, err
	}
	return t.Time, t.Valid, nil
}
