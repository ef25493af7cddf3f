package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/internal/kafkaenv"
)

// Options are a Runtime's collaborators. Zero values take sane defaults.
type Options struct {
	Logger         zerolog.Logger
	Registry       *prometheus.Registry          // default: a new registry with Go and process collectors
	TracerProvider trace.TracerProvider          // default: otel.GetTracerProvider()
	Propagator     propagation.TextMapPropagator // default: W3C trace context
	// Redact masks the process's secrets in a text the runtime sends out
	// (a DLQ's x-dlq-reason, a span's status); nil: none.
	Redact func(string) string
	// FlushLog writes the log lines Logger's output holds back, if it
	// does (Main's does: loglines.go); the runtime calls it after each
	// batch a worker handled. nil: nothing to flush.
	FlushLog func()
	// SchemaVersion is the newest migration the binary was built with
	// (migrations.Latest): the consumer joins its group only once the database
	// has it (schemagate.go). Empty: no gate.
	SchemaVersion string
}

// Runtime runs one Service: a consumer-group member, its partition workers,
// the parked-message re-driver, the DLQ producer and the HTTP endpoints.
type Runtime struct {
	cfg    Config
	svc    Service
	client *ent.Client
	db     *sql.DB
	log    zerolog.Logger
	reg    *prometheus.Registry
	m      *metrics
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// tracingOff: the tracer provider is the no-op one (main's without an
	// OTLP endpoint, or with OTEL_TRACES_EXPORTER=none), so no attempt
	// spans (startAttempt) and no db.batch span (runTx).
	tracingOff bool

	// span is what every message's consumer span starts with.
	span struct {
		name        string
		kind, attrs trace.SpanStartOption
	}

	consumer *kafka.Consumer
	dlq      *dlqProducer

	// workers is written by the poll goroutine only (dispatch, rebalance);
	// mu guards it for readers elsewhere (readiness).
	mu      sync.Mutex
	workers map[int32]*worker

	// sched runs every transaction of the workers, at most
	// CONSUMER_TRANSACTIONS at once, sharing them between partitions.
	sched *scheduler

	gauges []*gauge // Service.Gauges, computed by runGauge

	// routes are the service's routes, in its order: a message's route
	// is its index here.
	routes []RouteInfo
	// commits holds, per route (EventType), when a message last committed
	// with its handler's effect (unix nanos): the evidence that an
	// unexpected failure is a message's own (processOne, the re-driver).
	// The map is built in New, read-only after.
	commits map[string]*atomic.Int64

	// commitReq asks the committer for a commit of the stored offsets.
	commitReq chan struct{}

	schemaVersion string                 // Options.SchemaVersion
	redact        func(string) string    // Options.Redact (never nil after New)
	flushLog      func()                 // Options.FlushLog (never nil after New)
	gate          atomic.Pointer[string] // why the schema gate holds the consumer out of its group; nil: open
	joined        atomic.Bool            // the member got its first assignment (possibly empty)
	// cooperative: librdkafka's rebalance protocol is COOPERATIVE (the
	// cooperative-sticky assignor, or KIP-848's consumer protocol), so
	// assignments change incrementally. Set from the configuration before
	// the first Poll, then from what librdkafka reports on each assignment;
	// used by the poll goroutine only.
	cooperative bool
	// consumerProtocol: group.protocol=consumer (KIP-848).
	consumerProtocol bool
	// static: a static member (group.instance.id, KIP-345), which does
	// not leave its group at shutdown (leave).
	static bool
	// closing: the consumer is being closed; a rebalance Close serves
	// starts no worker and asks librdkafka nothing.
	closing atomic.Bool
	// leaving: the member is leaving its group before Close (leave); an
	// assignment served meanwhile starts no worker.
	leaving bool
	// awaitingAssign: the classic protocol owes this member an assignment
	// (it subscribed, or had partitions revoked, and has not been assigned
	// since): a join or sync is in flight.
	awaitingAssign bool
	// lastRebalance is when the rebalance callback last ran.
	//
	// leaving, awaitingAssign and lastRebalance are the rebalance
	// callback's: written by the goroutine that polls, and by Close's
	// after leave returned (it starts after, nothing reads them then).
	lastRebalance time.Time
	// assignErr is why the last assignment could not be taken (nil: it
	// was): /readyz names it.
	assignErr atomic.Pointer[string]
	httpAddr  atomic.Value
}

