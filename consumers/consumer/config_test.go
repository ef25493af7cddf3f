package consumer

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"
)

func TestConfigFromEnv(t *testing.T) {
	base := []string{"KAFKA_BOOTSTRAP_SERVERS=b:9092", "DATABASE_URL=postgres://db"}
	t.Run("defaults", func(t *testing.T) {
		c, err := ConfigFromEnv(base, ":9091")
		if err != nil {
			t.Fatal(err)
		}
		if c.HTTPAddr != ":9091" || c.RetryTimeScale != 1 || c.LogLevel.String() != "info" || c.BatchSize != 256 || c.QueueSize != 512 {
			t.Fatalf("defaults: %+v", c)
		}
		if len(c.Warnings) != 0 {
			t.Fatalf("defaults warn: %q", c.Warnings)
		}
	})
	t.Run("the lanes follow the database's distance unless chosen", func(t *testing.T) {
		c, err := ConfigFromEnv(base, "")
		if err != nil || !c.FollowDistance {
			t.Fatalf("neither knob set: FollowDistance %v, %v", c.FollowDistance, err)
		}
		for _, kv := range []string{"CONSUMER_TRANSACTIONS=2", "CONSUMER_BATCH_SIZE=256", "CONSUMER_SHARED_TRANSACTIONS=2"} {
			if c, err := ConfigFromEnv(append(base, kv), ""); err != nil || c.FollowDistance {
				t.Errorf("%s: FollowDistance %v, %v; want the operator's choice kept", kv, c.FollowDistance, err)
			}
		}
		// Empty is unset; an old variable that is not taken chooses nothing.
		for _, kv := range []string{"CONSUMER_TRANSACTIONS=", "CONSUMER_SHARED_TRANSACTIONS=0"} {
			if c, err := ConfigFromEnv(append(base, kv), ""); err != nil || !c.FollowDistance {
				t.Errorf("%s: FollowDistance %v, %v; want the distance followed", kv, c.FollowDistance, err)
			}
		}
	})
	t.Run("a queue of less than two batches warns", func(t *testing.T) {
		c, err := ConfigFromEnv(append(base, "CONSUMER_QUEUE_SIZE=256"), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "CONSUMER_QUEUE_SIZE 256 is under twice CONSUMER_BATCH_SIZE 256") {
			t.Fatalf("warnings: %q", c.Warnings)
		}
	})
	t.Run("kafka properties pass through", func(t *testing.T) {
		c, err := ConfigFromEnv(append(base, "KAFKA_SESSION_TIMEOUT_MS=6000", "KAFKA_SECURITY_PROTOCOL=SSL", "KAFKA_SASL_MECHANISMS=PLAIN"), "")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"session.timeout.ms": "6000", "security.protocol": "SSL", "sasl.mechanisms": "PLAIN"}
		for k, v := range want {
			if c.Kafka[k] != v {
				t.Errorf("%s = %v, want %s", k, c.Kafka[k], v)
			}
		}
		if _, ok := c.Kafka["bootstrap.servers"]; ok {
			t.Error("bootstrap.servers belongs to Brokers")
		}
	})
	t.Run("the classic protocol's settings are ignored under the consumer protocol", func(t *testing.T) {
		classic := []string{"KAFKA_SESSION_TIMEOUT_MS=6000", "KAFKA_HEARTBEAT_INTERVAL_MS=500",
			"KAFKA_PARTITION_ASSIGNMENT_STRATEGY=cooperative-sticky", "KAFKA_GROUP_PROTOCOL_TYPE=consumer", "KAFKA_MAX_POLL_INTERVAL_MS=300000"}
		c, err := ConfigFromEnv(append(append(base, classic...), "KAFKA_GROUP_PROTOCOL=CONSUMER"), "")
		if err != nil {
			t.Fatal(err)
		}
		if want := (kafka.ConfigMap{"group.protocol": "CONSUMER", "max.poll.interval.ms": "300000"}); !reflect.DeepEqual(c.Kafka, want) {
			t.Errorf("Kafka = %v, want %v", c.Kafka, want)
		}
		var ignored []string
		for _, w := range c.Warnings {
			if v, ok := strings.CutSuffix(strings.SplitN(w, ":", 2)[0], " is ignored under group.protocol=consumer"); ok {
				ignored = append(ignored, v)
			}
		}
		if want := []string{"KAFKA_GROUP_PROTOCOL_TYPE", "KAFKA_HEARTBEAT_INTERVAL_MS", "KAFKA_PARTITION_ASSIGNMENT_STRATEGY", "KAFKA_SESSION_TIMEOUT_MS"}; !reflect.DeepEqual(ignored, want) || len(c.Warnings) != len(want) {
			t.Errorf("warnings %q, want one each for %q", c.Warnings, want)
		}
		for _, protocol := range []string{"", "KAFKA_GROUP_PROTOCOL=classic"} {
			c, err := ConfigFromEnv(append(append(base, classic...), protocol), "")
			if err != nil || len(c.Kafka) != len(classic)+min(len(protocol), 1) || len(c.Warnings) != 0 {
				t.Errorf("%q: Kafka %v, warnings %q, %v; want every setting kept, no warning", protocol, c.Kafka, c.Warnings, err)
			}
		}
	})
	t.Run("pprof", func(t *testing.T) {
		c, err := ConfigFromEnv(append(base, "CONSUMER_PPROF=true"), "")
		if err != nil || !c.Pprof {
			t.Fatalf("CONSUMER_PPROF=true: %v, %v", c.Pprof, err)
		}
		if _, err := ConfigFromEnv(append(base, "CONSUMER_PPROF=maybe"), ""); err == nil || !strings.Contains(err.Error(), "CONSUMER_PPROF") {
			t.Fatalf("CONSUMER_PPROF=maybe: %v, want an error naming it", err)
		}
	})
	t.Run("byte budgets", func(t *testing.T) {
		c, err := ConfigFromEnv(base, "")
		if err != nil || c.QueueBytes != DefaultQueueBytes || c.TransactionBytes != DefaultTransactionBytes {
			t.Fatalf("defaults %d/%d, %v", c.QueueBytes, c.TransactionBytes, err)
		}
		c, err = ConfigFromEnv(append(base, "CONSUMER_QUEUE_BYTES=8MiB", "CONSUMER_TRANSACTION_BYTES=524288"), "")
		if err != nil || c.QueueBytes != 8<<20 || c.TransactionBytes != 512<<10 {
			t.Fatalf("8MiB / 524288: %d/%d, %v", c.QueueBytes, c.TransactionBytes, err)
		}
		for _, v := range []string{"0", "-1", "2MB", "lots", "99999999999GiB"} {
			if _, err := ConfigFromEnv(append(base, "CONSUMER_QUEUE_BYTES="+v), ""); err == nil || !strings.Contains(err.Error(), "CONSUMER_QUEUE_BYTES") || (len(v) > 3 && strings.Contains(err.Error(), v)) {
				t.Fatalf("CONSUMER_QUEUE_BYTES=%s: %v, want an error naming the variable, not the value", v, err)
			}
		}
	})
	t.Run("statement cache", func(t *testing.T) {
		c, err := ConfigFromEnv(base, "")
		if err != nil || c.StatementCache != DefaultStatementCache {
			t.Fatalf("default %d, %v: want %d", c.StatementCache, err, DefaultStatementCache)
		}
		if c, err = ConfigFromEnv(append(base, "DATABASE_STATEMENT_CACHE=0"), ""); err != nil || c.StatementCache != 0 {
			t.Fatalf("DATABASE_STATEMENT_CACHE=0: %d, %v", c.StatementCache, err)
		}
		if _, err := ConfigFromEnv(append(base, "DATABASE_STATEMENT_CACHE=-1"), ""); err == nil || !strings.Contains(err.Error(), "DATABASE_STATEMENT_CACHE") {
			t.Fatalf("DATABASE_STATEMENT_CACHE=-1: %v, want an error naming it", err)
		}
	})
	t.Run("transactions: the one knob, the two it replaced", func(t *testing.T) {
		c, err := ConfigFromEnv(base, "")
		if err != nil || c.Transactions != DefaultTransactions || len(c.Warnings) != 0 {
			t.Fatalf("default %d %v, %v: want %d and no warning", c.Transactions, c.Warnings, err, DefaultTransactions)
		}
		if c, err = ConfigFromEnv(append(base, "CONSUMER_TRANSACTIONS=3"), ""); err != nil || c.Transactions != 3 {
			t.Fatalf("CONSUMER_TRANSACTIONS=3: %d, %v", c.Transactions, err)
		}
		if _, err = ConfigFromEnv(append(base, "CONSUMER_TRANSACTIONS=0"), ""); err == nil || !strings.Contains(err.Error(), "CONSUMER_TRANSACTIONS") {
			t.Fatalf("CONSUMER_TRANSACTIONS=0: %v, want an error naming it", err)
		}
		c, err = ConfigFromEnv(append(base, "CONSUMER_SHARED_TRANSACTIONS=4", "CONSUMER_MAX_TRANSACTIONS=2"), "")
		if err != nil || c.Transactions != 4 || len(c.Warnings) != 2 {
			t.Fatalf("the old knobs: %d %v, %v; want 4 (the shared lanes carried over) and a warning each", c.Transactions, c.Warnings, err)
		}
		if c, _ = ConfigFromEnv(append(base, "CONSUMER_SHARED_TRANSACTIONS=0"), ""); c.Transactions != DefaultTransactions {
			t.Fatalf("CONSUMER_SHARED_TRANSACTIONS=0 (sharing off, gone): %d, want the default %d", c.Transactions, DefaultTransactions)
		}
		c, _ = ConfigFromEnv(append(base, "CONSUMER_SHARED_TRANSACTIONS=4", "CONSUMER_TRANSACTIONS=3"), "")
		if c.Transactions != 3 || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "ignored") {
			t.Fatalf("both: %d %v; want CONSUMER_TRANSACTIONS's 3 and a warning that the old one is ignored", c.Transactions, c.Warnings)
		}
	})
	t.Run("confluent-kafka-go's go.* properties are typed", func(t *testing.T) {
		c, err := ConfigFromEnv(append(base, "KAFKA_GO_EVENTS_CHANNEL_SIZE=100", "KAFKA_GO_LOGS_CHANNEL_ENABLE=false", "KAFKA_SASL_USERNAME=12345"), "")
		if err != nil {
			t.Fatal(err)
		}
		if v := c.Kafka["go.events.channel.size"]; v != 100 {
			t.Errorf("go.events.channel.size = %#v, want int 100", v)
		}
		if v := c.Kafka["go.logs.channel.enable"]; v != false {
			t.Errorf("go.logs.channel.enable = %#v, want bool false", v)
		}
		if v := c.Kafka["sasl.username"]; v != "12345" {
			t.Errorf("sasl.username = %#v, want the string", v)
		}
	})
	t.Run("scale and overrides", func(t *testing.T) {
		c, err := ConfigFromEnv(append(base, "RETRY_TIME_SCALE=0.001", "HTTP_ADDR=:1", "LOG_LEVEL=DEBUG", "CONSUMER_DRAIN_TIMEOUT=3s"), ":9")
		if err != nil {
			t.Fatal(err)
		}
		if c.scale(30*time.Second) != 30*time.Millisecond || c.HTTPAddr != ":1" || c.LogLevel.String() != "debug" || c.DrainTimeout != 3*time.Second {
			t.Fatalf("%+v", c)
		}
	})
	bad := map[string]struct {
		env  []string
		name string
	}{
		"brokers":    {[]string{"DATABASE_URL=x"}, "KAFKA_BOOTSTRAP_SERVERS"},
		"database":   {[]string{"KAFKA_BOOTSTRAP_SERVERS=x"}, "DATABASE_URL"},
		"scale ≤ 0":  {append(base, "RETRY_TIME_SCALE=-1"), "RETRY_TIME_SCALE"},
		"scale text": {append(base, "RETRY_TIME_SCALE=x"), "RETRY_TIME_SCALE"},
		// Not finite, or beyond MaxRetryTimeScale: a scaled delay would
		// overflow a time.Duration into a negative one (no wait at all).
		"scale +Inf":        {append(base, "RETRY_TIME_SCALE=+Inf"), "RETRY_TIME_SCALE"},
		"scale inf":         {append(base, "RETRY_TIME_SCALE=inf"), "RETRY_TIME_SCALE"},
		"scale Infinity":    {append(base, "RETRY_TIME_SCALE=Infinity"), "RETRY_TIME_SCALE"},
		"scale -Inf":        {append(base, "RETRY_TIME_SCALE=-Inf"), "RETRY_TIME_SCALE"},
		"scale NaN":         {append(base, "RETRY_TIME_SCALE=NaN"), "RETRY_TIME_SCALE"},
		"scale 1e400":       {append(base, "RETRY_TIME_SCALE=1e400"), "RETRY_TIME_SCALE"},
		"scale 1e300":       {append(base, "RETRY_TIME_SCALE=1e300"), "RETRY_TIME_SCALE"},
		"scale above bound": {append(base, "RETRY_TIME_SCALE=1000.5"), "RETRY_TIME_SCALE"},
		"level":             {append(base, "LOG_LEVEL=chatty"), "LOG_LEVEL"},
		"batch":             {append(base, "CONSUMER_BATCH_SIZE=0"), "CONSUMER_BATCH_SIZE"},
		"tx 0":              {append(base, "CONSUMER_TRANSACTIONS=0"), "CONSUMER_TRANSACTIONS"},
		"tx < 0":            {append(base, "CONSUMER_TRANSACTIONS=-1"), "CONSUMER_TRANSACTIONS"},
		"tx text":           {append(base, "CONSUMER_TRANSACTIONS=many"), "CONSUMER_TRANSACTIONS"},
	}
	for name, c := range bad {
		t.Run("invalid "+name, func(t *testing.T) {
			_, err := ConfigFromEnv(c.env, "")
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Var != c.name {
				t.Fatalf("err = %v, want a ConfigError naming %s", err, c.name)
			}
			if c.name == "RETRY_TIME_SCALE" && (strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "RETRY_TIME_SCALE: ")) {
				t.Fatalf("err = %q, want one line naming RETRY_TIME_SCALE", err)
			}
		})
	}
	t.Run("scale bound", func(t *testing.T) {
		_, err := ConfigFromEnv(append(base, "RETRY_TIME_SCALE=+Inf"), "")
		if want := "RETRY_TIME_SCALE: is not a number > 0 and ≤ 1000"; err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %q (the bound named)", err, want)
		}
		c, err := ConfigFromEnv(append(base, "RETRY_TIME_SCALE=1000"), "")
		if err != nil || c.scale(time.Minute) != 1000*time.Minute {
			t.Fatalf("RETRY_TIME_SCALE=1000 (the bound): %v, scales 1m to %v", err, c.scale(time.Minute))
		}
	})
}

