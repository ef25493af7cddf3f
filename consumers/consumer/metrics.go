package consumer

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// UnknownEventType is the event_type label of a message no route takes
// (and of one whose envelope cannot be read): the producer's text never
// becomes a label value, so garbage cannot grow the series without bound.
const UnknownEventType = "unknown"

// metrics are the runtime's generic families (label service on each) and
// the spec-named families of the service.
type metrics struct {
	messages         *prometheus.CounterVec           // pin_consumer_messages_total{event_type,outcome}
	duration         *prometheus.HistogramVec         // pin_consumer_message_duration_seconds{event_type}
	retries          *prometheus.CounterVec           // pin_consumer_retries_total{class,code}
	dlq              *prometheus.CounterVec           // pin_consumer_dlq_total{code}
	parked           *prometheus.CounterVec           // pin_consumer_parked_total{code}
	paused           prometheus.Gauge                 // pin_consumer_paused_partitions
	inFlight         prometheus.Gauge                 // pin_consumer_in_flight_messages
	lag              *prometheus.GaugeVec             // pin_consumer_lag_messages{topic,partition}
	contractMismatch prometheus.Counter               // pin_consumer_contract_mismatch_total
	unknownType      *prometheus.CounterVec           // pin_consumer_unknown_event_types_total{event_type}
	batchSize        prometheus.Histogram             // pin_consumer_batch_size
	batchReruns      *prometheus.CounterVec           // pin_consumer_batch_reruns_total{reason}
	sharedRuns       prometheus.Histogram             // pin_consumer_shared_transaction_runs
	offsetCommits    *prometheus.CounterVec           // pin_consumer_offset_commits_total{trigger,result}
	infraErrors      *prometheus.CounterVec           // pin_consumer_infrastructure_errors_total{cause}
	schemaBehind     prometheus.Gauge                 // pin_consumer_schema_behind
	dlqMissing       prometheus.Gauge                 // pin_consumer_dlq_partitions_missing
	waits            [numWaits]prometheus.Observer    // pin_consumer_wait_seconds{stage}
	txStages         [numTxStages]prometheus.Observer // pin_consumer_transaction_stage_seconds{stage}

	specDuration  prometheus.Observer
	specDLQ       *prometheus.CounterVec
	specMismatch  prometheus.Counter
	specDupes     prometheus.Counter
	specRetries   *prometheus.CounterVec
	lastEventTime Latest // the newest CreatedAt processed
}