// New builds a runtime. client and db are the same database: db is used for
// set-based statements and health checks.
func New(cfg Config, svc Service, client *ent.Client, db *sql.DB, opts Options) (*Runtime, error) {
	if svc.Topic == "" || svc.Group == "" || svc.DLQTopic == "" || svc.InvalidCode.Name == "" || svc.Handlers == nil {
		return nil, errors.New("consumer: service needs Topic, Group, DLQTopic, an InvalidCode and Handlers")
	}
	if err := svc.Handlers.check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// A Config built in code may hold what ConfigFromEnv leaves out with a
	// warning: the classic protocol's settings under the consumer protocol.
	cfg.Kafka = maps.Clone(cfg.Kafka)
	ignored := kafkaenv.DropClassicOnly(cfg.Kafka)
	cfg.BatchSize = min(cfg.BatchSize, MaxBatchSize)
	if cfg.QueueSize < cfg.BatchSize {
		cfg.QueueSize = cfg.BatchSize
	}
	r := &Runtime{
		cfg: cfg, svc: svc, client: client, db: db,
		log:     opts.Logger.With().Str("service", svc.Name).Str("topic", svc.Topic).Logger(),
		reg:     opts.Registry,
		prop:    opts.Propagator,
		workers: map[int32]*worker{},

		schemaVersion: opts.SchemaVersion,
		redact:        opts.Redact,
		flushLog:      opts.FlushLog,
		routes:        svc.Routes(),
	}
	for _, w := range ignored {
		r.log.Warn().Msg(w)
	}
	r.commits = make(map[string]*atomic.Int64, len(r.routes))
	for _, rt := range r.routes {
		r.commits[rt.EventType] = new(atomic.Int64)
	}
	r.sched = newScheduler(cfg.Transactions, sharedLimit*cfg.BatchSize, cfg.TransactionBytes, 0) // lanes open for any run until followDistance
	if r.reg == nil {
		r.reg = prometheus.NewRegistry()
		r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	r.tracer = tp.Tracer("github.com/pin-platform/pin/consumers/consumer")
	_, r.tracingOff = tp.(noop.TracerProvider)
	r.span.name = "process " + svc.Topic
	r.span.kind = trace.WithSpanKind(trace.SpanKindConsumer)
	r.span.attrs = trace.WithAttributes(
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.destination.name", svc.Topic),
		attribute.String("messaging.consumer.group.name", svc.Group))
	if r.prop == nil {
		r.prop = propagation.TraceContext{}
	}
	if r.flushLog == nil {
		r.flushLog = func() {}
	}
	if r.redact == nil {
		r.redact = func(s string) string { return s }
	}
	var lag func(context.Context) (time.Time, bool, error)
	if src := svc.Metrics.LagSource; src != nil {
		lag = func(ctx context.Context) (time.Time, bool, error) { return src(ctx, client) }
	}
	r.m = newMetrics(r.reg, svc, lag, r.heldBytes)
	for _, g := range svc.Gauges {
		c, err := newGauge(r.reg, g)
		if err != nil {
			return nil, err
		}
		r.gauges = append(r.gauges, c)
	}
	return r, nil
}

// Registry is the Prometheus registry the runtime exports on /metrics.
func (r *Runtime) Registry() *prometheus.Registry { return r.reg }

// HTTPAddr is the address the HTTP endpoints listen on, once Run started
// them ("" before, or when Config.HTTPAddr is empty).
func (r *Runtime) HTTPAddr() string {
	s, _ := r.httpAddr.Load().(string)
	return s
}

func (r *Runtime) kafkaConfig(extra kafka.ConfigMap) kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range r.cfg.Kafka {
		cm[k] = v
	}
	for k, v := range extra {
		cm[k] = v
	}
	cm["bootstrap.servers"] = r.cfg.Brokers
	return cm
}