// A Config built by hand: New clamps a RetryTimeScale above the bound (+Inf
// included) to it and takes NaN as the default; a product beyond a
// time.Duration is the longest one, never a negative delay.
func TestRetryTimeScaleNeverMakesANegativeDelay(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{math.Inf(1), MaxRetryTimeScale}, {1e300, MaxRetryTimeScale}, {math.NaN(), 1}, {0.5, 0.5}} {
		if got := (Config{RetryTimeScale: c.in}).withDefaults().RetryTimeScale; got != c.want {
			t.Errorf("RetryTimeScale %v: runs with %v, want %v", c.in, got, c.want)
		}
	}
	c := Config{RetryTimeScale: MaxRetryTimeScale}
	for _, d := range []time.Duration{math.MaxInt64 / 10, math.MaxInt64} {
		if got := c.scale(d); got != math.MaxInt64 {
			t.Errorf("scale(%v) at %v = %v, want the longest Duration", d, c.RetryTimeScale, got)
		}
	}
	if got := c.scale(16 * time.Minute); got != 16000*time.Minute {
		t.Errorf("scale(16m) = %v", got)
	}
}

func TestConfigIsDeclared(t *testing.T) {
	base := []string{"KAFKA_BOOTSTRAP_SERVERS=b:9092", "DATABASE_URL=postgres://db"}
	vars := ConfigVars()
	byName := map[string]ConfigVar{}
	for _, v := range vars {
		byName[v.Name] = v
	}
	if len(byName) != len(vars) || byName["DATABASE_URL"].Default != "required" || byName["CONSUMER_STUCK_AFTER"].Default != "2m" ||
		byName["CONSUMER_QUEUE_BYTES"].Default != "2MiB" || byName["HTTP_ADDR"].Default != "" || byName["LOG_LEVEL"].Help == "" {
		t.Fatalf("ConfigVars: %+v", vars)
	}
	t.Run("each default, set, is the default", func(t *testing.T) {
		want, err := ConfigFromEnv(base, ":1")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vars {
			if v.Default == "" || v.Default == "required" {
				continue
			}
			got, err := ConfigFromEnv(append(base, v.Name+"="+v.Default), ":1")
			if v.Name == "CONSUMER_TRANSACTIONS" || v.Name == "CONSUMER_BATCH_SIZE" {
				// Set, even to its default, the knob is chosen: the
				// distance no longer moves it (TestConfigFromEnv).
				got.FollowDistance = want.FollowDistance
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s=%s: %+v, %v; want the unset configuration %+v", v.Name, v.Default, got, err, want)
			}
		}
	})
	t.Run("a bad value is named, never echoed", func(t *testing.T) {
		const bad = "s3cr3t:value"
		for _, v := range vars {
			if v.Name == "KAFKA_BOOTSTRAP_SERVERS" || v.Name == "HTTP_ADDR" {
				continue // any text
			}
			_, err := ConfigFromEnv(append(base, v.Name+"="+bad), "")
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Var != v.Name || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("%s=%s: %v, want a ConfigError naming the variable, not the value", v.Name, bad, err)
			}
		}
	})
	t.Run("New takes a zero field as its default", func(t *testing.T) {
		svc := Service{Name: "x", Topic: "t", Group: "g", DLQTopic: "d", InvalidCode: Code{Name: "X_INVALID", Class: Invalid},
			Handlers: nothingTo("e", "x:")}
		r, err := New(Config{StatementCache: 0}, svc, nil, nil, Options{Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		want := DefaultConfig()
		want.StatementCache = 0 // 0 is a setting: off
		want.LogLevel = r.cfg.LogLevel
		want.Kafka = r.cfg.Kafka
		if !reflect.DeepEqual(r.cfg, want) {
			t.Fatalf("New(Config{}) runs %+v, want the declared defaults %+v", r.cfg, want)
		}
	})
}
