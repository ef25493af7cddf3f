package messenger

import "github.com/prometheus/client_golang/prometheus"

// metrics are the spec's handler-specific counters (Observability). The
// runtime feeds the others (consume duration, DLQ, contract mismatch, lag)
// under the names given in Service.Metrics. They are incremented in
// AfterCommit only: a rolled-back attempt counts nothing.
type metrics struct {
	added   prometheus.Counter // messenger_participants_added_total
	removed prometheus.Counter // messenger_participants_removed_total
	stale   prometheus.Counter // messenger_lead_participants_stale_total
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		added: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "messenger_participants_added_total",
			Help: "Members added to or reactivated in lead chats.",
		}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "messenger_participants_removed_total",
			Help: "Members removed (soft) from lead chats.",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "messenger_lead_participants_stale_total",
			Help: "Lead-participants snapshots skipped because the chat has applied the same or a newer Version.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.added, m.removed, m.stale)
	}
	return m
}