// consumerDefaults are the runtime's librdkafka settings where they differ
// from librdkafka's own; a KAFKA_* variable overrides each.
var consumerDefaults = kafka.ConfigMap{
	"auto.offset.reset":       "earliest",
	"enable.auto.commit":      true,
	"auto.commit.interval.ms": 1000,
	"statistics.interval.ms":  5000,
	"enable.partition.eof":    false,
	// librdkafka prefetches up to 64 MiB (its default) while the workers
	// are behind — C memory, outside the Go heap and GOMEMLIMIT. The
	// workers' own queues (CONSUMER_QUEUE_SIZE, two batches) hold the next
	// batches; 2 MiB is about a quarter of a second of prefetch at 10,000
	// events/s of 800 bytes, while a fetch from a broker takes
	// milliseconds.
	// bench: rewards at N = 1M peaked at 68.0 and 70.8 MiB RSS with 64 MiB,
	// 60.3 with 8 MiB, at the same rate; with the statement cache, 65.9–66.8
	// with 8 MiB and 60.0 with 4 MiB, at the same rate. With queues of two
	// batches (512), N = 100k: 61–65 MiB with 4 MiB, 60–62 with 2, the rates
	// within the spread.
	"queued.max.messages.kbytes": 2048,
	// Once the consumer's prefetch (one queue for all its partitions)
	// passes that bound, or queued.min.messages, librdkafka postpones the
	// next fetch by this long: 1 s by default, while the workers may drain
	// 2 MiB in a fraction of it and then wait on an empty queue. 10 ms
	// re-checks often enough that a consumer catching up never waits long
	// on its own prefetch, and a re-check that finds the queue still full
	// sends nothing.
	// bench (N = 30k–100k, alternating, the same hour): the broker-only
	// loop read 13–32k events/s with 1 s in 6 of 8 runs, 76–190k with 10
	// ms in all 8; the consumers' own rates moved within the spread.
	"fetch.queue.backoff.ms": 10,
}

// KafkaConsumerDefaults returns (a copy of) the runtime's librdkafka
// consumer settings where they differ from librdkafka's own, before the
// KAFKA_* overrides: for tools that must read as the consumers do (the
// benchmark's broker-only loop).
func KafkaConsumerDefaults() kafka.ConfigMap {
	return maps.Clone(consumerDefaults)
}

// consumerConfig is the consumer's librdkafka configuration: the KAFKA_*
// settings over consumerDefaults, and what the delivery guarantee rests on.
func (r *Runtime) consumerConfig() kafka.ConfigMap {
	cm := r.kafkaConfig(nil)
	for k, v := range consumerDefaults {
		if _, set := cm[k]; !set {
			cm[k] = v
		}
	}
	// Not overridable: the delivery guarantee rests on them.
	cm["group.id"] = r.svc.Group
	cm["enable.auto.offset.store"] = false
	cm["go.application.rebalance.enable"] = true
	return cm
}

