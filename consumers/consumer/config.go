package consumer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/internal/kafkaenv"
)

// Config is a consumer process's configuration (docs/contract.md §2).
type Config struct {
	Brokers        string        // KAFKA_BOOTSTRAP_SERVERS
	DatabaseURL    string        // DATABASE_URL
	HTTPAddr       string        // HTTP_ADDR
	LogLevel       zerolog.Level // LOG_LEVEL
	RetryTimeScale float64       // RETRY_TIME_SCALE, > 0
	// Kafka holds every other KAFKA_<PROPERTY> as a librdkafka property
	// (package kafkaenv).
	Kafka kafka.ConfigMap

	BatchSize int // CONSUMER_BATCH_SIZE: messages of one partition per transaction (default 64)
	QueueSize int // CONSUMER_QUEUE_SIZE: messages buffered per partition before it is paused (default 256)
	// QueueBytes (CONSUMER_QUEUE_BYTES): what a partition's messages may
	// hold, queued or in a transaction, before it is paused (default
	// DefaultQueueBytes). TransactionBytes (CONSUMER_TRANSACTION_BYTES):
	// what one transaction's messages may hold (default
	// DefaultTransactionBytes). A larger message still goes, alone.
	QueueBytes       int64
	TransactionBytes int64
	DrainTimeout     time.Duration // CONSUMER_DRAIN_TIMEOUT: budget to finish in-flight work on revoke and shutdown (default 10s)
	StuckAfter       time.Duration // CONSUMER_STUCK_AFTER: /readyz fails when a partition with work made no progress for this long (default 2m)
	ParkedPoll       time.Duration // CONSUMER_PARKED_POLL: how often parked messages are looked for (default 1s, scaled)
	// MaxClockSkew (MAX_CLOCK_SKEW): a CreatedAt or payload time further
	// than this in the future makes the message invalid (default 24h).
	MaxClockSkew time.Duration
	// SchemaRecheck (CONSUMER_SCHEMA_RECHECK): how often the schema gate
	// reads the migration history again while the database is behind the
	// binary (default 5s).
	SchemaRecheck time.Duration
	DBMaxConns    int // DATABASE_MAX_CONNS (default 16)
	// StatementCache (DATABASE_STATEMENT_CACHE): statements each pool
	// connection keeps prepared (default DefaultStatementCache; 0: none).
	StatementCache int
	Pprof          bool // CONSUMER_PPROF: serve net/http/pprof under /debug/pprof/ on HTTP_ADDR (default false)
	// Transactions (CONSUMER_TRANSACTIONS) is how many transactions run at
	// once, each carrying the runs of every partition that became ready
	// while the one before it ran (scheduler.go; default
	// DefaultTransactions).
	Transactions int
	// Warnings are one line each about the environment: Kubernetes
	// service-link variables ignored, a renamed variable.
	Warnings []string
}

// MaxBatchSize bounds CONSUMER_BATCH_SIZE (New clamps a Config's too): a
// transaction carries at most MaxKeysPerTransaction messages, and so keys.
const MaxBatchSize = 1000

// MaxKeysPerTransaction is how many messages, and so rows of a table, one
// transaction can carry: a shared transaction takes up to sharedLimit
// batches. A service may write them with one unchunked statement of up
// to MaxParamsPerKey bind parameters per row (its IN lists, its CASE
// updates: id, then a WHEN/THEN pair per set column and per condition);
// bulk inserts go through Chunks.
const MaxKeysPerTransaction = sharedLimit * MaxBatchSize

// MaxParamsPerKey is the bound on an unchunked statement's parameters per
// row that MaxKeysPerTransaction keeps under MaxParams.
const MaxParamsPerKey = MaxParams / MaxKeysPerTransaction

// Raising MaxBatchSize or sharedLimit past what leaves the services' CASE
// updates (7 parameters a row at most) under MaxParams fails to compile.
const _ = uint(MaxParamsPerKey - 7)

// DefaultTransactions is CONSUMER_TRANSACTIONS's default: two
// transactions at a time, each carrying the batches of every partition
// ready meanwhile (bench/README.md: one cut PostgreSQL's CPU per event most
// but serialised the handlers' own CPU, which slowed messenger; two kept
// the rate and most of the saving).
const DefaultTransactions = 2

// DefaultQueueBytes and DefaultTransactionBytes bound the memory that
// messages hold (keys, values, headers) per partition and per transaction.
// At the events' usual size (about 1 KB) the message counts bind first
// (256 queued are ~256 KB); they matter for large records, which Kafka
// takes up to about 1 MiB each: 256 of those queued behind one that waits
// would be 256 MiB a partition.
const (
	DefaultQueueBytes       = 2 << 20
	DefaultTransactionBytes = 2 << 20
)

// ConfigError is a missing or invalid setting; the process exits 2.
type ConfigError struct {
	Var string
	Err error
}