// held is what the partitions' messages hold in memory now, in bytes
// (pin_consumer_held_bytes).
func newMetrics(reg prometheus.Registerer, svc Service, lagSource func(context.Context) (time.Time, bool, error), held func() float64) *metrics {
	g := prometheus.WrapRegistererWith(prometheus.Labels{"service": svc.Name}, reg)
	g.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pin_consumer_held_bytes",
		Help: "Bytes (keys, values, headers) of the messages handed to the partitions' workers and not yet done: queued, or in a transaction. Each partition holds at most CONSUMER_QUEUE_BYTES (or one larger message).",
	}, held))
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_messages_total", Help: "Messages finished, by event type and outcome (applied, skipped-*, parked, dead-lettered, …).",
		}, []string{"event_type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pin_consumer_message_duration_seconds", Help: "Time from a message's dispatch to its acknowledgement.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"event_type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_retries_total", Help: "Retries by class (retry-now, retry-later, infrastructure) and code.",
		}, []string{"class", "code"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_dlq_total", Help: "Messages dead-lettered, by error code.",
		}, []string{"code"}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_parked_total", Help: "Messages parked to wait out a retry-later error, by code.",
		}, []string{"code"}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pin_consumer_paused_partitions", Help: "Partitions paused because their worker is behind or backing off.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pin_consumer_in_flight_messages", Help: "Messages being processed now.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pin_consumer_lag_messages", Help: "Consumer lag per partition, from librdkafka statistics.",
		}, []string{"topic", "partition"}),
		contractMismatch: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pin_consumer_contract_mismatch_total", Help: "Envelopes whose ContractVersion differs from the expected one (processed anyway).",
		}),
		unknownType: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_unknown_event_types_total", Help: "Messages skipped because the consumer does not know their EventType (event_type is always \"unknown\"; the log line has the text).",
		}, []string{"event_type"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pin_consumer_batch_size", Help: "Messages committed per database transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		}),
		batchReruns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_batch_reruns_total",
			Help: "Batches rolled back and run again at once: processed-already (redelivered messages taken out, as after a rebalance or a restart), mark-exists (a partition's plain insert of its marks met one that exists: run again to find which), lost-race (a deadlock's or serialization failure's victim, or a unique key another processor took since Read), shared-failed (a transaction shared by several partitions' runs did not commit: each runs again on its own).",
		}, []string{"reason"}),
		sharedRuns: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pin_consumer_shared_transaction_runs", Help: "Partitions' runs per transaction (CONSUMER_TRANSACTIONS lanes).",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16},
		}),
		offsetCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_offset_commits_total",
			Help: "Synchronous offset commits to Kafka by trigger (stored: right after offsets were stored; revoke; shutdown) and result (committed, nothing: no new offset stored, failed). librdkafka's periodic auto-commit, the backstop, is not counted.",
		}, []string{"trigger", "result"}),
		infraErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pin_consumer_infrastructure_errors_total",
			Help: "Failed attempts whose cause is not the message's own, by cause: the SQLSTATE class PostgreSQL reported (25 read-only, 42 a missing privilege, table or column, 08 connection, 53 resources, 57 shutdown or timeout, …), connection (the driver's connection lost), kafka (a DLQ publish failed), systemic (an unexpected failure other messages meet too). The partition waits and retries; nothing is dead-lettered.",
		}, []string{"cause"}),
		schemaBehind: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pin_consumer_schema_behind",
			Help: "1 while the database lacks the newest migration the binary was built with: the consumer does not join its group until `pinctl migrate apply` ran.",
		}),
		dlqMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pin_consumer_dlq_partitions_missing",
			Help: "Source partitions the DLQ topic lacks (partitions added to the source only): their dead letters go to DLQ partition (number modulo the DLQ's partitions). 0 when the DLQ has as many as its source.",
		}),
	}
	waits := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pin_consumer_wait_seconds",
		Help:    "A message's wait before its first transaction, by stage: partition (from its hand-over to its partition's worker until its run asks for a lane: behind the partition's previous run), lane (until its transaction starts: waiting for one of the CONSUMER_TRANSACTIONS lanes).",
		Buckets: stageBuckets,
	}, []string{"stage"})
	txStages := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pin_consumer_transaction_stage_seconds",
		Help:    "The stages of a transaction of messages, each observed when it ends: begin, read (the service's Read), decide (the handlers), marks (in a statement of their own), write (the service's Write, mostly with the marks), commit. A probe's are not counted.",
		Buckets: stageBuckets,
	}, []string{"stage"})
	for i, s := range waitNames {
		m.waits[i] = waits.WithLabelValues(s)
	}
	for i, s := range txStageNames {
		m.txStages[i] = txStages.WithLabelValues(s)
	}
	g.MustRegister(m.messages, m.duration, m.retries, m.dlq, m.parked, m.paused, m.inFlight,
		m.lag, m.contractMismatch, m.unknownType, m.batchSize, m.batchReruns, m.sharedRuns, m.offsetCommits,
		m.infraErrors, m.schemaBehind, m.dlqMissing, waits, txStages)
	for _, cause := range InfrastructureCauses {
		m.infraErrors.WithLabelValues(cause)
	}
	m.unknownType.WithLabelValues(UnknownEventType)
	for _, reason := range []string{"processed-already", "mark-exists", "lost-race", "shared-failed"} {
		m.batchReruns.WithLabelValues(reason) // a series from the start: rate() and alerts see zeros
	}
	for _, trigger := range []string{"stored", "revoke", "shutdown"} {
		for _, result := range []string{"committed", "nothing", "failed"} {
			m.offsetCommits.WithLabelValues(trigger, result)
		}
	}

	sm := svc.Metrics
	if sm.DurationMs != "" {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: sm.DurationMs, Help: "Consume duration of one message, milliseconds.",
			Buckets: []float64{0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000},
		})
		reg.MustRegister(h)
		m.specDuration = h
	}
	if sm.DLQ != "" {
		m.specDLQ = prometheus.NewCounterVec(prometheus.CounterOpts{Name: sm.DLQ, Help: "Messages dead-lettered, by error code."}, []string{"code"})
		reg.MustRegister(m.specDLQ)
	}
	if sm.ContractMismatch != "" {
		m.specMismatch = prometheus.NewCounter(prometheus.CounterOpts{Name: sm.ContractMismatch, Help: "Envelopes with an unexpected ContractVersion."})
		reg.MustRegister(m.specMismatch)
	}
	if sm.Duplicates != "" {
		m.specDupes = prometheus.NewCounter(prometheus.CounterOpts{Name: sm.Duplicates, Help: "Messages skipped as duplicates."})
		reg.MustRegister(m.specDupes)
	}
	if sm.Retries != "" {
		m.specRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: sm.Retries, Help: "Retries, by class and code."}, []string{"class", "code"})
		reg.MustRegister(m.specRetries)
	}
	m.zeroes(svc)
	if sm.Lag != "" {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: sm.Lag, Help: "Seconds between now and the event time of the newest applied event.",
		}, func() float64 {
			var t time.Time
			if lagSource != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				v, ok, err := lagSource(ctx)
				if err != nil || !ok {
					return 0
				}
				t = v
			} else {
				v, ok := m.lastEventTime.Load()
				if !ok {
					return 0
				}
				t = v
			}
			return max(0, time.Since(t).Seconds()) // an event time ahead of the clock is no lag
		}))
	}
	return m
}