// Run consumes until ctx is cancelled, then drains: in-flight work finishes
// within Config.DrainTimeout, offsets of what is committed in the database
// are committed to Kafka, and Run returns nil. It returns an error for a
// fatal Kafka error or a setup failure.
func (r *Runtime) Run(ctx context.Context) error {
	// The HTTP endpoints first: a taken HTTP_ADDR fails the start at once
	// (not after the broker's checks), /healthz and /metrics answer while
	// the broker and the database are checked, and /readyz says the
	// member is not in its group yet. They close last.
	if r.cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", r.cfg.HTTPAddr)
		if err != nil {
			return &ConfigError{Var: "HTTP_ADDR", Err: err}
		}
		r.httpAddr.Store(ln.Addr().String())
		srv := &http.Server{Handler: r.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() { defer close(served); _ = srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), httpShutdownBudget)
			defer cancel()
			_ = srv.Shutdown(sctx)
			<-served
		}()
	}
	// librdkafka checks a consumer's settings against each other only as
	// it creates one (max.poll.interval.ms under session.timeout.ms, …):
	// a client without bootstrap servers contacts no broker, so such a
	// refusal ends the start here, exit 2, before any broker is touched.
	if err := dryConsumer(r.consumerConfig()); err != nil {
		return r.kafkaConfigError(err)
	}
	// Brokers that refuse the credentials or the TLS handshake would
	// otherwise be retried in silence: one clear error, and the process
	// exits.
	if err := kafkaenv.Check(ctx, r.kafkaConfig(nil), 30*time.Second); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, kafkaenv.ErrConfig) {
			return r.kafkaConfigError(err)
		}
		return err
	}
	cm := r.consumerConfig()
	r.cooperative = cooperativeConfig(cm)
	r.consumerProtocol = kafkaenv.ConsumerProtocol(cm)
	r.static = staticMember(cm)
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return r.kafkaConfigError(err)
	}
	r.consumer = c
	closed := false
	defer func() {
		if !closed {
			r.closeConsumer()
		}
	}()

	// The committer commits stored offsets as they are stored, one commit
	// in flight at a time; it stops before the consumer is closed.
	r.commitReq = make(chan struct{}, 1)
	stopCommitter := r.startCommitter()
	defer stopCommitter()

	if r.dlq, err = newDLQProducer(r.kafkaConfig(nil), r.svc, r.log); err != nil {
		return r.kafkaConfigError(err)
	}
	r.dlq.missing = func(n int) { r.m.dlqMissing.Set(float64(n)) }
	defer r.dlq.close()

	if err := r.checkTopics(ctx); err != nil {
		return err
	}

	var bg sync.WaitGroup // the re-driver and the gauges, which end with ctx
	defer bg.Wait()
	// Nothing is consumed, and nothing parked re-driven, before the
	// database has the schema this binary was built for.
	if !r.awaitSchema(ctx) {
		return nil
	}
	r.followDistance(ctx)
	bg.Add(1)
	go func() { defer bg.Done(); r.redriveLoop(ctx) }()
	for _, g := range r.gauges {
		bg.Add(1)
		go func() { defer bg.Done(); r.runGauge(ctx, g) }()
	}

	if err := c.Subscribe(r.svc.Topic, r.rebalance); err != nil {
		return fmt.Errorf("subscribe %s: %w", r.svc.Topic, err)
	}
	r.awaitingAssign = true
	r.log.Info().Str("group", r.svc.Group).Msg("consumer started")

	runErr := r.pollLoop(ctx)

	// Drain: stop every worker (in-flight work finishes within the budget),
	// commit what they stored, then leave the group, then close.
	r.stopWorkers(r.assigned())
	stopCommitter()
	r.commit("shutdown")
	if !isFatal(runErr) && !r.static {
		r.leave(leaveBudget)
	}
	r.closeConsumer()
	closed = true
	r.log.Info().Msg("consumer stopped")
	return runErr
}

// Poll's timeout: idlePoll when no partition waits to be resumed,
// backPressurePoll while one is paused for a full queue. Poll returns
// early only for an event, and a partition paused for a full queue
// fetches nothing, so with every partition of a backlog paused the loop
// would sleep the whole idle timeout while the workers emptied their
// queues: the resume (at half) comes from this loop, and the message after
// it a fetch later. Measured (rewards under a backlog, queues of 512):
// the partitions were resumed with their queues empty, the workers waited
// for messages, and the consumer reached 65–68 % of its CPU ceiling;
// resumed within a millisecond of the half, the queue's other batch covers
// the fetch (0.2–18 ms).
const (
	idlePoll         = 100 // ms
	backPressurePoll = 1   // ms
)

// pollTimeout adjusts the pauses and returns the next Poll's timeout.
func (r *Runtime) pollTimeout() int {
	if r.adjustPauses() {
		return backPressurePoll
	}
	return idlePoll
}

