package rewards

import (
	"context"
	"database/sql"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/ent"
)

// Metric names of the spec's Observability section. The runtime feeds the
// first four (consumer.SpecMetrics); this package feeds the last two, after
// the transaction committed.
const (
	MetricConsumeDurationMs = "rewards_referral_bonds_consume_duration_ms"
	MetricDLQ               = "rewards_referral_bonds_dlq_total"
	MetricContractMismatch  = "rewards_contract_mismatch_total"
	MetricLagSeconds        = "rewards_referral_bonds_lag_seconds"
	MetricStaleEvents       = "rewards_bond_replica_stale_events_total"
	MetricUnknownStatus     = "rewards_bond_unknown_status_total"
)

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

// lastSyncedAt is the lag gauge's source: max(synced_at), the event time of
// the newest applied event. ok is false while the replica is empty.
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