// zeroes creates the series of every label value from a closed set at 0
// (the spec's codes, the routes, the outcomes): a counter whose series is
// born at its first increment hides that increment from increase(), and
// from every "DLQ > 0" alert, after each start of the process.
func (m *metrics) zeroes(svc Service) {
	codes := append([]Code{EnvelopeInvalid, ProcessingFailed, svc.InvalidCode}, svc.Codes...)
	for _, c := range codes {
		m.dlq.WithLabelValues(c.Name)
		if m.specDLQ != nil {
			m.specDLQ.WithLabelValues(c.Name)
		}
		if c.Class == RetryNow || c.Class == RetryLater {
			m.retries.WithLabelValues(c.Class.String(), c.Name)
			if m.specRetries != nil {
				m.specRetries.WithLabelValues(c.Class.String(), c.Name)
			}
		}
		if c.Class == RetryLater && !svc.Blocking {
			m.parked.WithLabelValues(c.Name)
		}
	}
	outcomes := append([]Outcome{SkippedDuplicate, DeadLettered}, svc.Outcomes...)
	if !svc.Blocking {
		outcomes = append(outcomes, Parked)
	}
	for _, r := range svc.Routes() {
		m.duration.WithLabelValues(r.EventType)
		for _, o := range outcomes {
			m.messages.WithLabelValues(r.EventType, string(o))
		}
	}
	m.duration.WithLabelValues(UnknownEventType)
	for _, o := range []Outcome{SkippedUnknownEventType, DeadLettered} {
		m.messages.WithLabelValues(UnknownEventType, string(o))
	}
}

// The stages of pin_consumer_wait_seconds and
// pin_consumer_transaction_stage_seconds: where a message's time goes
// between its hand-over and its acknowledgement (bench/README.md prints
// them per run).
type (
	wait    int
	txStage int
)