func (r *Runtime) pollLoop(ctx context.Context) error {
	for ctx.Err() == nil {
		switch e := r.consumer.Poll(r.pollTimeout()).(type) {
		case *kafka.Message:
			r.dispatch(e)
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("kafka fatal error: %w", e)
			}
			r.log.Warn().Err(e).Str("kafka_code", e.Code().String()).Msg("kafka error")
		case *kafka.Stats:
			// Under KIP-848 a member the broker gives no partition gets
			// no assignment event at all, and librdkafka reports nothing
			// else about its membership (not its epoch): its link to the
			// group coordinator ("up") stands in. Such a member holds
			// nothing, so taking it for in while its heartbeats are
			// refused costs nothing; taking it for out would keep an
			// idle member unready for good.
			if r.m.stats(e.String()) == "up" && r.consumerProtocol {
				r.joined.Store(true)
			}
		}
	}
	return nil
}

// leave's bounds: leaveBudget in all, after the drain. A rebalance
// completes once every member has rejoined: within a heartbeat interval
// (3 s by default) plus the other members' drains of their revoked
// partitions, milliseconds unless a transaction is stuck (then up to
// their CONSUMER_DRAIN_TIMEOUT: past the budget the member closes
// anyway, as it did before leave). leaveQuiet: once nothing is assigned
// and no assignment is owed, how long to wait for a rebalance callback
// still on its way.
const (
	leaveBudget = 5 * time.Second
	leaveQuiet  = 100 * time.Millisecond
)

// A stop's other bounds, after the drain (CONSUMER_DRAIN_TIMEOUT):
// abandonGrace for abandoned work to roll back, closeGrace past a drain
// for the Kafka client's Close, dlqFlushBudget for dead letters still on
// their way, httpShutdownBudget for the endpoints, traceShutdownBudget
// for the spans not yet exported.
const (
	abandonGrace        = 5 * time.Second
	closeGrace          = 5 * time.Second
	dlqFlushBudget      = 5 * time.Second
	httpShutdownBudget  = 2 * time.Second
	traceShutdownBudget = 5 * time.Second
)

// ShutdownBound is the longest a consumer takes from SIGTERM to its exit
// with the given drain timeout, every step at its bound: the drain, the
// abandoned work's grace, leaving the group, closing the Kafka client,
// flushing the DLQ producer, closing the endpoints and the trace
// exporter (47 s at the default 10 s). One step has no bound of the
// runtime's own: the synchronous offset commit, which librdkafka bounds
// by socket.timeout.ms when the broker does not answer. A pod's
// terminationGracePeriodSeconds below it may be killed mid-stop, which
// loses nothing (the offsets not committed are read again and skipped by
// their marks) but leaves the group to notice the member gone.
func ShutdownBound(drain time.Duration) time.Duration {
	return drain + abandonGrace + leaveBudget + drain + closeGrace + dlqFlushBudget + httpShutdownBudget + traceShutdownBudget
}

