// Package consumertest runs a consumer.Service end to end in a test: a real
// runtime against an in-process broker (kafkatest: librdkafka's mock
// cluster or kfake) and a real PostgreSQL database.
package consumertest

import (
	"cmp"
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	_ "github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// Options tune Start. Zero values give a fast test configuration.
type Options struct {
	RetryTimeScale float64         // default 0.001: 1 s of backoff becomes 1 ms
	BatchSize      int             // 0: the default (consumer.DefaultConfig)
	QueueSize      int             // 0: the default
	Kafka          kafka.ConfigMap // extra librdkafka properties
	TracerProvider trace.TracerProvider
	HTTP           bool // serve /metrics, /healthz, /readyz on 127.0.0.1:0
	// StuckAfter is CONSUMER_STUCK_AFTER; 0: a minute.
	StuckAfter   time.Duration
	Logger       *zerolog.Logger
	Transactions int // CONSUMER_TRANSACTIONS; 0: the default
	// SchemaVersion is the schema gate's migration; "": the newest
	// embedded one (migrate.Latest), as the binaries run.
	SchemaVersion string
	// AsOwner runs a service that has a database role (pin_<name>) with
	// dbURL's own user instead of the service's login.
	AsOwner bool
	// SchemaRecheck is CONSUMER_SCHEMA_RECHECK; 0: 100 ms.
	SchemaRecheck time.Duration
	// NoStatementCache is DATABASE_STATEMENT_CACHE=0, as behind a
	// transaction-mode pooler (docs/operations.md).
	NoStatementCache bool
}

// Running is a runtime running in the background of a test.
type Running struct {
	Runtime  *consumer.Runtime
	Registry *prometheus.Registry
	cancel   context.CancelFunc
	done     chan error
	stopped  bool
}

// Start builds svc with a fresh Prometheus registry and runs it against the
// brokers and the database at dbURL until the test ends or Stop is called.
func Start(t testing.TB, brokers, dbURL string, build func(prometheus.Registerer) consumer.Service, o Options) *Running {
	t.Helper()
	if o.RetryTimeScale == 0 {
		o.RetryTimeScale = 0.001
	}
	if o.SchemaVersion == "" {
		v, err := migrate.Latest()
		if err != nil {
			t.Fatalf("consumertest: %v", err)
		}
		o.SchemaVersion = v
	}
	if o.SchemaRecheck == 0 {
		o.SchemaRecheck = 100 * time.Millisecond
	}
	km := kafka.ConfigMap{
		"session.timeout.ms":                 6000,
		"heartbeat.interval.ms":              500,
		"statistics.interval.ms":             1000,
		"topic.metadata.refresh.interval.ms": 1000,
	}
	if o.Kafka["group.protocol"] == "consumer" {
		// KIP-848: the broker owns the session and the heartbeats;
		// librdkafka refuses these two under the consumer protocol (the
		// runtime would leave them out, with a warning each).
		delete(km, "session.timeout.ms")
		delete(km, "heartbeat.interval.ms")
	}
	for k, v := range o.Kafka {
		km[k] = v
	}
	// The declared defaults (New takes a zero field as its default), with
	// a test's: faster, smaller.
	cfg := consumer.Config{
		Brokers:        brokers,
		DatabaseURL:    dbURL,
		LogLevel:       zerolog.DebugLevel,
		RetryTimeScale: o.RetryTimeScale,
		Kafka:          km,
		BatchSize:      o.BatchSize,
		QueueSize:      o.QueueSize,
		DrainTimeout:   5 * time.Second,
		StuckAfter:     cmp.Or(o.StuckAfter, time.Minute),
		SchemaRecheck:  o.SchemaRecheck,
		DBMaxConns:     8,
		Transactions:   o.Transactions,
	}
	if o.HTTP {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	reg := prometheus.NewRegistry()
	svc := build(reg)
	if !o.AsOwner && hasRole(t, dbURL, migrate.ServiceRole(svc.Name)) {
		dbURL = pgtest.ServiceURL(t, dbURL, svc.Name) // as in production: the service's own role
	}
	cache := consumer.DefaultConfig().StatementCache
	if o.NoStatementCache {
		cache = 0
	}
	db, err := consumer.OpenDB(dbURL, consumer.DBOptions{StatementCache: cache,
		Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"service": svc.Name}, reg)})
	if err != nil {
		t.Fatalf("consumertest: %v", err)
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	if testing.Verbose() {
		log = log.Level(zerolog.DebugLevel)
	}
	if o.Logger != nil {
		log = *o.Logger
	}
	rt, err := consumer.New(cfg, svc, client, db, consumer.Options{Logger: log, Registry: reg,
		TracerProvider: o.TracerProvider, SchemaVersion: o.SchemaVersion})
	if err != nil {
		t.Fatalf("consumertest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{Runtime: rt, Registry: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- rt.Run(ctx) }()
	t.Cleanup(func() {
		if !r.stopped {
			if err := r.Stop(); err != nil {
				t.Errorf("consumertest: runtime ended with %v", err)
			}
		}
		_ = db.Close()
	})
	return r
}

// Stop cancels the runtime (as SIGTERM does) and waits for Run to return.
func (r *Running) Stop() error {
	r.stopped = true
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(60 * time.Second):
		return context.DeadlineExceeded
	}
}

// Done is closed-over Run's result: it yields once Run returned by itself.
func (r *Running) Done() <-chan error { return r.done }

// Counter returns the value of a counter or gauge family in the registry,
// summed over the series whose labels include all of labels.
func (r *Running) Counter(name string, labels map[string]string) float64 {
	mfs, err := r.Registry.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// hasRole reports whether the server of dbURL has role (the migrations
// create one per service of the roster; a test's own service has none).
func hasRole(t testing.TB, dbURL, role string) bool {
	t.Helper()
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatalf("consumertest: %v", err)
	}
	defer db.Close()
	var ok bool
	if err := db.QueryRow(`SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, role).Scan(&ok); err != nil {
		t.Fatalf("consumertest: %v", err)
	}
	return ok
}
