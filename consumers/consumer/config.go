package consumer

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/internal/kafkaenv"
)

// Config is a consumer process's configuration (docs/contract.md §2),
// declared: each field's env tag names its variable, default is its value
// when unset or empty, required and min/max bound it (ConfigFromEnv;
// ConfigVars lists them). Durations must be > 0 and RETRY_TIME_SCALE a
// number > 0 and ≤ MaxRetryTimeScale; an int64 is a size in bytes
// (ParseBytes), ≥ 1; an int is a whole number ≥ min (default 1).
type Config struct {
	Brokers        string        `env:"KAFKA_BOOTSTRAP_SERVERS" required:"true" help:"broker list"`
	DatabaseURL    string        `env:"DATABASE_URL" required:"true" help:"PostgreSQL URL or key=value string"`
	HTTPAddr       string        `env:"HTTP_ADDR" help:"/metrics, /healthz, /readyz (default: the service's)"`
	LogLevel       zerolog.Level `env:"LOG_LEVEL" default:"info" help:"trace … error"`
	RetryTimeScale float64       `env:"RETRY_TIME_SCALE" default:"1" help:"multiplies every retry delay (> 0, ≤ 1000)"`
	// Kafka holds every other KAFKA_<PROPERTY> as a librdkafka property
	// (package kafkaenv).
	Kafka kafka.ConfigMap

	BatchSize int `env:"CONSUMER_BATCH_SIZE" default:"256" help:"messages of one partition per transaction, ≤ MaxBatchSize"`
	// QueueSize: at least two batches (DESIGN.md, "Back-pressure"): the
	// queue holds the next batch while one is in a transaction, and the
	// partition, paused when the queue is full, resumes at half.
	QueueSize int `env:"CONSUMER_QUEUE_SIZE" default:"512" help:"messages buffered per partition before it is paused"`
	// QueueBytes: what a partition's messages may hold, queued or in a
	// transaction, before it is paused (DefaultQueueBytes).
	// TransactionBytes: what one transaction's messages may hold
	// (DefaultTransactionBytes). A larger message still goes, alone.
	QueueBytes       int64         `env:"CONSUMER_QUEUE_BYTES" default:"2MiB" help:"bytes of messages per partition"`
	TransactionBytes int64         `env:"CONSUMER_TRANSACTION_BYTES" default:"2MiB" help:"bytes of messages per transaction"`
	DrainTimeout     time.Duration `env:"CONSUMER_DRAIN_TIMEOUT" default:"10s" help:"budget to finish in-flight work on revoke and shutdown"`
	StuckAfter       time.Duration `env:"CONSUMER_STUCK_AFTER" default:"2m" help:"/readyz fails when a partition with work made no progress for this long"`
	ParkedPoll       time.Duration `env:"CONSUMER_PARKED_POLL" default:"1s" help:"how often parked messages are looked for (scaled)"`
	// MaxClockSkew: a CreatedAt or payload time further than this in the
	// future makes the message invalid.
	MaxClockSkew time.Duration `env:"MAX_CLOCK_SKEW" default:"24h" help:"a time further ahead makes a message invalid"`
	// SchemaRecheck: how often the schema gate reads the migration history
	// again while the database is behind the binary.
	SchemaRecheck time.Duration `env:"CONSUMER_SCHEMA_RECHECK" default:"5s" help:"how often the schema gate looks again"`
	DBMaxConns    int           `env:"DATABASE_MAX_CONNS" default:"16" help:"connection pool size"`
	// StatementCache: statements each pool connection keeps prepared
	// (DefaultStatementCache; 0: none).
	StatementCache int  `env:"DATABASE_STATEMENT_CACHE" default:"512" min:"0" help:"statements kept prepared per connection (0: off)"`
	Pprof          bool `env:"CONSUMER_PPROF" default:"false" help:"serve net/http/pprof under /debug/pprof/ on HTTP_ADDR"`
	// Transactions is how many transactions run at once, each carrying the
	// runs of every partition that became ready while the one before it
	// ran (scheduler.go; DefaultTransactions).
	Transactions int `env:"CONSUMER_TRANSACTIONS" default:"2" help:"transactions running at once"`
	// FollowDistance: neither CONSUMER_TRANSACTIONS nor CONSUMER_BATCH_SIZE
	// is set, so both defaults follow how far PostgreSQL is (distance.go).
	// ConfigFromEnv sets it; a Config built by hand keeps its numbers.
	FollowDistance bool
	// Warnings are one line each about the environment: Kubernetes
	// service-link variables ignored, the classic protocol's settings
	// ignored under the consumer protocol, a renamed variable.
	Warnings []string
}

// MaxBatchSize bounds CONSUMER_BATCH_SIZE (New clamps a Config's too): a
// shared transaction carries up to sharedLimit batches, each a run of
// statements over its messages' rows (setsql.go: one array parameter per
// column, so no bound of the protocol's comes near).
const MaxBatchSize = 1000

