package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/lib/pq" // database/sql driver "postgres"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/internal/secret"
	"github.com/pin-platform/pin/migrate/migrations"
)

// Exit codes of a consumer process.
const (
	ExitOK     = 0
	ExitFailed = 1
	ExitConfig = 2 // missing or invalid configuration
)

// Log timestamps to the nanosecond (the bench and the tests order outcome
// lines by them). zerolog's format is a package variable: set once, before
// any goroutine logs, not in Main, which tests run beside other loggers.
func init() { zerolog.TimeFieldFormat = time.RFC3339Nano }

// Main runs a consumer process: configuration from environ (exit 2 with the
// variable's name when it is missing or invalid, before touching Kafka),
// the database, tracing, then the runtime until ctx ends. build makes the
// service and registers its own metrics on reg. It returns the exit code.
func Main(ctx context.Context, environ []string, stderr io.Writer, defaultHTTP string,
	build func(reg prometheus.Registerer) Service) int {
	// Whatever the process prints goes through the redactor of its
	// secrets (the database password, the KAFKA_* secrets): the last guard
	// behind messages that never name a value.
	red := secret.FromEnv(environ)
	stderr = red.Writer(stderr)
	cfg, err := ConfigFromEnv(environ, defaultHTTP)
	if err != nil {
		fmt.Fprintf(stderr, "configuration: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return ExitConfig
	}
	// Info lines go out in batches, warnings and errors at once
	// (loglines.go); whatever Main prints itself from here on goes the
	// same way, in order, and all is written when Main returns.
	lines := newLineBatcher(stderr, logFlushDelay)
	defer lines.Flush()
	stderr = lines
	log := zerolog.New(lines).Level(cfg.LogLevel).With().Timestamp().Logger()
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}
	if tuneGC(ctx, environ) {
		log.Debug().Int("GOGC", gcPercent).Int64("heap_floor_bytes", GCHeapFloor).Int64("memory_limit_ceiling_bytes", gcTuner.ceiling()).Msg("gc defaults: GOGC is not set")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc := build(reg)
	if err := GaugeIntervalsFromEnv(environ, &svc); err != nil {
		fmt.Fprintf(stderr, "configuration: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return ExitConfig
	}
	slog := log.With().Str("service", svc.Name).Logger() // New adds service to the runtime's own

	tp, shutdownTracing, err := setupTracing(ctx, environ, svc.Name)
	if err != nil {
		slog.Error().Err(err).Msg("tracing setup failed")
		return ExitConfig
	}
	defer shutdownTracing()

	db, err := OpenDB(cfg.DatabaseURL, DBOptions{StatementCache: cfg.StatementCache,
		Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"service": svc.Name}, reg), Logger: &slog})
	if err != nil { // not its text: the parser's may hold the password
		fmt.Fprintln(stderr, "configuration: DATABASE_URL: lib/pq refuses it")
		return ExitConfig
	}
	defer db.Close()
	db.SetMaxOpenConns(cfg.DBMaxConns)
	db.SetMaxIdleConns(cfg.DBMaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))

	schema, err := migrations.Latest()
	if err != nil { // a build without its migrations: not the operator's to fix
		slog.Error().Err(err).Msg("setup failed")
		return ExitFailed
	}
	rt, err := New(cfg, svc, client, db, Options{Logger: log, Registry: reg, SchemaVersion: schema, Redact: red.Redact, TracerProvider: tp, FlushLog: lines.Flush})
	if err != nil {
		slog.Error().Err(err).Msg("setup failed")
		return ExitFailed
	}
	if err := rt.Run(ctx); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) { // one line: librdkafka ends some of its errors with a newline
			fmt.Fprintf(stderr, "configuration: %s\n", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
			return ExitConfig
		}
		slog.Error().Err(err).Msg("consumer failed")
		return ExitFailed
	}
	return ExitOK
}

// setupTracing installs the W3C propagator and, when the standard OTEL_*
// variables ask for it (OTEL_TRACES_EXPORTER=otlp, or an
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT), an OTLP/HTTP exporter configured by
// those same variables. Without them no span leaves the process.
func setupTracing(ctx context.Context, environ []string, service string) (trace.TracerProvider, func(), error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	exp := strings.ToLower(env["OTEL_TRACES_EXPORTER"])
	if exp == "none" || (exp != "otlp" && env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "" && env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "") {
		// Off: spans that allocate nothing of their own (the global
		// provider's stand-ins allocate three per message).
		return noop.NewTracerProvider(), func() {}, nil
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_*: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter)}
	if env["OTEL_SERVICE_NAME"] == "" {
		res, err := resource.Merge(resource.Default(),
			resource.NewSchemaless(attribute.String("service.name", service+"-consumers")))
		if err == nil {
			opts = append(opts, sdktrace.WithResource(res))
		}
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), traceShutdownBudget)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}