// leave takes the member out of its group before Close, here on the poll
// goroutine: Unsubscribe, then Poll, which serves the rebalance that
// follows through r.rebalance (the revoke commits what was stored and
// gives the partitions back), until librdkafka holds no assignment and
// the member is out of its group, or until budget. librdkafka postpones
// an unsubscribe until a rebalance in flight completes, so a member
// stopped mid-rebalance (a rolling restart's everyday case) first gets
// the assignment the join was for: it takes none of it (no worker
// starts), and the revoke gives it back. Closed with that rebalance still
// in flight, the member neither left in time (the coordinator held the
// group's join for the others until the rebalance timeout, minutes:
// kfake showed it) nor always survived: librdkafka's termination can
// assert on an assignment still in progress and abort the process
// (librdkafka#4792, seen once in CI). Close then finds a member in no
// group. A message Poll returns meanwhile was fetched before the revoke
// and is dropped unprocessed: its offset is not stored, and the
// partition's next owner reads it.
//
// Out of the group, under the classic protocol: librdkafka holds no
// member id (groupMember). The callbacks alone cannot tell: a join in
// flight can end without one (its SyncGroup refused by a newer
// rebalance, the postponed unsubscribe then leaves with nothing
// assigned; seen in CI), and a member with nothing assigned rejoins a
// cooperative rebalance without one. Under KIP-848 the member is out once
// nothing is assigned and no callback has come for leaveQuiet. Should the
// member id be unreadable, an assignment the classic protocol still owes
// (awaitingAssign) stands in, as before.
//
// Not covered: a classic member stopped while its first JoinGroup (the
// one without a member id) is in flight. librdkafka applies the
// unsubscribe at once and drops the answer, so the member never learns
// its id and cannot send LeaveGroup; a coordinator that counts it as
// pending (Apache Kafka, KIP-394) may hold the others' join for up to
// session.timeout.ms. One round trip after a start: rare, and bounded.
func (r *Runtime) leave(budget time.Duration) {
	c := r.consumer
	r.leaving = true
	if err := c.Unsubscribe(); err != nil {
		r.log.Warn().Err(err).Msg("leaving the group before close: unsubscribe failed")
		return
	}
	since := time.Now()
	deadline := since.Add(budget)
	for time.Now().Before(deadline) {
		if e, ok := c.Poll(10).(kafka.Error); ok {
			r.log.Debug().Err(e).Msg("kafka error while leaving the group")
		}
		if r.lastRebalance.After(since) {
			since = r.lastRebalance
		}
		if time.Since(since) >= leaveQuiet && r.left() {
			r.log.Debug().Msg("left the group")
			return
		}
	}
	ps, _ := c.Assignment()
	ev := r.log.Warn().Dur("budget", budget).Str("assigned", fmtParts(ps))
	if !r.consumerProtocol {
		member, known := groupMember(c)
		ev = ev.Bool("group_member", member || !known).Bool("awaiting_assignment", r.awaitingAssign)
	}
	ev.Msg("the member could not leave its group within the budget (a rebalance still in flight): closing the consumer anyway")
}

// left reports, while leaving, that librdkafka holds no partition and the
// member is out of its group (leave).
func (r *Runtime) left() bool {
	if ps, err := r.consumer.Assignment(); err != nil || len(ps) > 0 {
		return false
	}
	if r.consumerProtocol {
		return true
	}
	if member, known := groupMember(r.consumer); known {
		return !member
	}
	return !r.awaitingAssign
}

// kafkaConfigError is a setting librdkafka refused, named by the KAFKA_*
// variables of the properties its error names (exit 2).
func (r *Runtime) kafkaConfigError(err error) *ConfigError {
	return &ConfigError{Var: kafkaenv.Variables(err, r.kafkaConfig(nil)), Err: err}
}

// dryConsumer creates and closes a consumer of cm without its bootstrap
// servers, and silent: it contacts no broker and logs nothing, and
// reports what librdkafka refuses in cm.
func dryConsumer(cm kafka.ConfigMap) error {
	dry := maps.Clone(cm)
	delete(dry, "bootstrap.servers")
	dry["log_level"] = 0
	c, err := kafka.NewConsumer(&dry)
	if err != nil {
		return err
	}
	return c.Close()
}

// isFatal reports a fatal Kafka error (pollLoop's): the client can no
// longer take part in its group, so there is nothing to leave.
func isFatal(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.IsFatal()
}

func (r *Runtime) closeConsumer() {
	r.closing.Store(true)
	done := make(chan struct{})
	go func() { _ = r.consumer.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.cfg.DrainTimeout + closeGrace):
		r.log.Warn().Msg("kafka consumer close timed out")
	}
}