// DefaultTransactions is CONSUMER_TRANSACTIONS's default: two
// transactions at a time, each carrying the batches of every partition
// ready meanwhile (bench/README.md: one cut PostgreSQL's CPU per event most
// but serialised the handlers' own CPU, which slowed messenger; two kept
// the rate and most of the saving).
const DefaultTransactions = 2

// DefaultQueueBytes and DefaultTransactionBytes bound the memory that
// messages hold (keys, values, headers) per partition and per transaction.
// At the events' usual size (about 1 KB) the message counts bind first
// (512 queued are ~512 KB); they matter for large records, which Kafka
// takes up to about 1 MiB each: 512 of those queued behind one that waits
// would be 512 MiB a partition.
const (
	DefaultQueueBytes       = 2 << 20
	DefaultTransactionBytes = 2 << 20
)

// MaxRetryTimeScale bounds RETRY_TIME_SCALE. The scale shrinks the delays
// (0.001 in tests and drills) or stretches them; a thousandfold already
// takes the longest retry-later step (crm's 16 min) to 11 days and the
// world's 60 s backoff to 17 hours. ConfigFromEnv refuses a larger one
// (exit 2) rather than clamp what an operator wrote: +Inf or 1e300 would
// overflow a time.Duration (292 years) into a negative delay, a retry
// without any wait. New clamps a Config built by hand to it.
const MaxRetryTimeScale = 1000

// ConfigError is a missing or invalid setting; the process exits 2.
type ConfigError struct {
	Var string
	Err error
}

// Error names the variable and the problem, never the value (a value may
// be a secret, or hold one).
func (e *ConfigError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigVar is a declared variable of Config: its name, its default as
// written in the environment ("" when the service gives it, "required"
// when it has none) and what it is.
type ConfigVar struct{ Name, Default, Help string }

// configField is a Config field's declaration.
type configField struct {
	ConfigVar
	index    int
	required bool
	min      int64 // of an int, a duration, a size
}

// configFields reads Config's tags once.
var configFields = sync.OnceValue(func() []configField {
	var fs []configField
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		sf := t.Field(i)
		name, ok := sf.Tag.Lookup("env")
		if !ok {
			continue
		}
		f := configField{ConfigVar: ConfigVar{Name: name, Default: sf.Tag.Get("default"), Help: sf.Tag.Get("help")},
			index: i, required: sf.Tag.Get("required") == "true", min: 1}
		if f.required {
			f.Default = "required"
		}
		if v, ok := sf.Tag.Lookup("min"); ok {
			f.min, _ = strconv.ParseInt(v, 10, 64)
		}
		fs = append(fs, f)
	}
	return fs
})

// ConfigVars lists Config's variables, in its order.
func ConfigVars() []ConfigVar {
	var vs []ConfigVar
	for _, f := range configFields() {
		vs = append(vs, f.ConfigVar)
	}
	return vs
}

// DefaultConfig is the configuration of an empty environment, less the
// required variables, HTTPAddr and Kafka.
func DefaultConfig() Config { return defaultConfig() }

var defaultConfig = sync.OnceValue(func() Config {
	var c Config
	for _, f := range configFields() {
		if f.Default != "" && !f.required {
			if err := f.set(&c, f.Default); err != nil {
				panic("consumer: Config's default of " + f.Name + ": " + err.Error())
			}
		}
	}
	return c
})

// set parses v into f's field of c; the error never holds v.
func (f configField) set(c *Config, v string) error {
	dst := reflect.ValueOf(c).Elem().Field(f.index)
	switch dst.Addr().Interface().(type) {
	case *string:
		dst.SetString(v)
	case *bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("is not a boolean (true, false)")
		}
		dst.SetBool(b)
	case *float64: // RETRY_TIME_SCALE, the one
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0 && x <= MaxRetryTimeScale) { // also NaN and ±Inf
			return fmt.Errorf("is not a number > 0 and ≤ %d", MaxRetryTimeScale)
		}
		dst.SetFloat(x)
	case *zerolog.Level:
		l, err := zerolog.ParseLevel(strings.ToLower(v))
		if err != nil || l == zerolog.NoLevel {
			return errors.New("is not a level (trace, debug, info, warn, error)")
		}
		dst.Set(reflect.ValueOf(l))
	case *time.Duration:
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("is not a positive duration (e.g. 10s)")
		}
		dst.SetInt(int64(d))
	case *int64:
		n, err := ParseBytes(v)
		if err != nil || n < 1 {
			return errors.New("is not a size in bytes ≥ 1 (e.g. 2097152, 2MiB, 512KiB)")
		}
		dst.SetInt(n)
	case *int:
		n, err := strconv.Atoi(v)
		if err != nil || int64(n) < f.min {
			return fmt.Errorf("is not a whole number ≥ %d", f.min)
		}
		dst.SetInt(int64(n))
	default:
		panic("consumer: Config has a field of a type it cannot read: " + f.Name)
	}
	return nil
}