// Error names the variable and the problem, never the value (a value may
// be a secret, or hold one).
func (e *ConfigError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigFromEnv reads the configuration from environ ("NAME=value" pairs, as
// os.Environ returns them). defaultHTTP is the service's HTTP_ADDR default.
func ConfigFromEnv(environ []string, defaultHTTP string) (Config, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	c := Config{
		HTTPAddr:       defaultHTTP,
		LogLevel:       zerolog.InfoLevel,
		RetryTimeScale: 1,
		Kafka:          kafka.ConfigMap{},
		BatchSize:      64,
		QueueSize:      256,
		DrainTimeout:   10 * time.Second,
		StuckAfter:     2 * time.Minute,
		ParkedPoll:     time.Second,
		SchemaRecheck:  5 * time.Second,
		MaxClockSkew:   24 * time.Hour,
		DBMaxConns:     16,
		StatementCache: DefaultStatementCache,

		QueueBytes:       DefaultQueueBytes,
		TransactionBytes: DefaultTransactionBytes,

		Transactions: DefaultTransactions,
	}
	var errs []error
	fail := func(name string, err error) { errs = append(errs, &ConfigError{Var: name, Err: err}) }

	kc := kafkaenv.FromEnv(environ)
	c.Kafka = kc.Props
	if w := kc.Warning(); w != "" {
		c.Warnings = append(c.Warnings, w)
	}
	if c.Brokers = kc.Brokers; c.Brokers == "" {
		fail("KAFKA_BOOTSTRAP_SERVERS", errors.New("required"))
	}
	if c.DatabaseURL = env["DATABASE_URL"]; c.DatabaseURL == "" {
		fail("DATABASE_URL", errors.New("required"))
	} else if _, err := pq.NewConfig(c.DatabaseURL); err != nil {
		// Never the value nor the parser's text: both may hold the password.
		fail("DATABASE_URL", errors.New("is neither a postgres:// URL nor a key=value string (in a URL, percent-encode the password's %, @, : and /: %25, %40, %3A, %2F)"))
	}
	if v, ok := env["HTTP_ADDR"]; ok && v != "" {
		c.HTTPAddr = v
	}
	if v := env["LOG_LEVEL"]; v != "" {
		l, err := zerolog.ParseLevel(strings.ToLower(v))
		if err != nil || l == zerolog.NoLevel {
			fail("LOG_LEVEL", errors.New("is not a level (trace, debug, info, warn, error)"))
		}
		c.LogLevel = l
	}
	if v := env["RETRY_TIME_SCALE"]; v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) {
			fail("RETRY_TIME_SCALE", errors.New("is not a number > 0"))
		}
		c.RetryTimeScale = f
	}
	wholeVar := func(name string, dst *int, least int) {
		if v := env[name]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < least {
				fail(name, fmt.Errorf("is not a whole number ≥ %d", least))
				return
			}
			*dst = n
		}
	}
	intVar := func(name string, dst *int) { wholeVar(name, dst, 1) }
	countVar := func(name string, dst *int) { wholeVar(name, dst, 0) } // 0: off
	durVar := func(name string, dst *time.Duration) {
		if v := env[name]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				fail(name, errors.New("is not a positive duration (e.g. 10s)"))
				return
			}
			*dst = d
		}
	}
	if v := env["CONSUMER_PPROF"]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fail("CONSUMER_PPROF", errors.New("is not a boolean (true, false)"))
		}
		c.Pprof = b
	}
	intVar("CONSUMER_BATCH_SIZE", &c.BatchSize)
	if c.BatchSize > MaxBatchSize {
		fail("CONSUMER_BATCH_SIZE", fmt.Errorf("is above %d", MaxBatchSize))
	}
	intVar("CONSUMER_QUEUE_SIZE", &c.QueueSize)
	intVar("DATABASE_MAX_CONNS", &c.DBMaxConns)
	bytesVar := func(name string, dst *int64) {
		if v := env[name]; v != "" {
			n, err := ParseBytes(v)
			if err != nil || n < 1 {
				fail(name, errors.New("is not a size in bytes ≥ 1 (e.g. 2097152, 2MiB, 512KiB)"))
				return
			}
			*dst = n
		}
	}
	bytesVar("CONSUMER_QUEUE_BYTES", &c.QueueBytes)
	bytesVar("CONSUMER_TRANSACTION_BYTES", &c.TransactionBytes)
	// The two knobs that CONSUMER_TRANSACTIONS replaced: the shared lanes
	// carry over, the cap on a partition's own transactions has no meaning
	// left (every transaction takes a lane).
	if v, ok := env["CONSUMER_SHARED_TRANSACTIONS"]; ok {
		if _, set := env["CONSUMER_TRANSACTIONS"]; set {
			c.Warnings = append(c.Warnings, "CONSUMER_SHARED_TRANSACTIONS is ignored: CONSUMER_TRANSACTIONS, which replaced it, is set")
		} else {
			if n, err := strconv.Atoi(v); err == nil && n >= 1 {
				c.Transactions = n
			}
			c.Warnings = append(c.Warnings, "CONSUMER_SHARED_TRANSACTIONS is now CONSUMER_TRANSACTIONS (taken as it when ≥ 1)")
		}
	}
	if _, ok := env["CONSUMER_MAX_TRANSACTIONS"]; ok {
		c.Warnings = append(c.Warnings, "CONSUMER_MAX_TRANSACTIONS is ignored: CONSUMER_TRANSACTIONS caps every transaction")
	}
	intVar("CONSUMER_TRANSACTIONS", &c.Transactions)
	countVar("DATABASE_STATEMENT_CACHE", &c.StatementCache)
	durVar("CONSUMER_DRAIN_TIMEOUT", &c.DrainTimeout)
	durVar("CONSUMER_STUCK_AFTER", &c.StuckAfter)
	durVar("CONSUMER_PARKED_POLL", &c.ParkedPoll)
	durVar("CONSUMER_SCHEMA_RECHECK", &c.SchemaRecheck)
	durVar("MAX_CLOCK_SKEW", &c.MaxClockSkew)

	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, nil
}

// ParseBytes reads a size: a whole number of bytes, or one with a binary
// unit (KiB, MiB, GiB; "2MiB").
func ParseBytes(v string) (int64, error) {
	v = strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > (1<<62)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// scale multiplies a retry delay by RETRY_TIME_SCALE.
func (c Config) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.RetryTimeScale)
}