// checkTopics verifies the source and DLQ topics exist (the consumers never
// create topics). A DLQ with fewer partitions than its source is reported
// (a warning, pin_consumer_dlq_partitions_missing), not refused: its dead
// letters of the partitions it lacks go to others (dlqProducer.partitionFor).
func (r *Runtime) checkTopics(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		src, errSrc := r.partitions(r.svc.Topic)
		dlq, errDLQ := r.partitions(r.svc.DLQTopic)
		err := errors.Join(errSrc, errDLQ)
		if err == nil {
			r.dlq.setPartitions(dlq, src)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		r.log.Warn().Err(err).Msg("waiting for topics")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}

func (r *Runtime) partitions(topic string) (int, error) {
	md, err := r.consumer.GetMetadata(&topic, false, 5000)
	if err != nil {
		return 0, fmt.Errorf("read metadata of %s: %w", topic, err)
	}
	t, ok := md.Topics[topic]
	if !ok || t.Error.Code() != kafka.ErrNoError || len(t.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s does not exist (the consumers never create topics)", topic)
	}
	return len(t.Partitions), nil
}

// cooperativeConfig reports whether a consumer configuration makes
// librdkafka's rebalance protocol cooperative: KIP-848's consumer group
// protocol always is (the broker assigns, incrementally), the classic one
// with a cooperative assignor.
func cooperativeConfig(cm kafka.ConfigMap) bool {
	strategy, _ := cm["partition.assignment.strategy"].(string)
	return kafkaenv.ConsumerProtocol(cm) || strings.Contains(strings.ToLower(strategy), "cooperative")
}

// staticMember reports a group.instance.id (KIP-345): the group keeps
// such a member's partitions across its restart, for session.timeout.ms,
// and librdkafka's Close does not leave. An unsubscribe would (it sends
// LeaveGroup unless the client is terminating), so a static member skips
// leave and closes as it did before leave: mid-rebalance that risks
// librdkafka#4792, the price of keeping the membership.
// The id may come typed, from a ConfigMap built in code.
func staticMember(cm kafka.ConfigMap) bool {
	id, ok := cm["group.instance.id"]
	return ok && id != nil && strings.TrimSpace(fmt.Sprint(id)) != ""
}

// rebalance runs inside Poll, on the poll goroutine.
func (r *Runtime) rebalance(c *kafka.Consumer, ev kafka.Event) error {
	r.lastRebalance = time.Now()
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		r.awaitingAssign = false
		if r.leaving && !r.closing.Load() {
			// The assignment of a join that was in flight when the member
			// began to leave: not worked on; the unsubscribe's revoke
			// gives it back. Taken as given under the cooperative
			// protocols (so that the revoke's incremental unassign finds
			// it), answered with an empty one under the eager protocol.
			// (Asked here, inside Poll, not Close.)
			r.log.Info().Str("assigned", fmtParts(e.Partitions)).Msg("partitions assigned while leaving the group: not worked on")
			if c.GetRebalanceProtocol() == "COOPERATIVE" {
				return c.IncrementalAssign(e.Partitions)
			}
			return c.Assign(nil)
		}
		if r.closing.Load() {
			// An assignment queued before the shutdown, served by Close:
			// answered with an empty one, as the protocol wants it, so
			// that no offset fetch is in progress when the group
			// terminates (librdkafka asserts on that, librdkafka#4027);
			// no worker (they are stopped), and librdkafka is not asked
			// its protocol, which can hang inside Close. The partitions
			// go to the other members as this one leaves.
			r.log.Info().Str("assigned", fmtParts(e.Partitions)).Msg("partitions assigned while closing: not taken")
			return r.assign(c, nil)
		}
		r.log.Info().Int("partitions", len(e.Partitions)).Str("assigned", fmtParts(e.Partitions)).Msg("partitions assigned")
		// What librdkafka reports decides how to take the assignment;
		// the configuration was the guess until now. (Asked here, inside
		// Poll, never in a revoke or while closing: inside Close asking
		// can hang, confluent-kafka-go#1016.)
		switch p := c.GetRebalanceProtocol(); p {
		case "COOPERATIVE", "EAGER":
			if coop := p == "COOPERATIVE"; coop != r.cooperative {
				r.log.Warn().Str("rebalance_protocol", p).Msg("librdkafka's rebalance protocol differs from what the configuration suggested: following librdkafka")
				r.cooperative = coop
			}
		}
		if err := r.assign(c, e.Partitions); err != nil {
			// Not taken: the member holds partitions it does not fetch
			// and no other member can have. Say so loudly and on /readyz.
			msg := fmt.Sprintf("the assignment of partitions %s could not be taken: %v", fmtParts(e.Partitions), err)
			r.assignErr.Store(&msg)
			r.log.Error().Err(err).Str("assigned", fmtParts(e.Partitions)).Bool("cooperative", r.cooperative).Msg("assignment failed")
			return err
		}
		r.assignErr.Store(nil)
		// librdkafka keeps an application pause across a rebalance that
		// gives the partition back: start every assigned partition afresh.
		if len(e.Partitions) > 0 {
			_ = c.Resume(e.Partitions)
		}
		for _, tp := range e.Partitions {
			r.dlq.sourcePartition(tp.Partition)
			r.startWorker(tp)
		}
		r.joined.Store(true)
	case kafka.RevokedPartitions:
		// A member that is not leaving rejoins after a revoke: the group
		// owes it the join's assignment.
		r.awaitingAssign = !r.leaving
		lost := c.AssignmentLost()
		r.log.Info().Int("partitions", len(e.Partitions)).Str("revoked", fmtParts(e.Partitions)).Bool("lost", lost).Msg("partitions revoked")
		var ps []int32
		for _, tp := range e.Partitions {
			ps = append(ps, tp.Partition)
		}
		r.stopWorkers(ps)
		if !lost {
			r.commit("revoke")
		}
		// A member left with no partition is between assignments (a
		// rebalance, or it lost its assignment and rejoins): not ready
		// until the group assigns it again, an empty assignment included.
		if len(r.assigned()) == 0 {
			r.joined.Store(false)
		}
		if r.cooperative {
			return c.IncrementalUnassign(e.Partitions)
		}
		return c.Unassign()
	}
	return nil
}