// withDefaults returns c with each number below its bound (a zero
// Config's) at its default, and a RetryTimeScale above MaxRetryTimeScale
// (+Inf) at it: New runs a Config built without ConfigFromEnv.
func (c Config) withDefaults() Config {
	cv, dv := reflect.ValueOf(&c).Elem(), reflect.ValueOf(defaultConfig())
	for _, f := range configFields() {
		switch v := cv.Field(f.index); v.Kind() {
		case reflect.Int, reflect.Int64:
			if v.Int() < f.min {
				v.Set(dv.Field(f.index))
			}
		case reflect.Float64:
			switch x := v.Float(); {
			case !(x > 0): // also NaN
				v.Set(dv.Field(f.index))
			case x > MaxRetryTimeScale:
				v.SetFloat(MaxRetryTimeScale)
			}
		}
	}
	return c
}

// ConfigFromEnv reads the configuration from environ ("NAME=value" pairs, as
// os.Environ returns them). defaultHTTP is the service's HTTP_ADDR default.
func ConfigFromEnv(environ []string, defaultHTTP string) (Config, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	c := defaultConfig()
	c.HTTPAddr = defaultHTTP
	var errs []error
	fail := func(name string, err error) { errs = append(errs, &ConfigError{Var: name, Err: err}) }

	kc := kafkaenv.FromEnv(environ)
	c.Kafka = kc.Props
	if w := kc.Warning(); w != "" {
		c.Warnings = append(c.Warnings, w)
	}
	// Under KIP-848's protocol librdkafka refuses the classic one's
	// settings: left out, so that switching protocols needs no other change.
	c.Warnings = append(c.Warnings, kafkaenv.DropClassicOnly(c.Kafka)...)
	env["KAFKA_BOOTSTRAP_SERVERS"] = kc.Brokers
	// The two knobs that CONSUMER_TRANSACTIONS replaced: the shared lanes
	// carry over, the cap on a partition's own transactions has no meaning
	// left (every transaction takes a lane).
	legacyLanes := false
	if v, ok := env["CONSUMER_SHARED_TRANSACTIONS"]; ok {
		if _, set := env["CONSUMER_TRANSACTIONS"]; set {
			c.Warnings = append(c.Warnings, "CONSUMER_SHARED_TRANSACTIONS is ignored: CONSUMER_TRANSACTIONS, which replaced it, is set")
		} else {
			if n, err := strconv.Atoi(v); err == nil && n >= 1 {
				c.Transactions, legacyLanes = n, true
			}
			c.Warnings = append(c.Warnings, "CONSUMER_SHARED_TRANSACTIONS is now CONSUMER_TRANSACTIONS (taken as it when ≥ 1)")
		}
	}
	if _, ok := env["CONSUMER_MAX_TRANSACTIONS"]; ok {
		c.Warnings = append(c.Warnings, "CONSUMER_MAX_TRANSACTIONS is ignored: CONSUMER_TRANSACTIONS caps every transaction")
	}
	for _, f := range configFields() {
		switch v := env[f.Name]; {
		case v == "" && f.required:
			fail(f.Name, errors.New("required"))
		case v != "":
			if err := f.set(&c, v); err != nil {
				fail(f.Name, err)
			}
		}
	}
	c.FollowDistance = env["CONSUMER_TRANSACTIONS"] == "" && env["CONSUMER_BATCH_SIZE"] == "" && !legacyLanes
	if c.BatchSize > MaxBatchSize {
		fail("CONSUMER_BATCH_SIZE", fmt.Errorf("is above %d", MaxBatchSize))
	}
	if c.QueueSize > 0 && c.QueueSize < 2*c.BatchSize {
		c.Warnings = append(c.Warnings, fmt.Sprintf("CONSUMER_QUEUE_SIZE %d is under twice CONSUMER_BATCH_SIZE %d: under a backlog a partition then pauses, and is fetched again, on every batch", c.QueueSize, c.BatchSize))
	}
	if _, err := pq.NewConfig(c.DatabaseURL); c.DatabaseURL != "" && err != nil {
		// Never the value nor the parser's text: both may hold the password.
		fail("DATABASE_URL", errors.New("is neither a postgres:// URL nor a key=value string (in a URL, percent-encode the password's %, @, : and /: %25, %40, %3A, %2F)"))
	}
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

// scale multiplies a retry delay by RETRY_TIME_SCALE. A product beyond a
// time.Duration (a long CONSUMER_PARKED_POLL at a large scale) is the
// longest Duration, never the negative one a conversion would give.
func (c Config) scale(d time.Duration) time.Duration {
	x := float64(d) * c.RetryTimeScale
	if x >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(x)
}
