package crm

import "github.com/prometheus/client_golang/prometheus"

// The metric families of the spec's Observability section. The runtime
// feeds all but MetricLeadNotFound (consumer.SpecMetrics).
const (
	MetricConsumeDuration  = "crm_selection_shared_consume_duration_ms"
	MetricLag              = "crm_selection_shared_lag_seconds"
	MetricLeadNotFound     = "crm_selection_shared_lead_not_found_total"
	MetricRetries          = "crm_selection_shared_retries_total"
	MetricDLQ              = "crm_selection_shared_dlq_total"
	MetricDuplicates       = "crm_selection_shared_duplicates_total"
	MetricContractMismatch = "crm_selection_shared_contract_mismatch_total"
)

// metrics are the service's own families.
type metrics struct {
	// leadNotFound counts every attempt that found no Active lead for the
	// pair (CRM_SELECTION_LEAD_NOT_FOUND). It is incremented when the
	// handler returns the code, not after commit: such an attempt rolls
	// back, and AfterCommit hooks of a rolled-back attempt never run.
	leadNotFound prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		leadNotFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricLeadNotFound,
			Help: "Attempts that found no Active lead for the (agent, investor) pair (CRM_SELECTION_LEAD_NOT_FOUND).",
		}),
	}
	reg.MustRegister(m.leadNotFound)
	return m
}