// assign takes an assignment the way the rebalance protocol wants it. An
// eager Assign that librdkafka refuses because the protocol is cooperative
// after all (a configuration the guess did not foresee) is retried
// incrementally, and the protocol remembered.
func (r *Runtime) assign(c *kafka.Consumer, ps []kafka.TopicPartition) error {
	if r.cooperative {
		return c.IncrementalAssign(ps)
	}
	err := c.Assign(ps)
	if err != nil && strings.Contains(err.Error(), "incremental_assign") {
		if ierr := c.IncrementalAssign(ps); ierr == nil {
			r.log.Warn().Msg("librdkafka's rebalance protocol is cooperative: assignments are taken incrementally from now on")
			r.cooperative = true
			return nil
		}
	}
	return err
}

func fmtParts(ps []kafka.TopicPartition) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(p.Partition)
	}
	return s
}

// startCommitter starts the goroutine that commits stored offsets soon
// after they are stored (ack asks through commitReq; requests made while a
// commit is in flight are served by one more commit). librdkafka's
// auto-commit stays on as a backstop. The returned function stops it and
// waits; it may be called more than once.
func (r *Runtime) startCommitter() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-r.commitReq:
				if err := r.commitOffsets("stored"); err != nil {
					// A rebalance in progress, a broker away: the
					// auto-commit and the commit on revoke cover it.
					r.log.Debug().Err(err).Msg("eager offset commit failed")
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// commit commits the stored offsets synchronously, on revoke and at
// shutdown (trigger).
func (r *Runtime) commit(trigger string) {
	if err := r.commitOffsets(trigger); err != nil {
		r.log.Warn().Err(err).Str("trigger", trigger).Msg("offset commit failed")
	}
}

// commitOffsets commits the stored offsets synchronously and counts it in
// pin_consumer_offset_commits_total. Nothing stored since the last commit
// is not an error.
func (r *Runtime) commitOffsets(trigger string) error {
	_, err := r.consumer.Commit()
	var ke kafka.Error
	switch {
	case err == nil:
		r.m.offsetCommits.WithLabelValues(trigger, "committed").Inc()
	case errors.As(err, &ke) && ke.Code() == kafka.ErrNoOffset:
		r.m.offsetCommits.WithLabelValues(trigger, "nothing").Inc()
		return nil
	default:
		r.m.offsetCommits.WithLabelValues(trigger, "failed").Inc()
	}
	return err
}

// heldBytes sums what the partitions' messages hold (worker.bytes).
func (r *Runtime) heldBytes() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, w := range r.workers {
		n += w.bytes.Load()
	}
	return float64(n)
}

func (r *Runtime) assigned() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := make([]int32, 0, len(r.workers))
	for p := range r.workers {
		ps = append(ps, p)
	}
	return ps
}