const (
	waitPartition wait = iota
	waitLane
	numWaits
)

const (
	stageBegin txStage = iota
	stageRead
	stageDecide
	stageMarks
	stageWrite
	stageCommit
	numTxStages
)

var (
	waitNames    = [numWaits]string{"partition", "lane"}
	txStageNames = [numTxStages]string{"begin", "read", "decide", "marks", "write", "commit"}
	// 0.1 ms to 10 s: a statement on loopback to a transaction stuck
	// behind a lock; 50 ms, the half-load latency target, is a bound.
	stageBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)

// waited records the waits of a run's messages that reach their first
// transaction: the run asked for a lane at asked, and its transaction
// started at started. A message's later attempts (a run again alone) are
// not counted: its first wait is the one a load makes.
func (m *metrics) waited(items []*item, asked, started time.Time) {
	lane := started.Sub(asked).Seconds()
	for _, it := range items {
		if it.waited {
			continue
		}
		it.waited = true
		m.waits[waitPartition].Observe(asked.Sub(it.start).Seconds())
		m.waits[waitLane].Observe(lane)
	}
}

// stageClock times a transaction's stages: done observes the stage that
// ends now, since the previous one ended (or the clock started). A clock
// that is off (a probe's) observes nothing.
type stageClock struct {
	m  *metrics
	at time.Time
}

func (m *metrics) stageClock(on bool) stageClock {
	if !on {
		return stageClock{}
	}
	return stageClock{m: m, at: time.Now()}
}

func (c *stageClock) done(s txStage) {
	if c.m == nil {
		return
	}
	now := time.Now()
	c.m.txStages[s].Observe(now.Sub(c.at).Seconds())
	c.at = now
}

func (m *metrics) finished(eventType string, out Outcome, d time.Duration) {
	m.messages.WithLabelValues(eventType, string(out)).Inc()
	m.duration.WithLabelValues(eventType).Observe(d.Seconds())
	if m.specDuration != nil {
		m.specDuration.Observe(float64(d) / float64(time.Millisecond))
	}
	if out == SkippedDuplicate && m.specDupes != nil {
		m.specDupes.Inc()
	}
}

func (m *metrics) retry(class Class, code string) {
	m.retries.WithLabelValues(class.String(), code).Inc()
	if m.specRetries != nil {
		m.specRetries.WithLabelValues(class.String(), code).Inc()
	}
}

// infra counts a failed attempt whose cause is the world's.
func (m *metrics) infra(cause string) { m.infraErrors.WithLabelValues(cause).Inc() }

func (m *metrics) deadLettered(code string) {
	m.dlq.WithLabelValues(code).Inc()
	if m.specDLQ != nil {
		m.specDLQ.WithLabelValues(code).Inc()
	}
}

func (m *metrics) mismatch() {
	m.contractMismatch.Inc()
	if m.specMismatch != nil {
		m.specMismatch.Inc()
	}
}

func (m *metrics) eventTime(t time.Time) { m.lastEventTime.Observe(t) }

// stats reads consumer_lag per partition from librdkafka's statistics JSON.
// stats records the lag from librdkafka's statistics and returns its
// consumer group's state ("up": the coordinator is known and the member
// takes part in the group; "" when unreadable).
func (m *metrics) stats(js string) (groupState string) {
	var s struct {
		Cgrp struct {
			State string `json:"state"`
		} `json:"cgrp"`
		Topics map[string]struct {
			Partitions map[string]struct {
				ConsumerLag int64 `json:"consumer_lag"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	if json.Unmarshal([]byte(js), &s) != nil {
		return ""
	}
	for topic, t := range s.Topics {
		for p, ps := range t.Partitions {
			if n, err := strconv.Atoi(p); err != nil || n < 0 || ps.ConsumerLag < 0 {
				continue
			}
			m.lag.WithLabelValues(topic, p).Set(float64(ps.ConsumerLag))
		}
	}
	return s.Cgrp.State
}
