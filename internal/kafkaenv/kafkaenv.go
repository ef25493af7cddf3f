// Package kafkaenv builds every Kafka client's configuration — the
// consumers', their DLQ producers', and each of pinctl's (dlq list and
// replay, group reset, dev, bench) — from one place: the KAFKA_*
// environment, so that TLS and SASL settings reach them all. It also
// checks a configuration against the brokers, turning a refused password or
// a failed TLS handshake into one clear error instead of a silent retry
// loop.
package kafkaenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Config is the Kafka part of an environment.
type Config struct {
	// Brokers is KAFKA_BOOTSTRAP_SERVERS.
	Brokers string
	// Props holds every other KAFKA_<PROPERTY> as a librdkafka property:
	// the name lower-cased with _ → . (KAFKA_SECURITY_PROTOCOL →
	// security.protocol); confluent-kafka-go's own go.* properties typed as
	// numbers or booleans.
	Props kafka.ConfigMap
	// Ignored are the variables Kubernetes service links inject for a
	// Service named kafka (KAFKA_PORT, KAFKA_SERVICE_HOST, …): not
	// librdkafka properties, left out.
	Ignored []string
}

// serviceLink matches the variables of a Kubernetes Service named "kafka"
// (enableServiceLinks): KAFKA_PORT, KAFKA_PORT_9092_TCP[_ADDR|_PORT|_PROTO],
// KAFKA_SERVICE_HOST, KAFKA_SERVICE_PORT[_<NAME>].
var serviceLink = regexp.MustCompile(`^KAFKA_(PORT(_.*)?|SERVICE_HOST|SERVICE_PORT(_.*)?)$`)

// FromEnv reads the KAFKA_* variables of environ ("NAME=value" pairs).
func FromEnv(environ []string) Config {
	c := Config{Props: kafka.ConfigMap{}}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		name, isKafka := strings.CutPrefix(k, "KAFKA_")
		switch {
		case !ok || !isKafka || name == "":
		case k == "KAFKA_BOOTSTRAP_SERVERS":
			c.Brokers = v
		case serviceLink.MatchString(k):
			c.Ignored = append(c.Ignored, k)
		default:
			prop := strings.ReplaceAll(strings.ToLower(name), "_", ".")
			c.Props[prop] = value(prop, v)
		}
	}
	slices.Sort(c.Ignored)
	return c
}

// Warning is the one line to log about the ignored variables ("" when none).
func (c Config) Warning() string {
	if len(c.Ignored) == 0 {
		return ""
	}
	return fmt.Sprintf("ignoring %s: Kubernetes service-link variables of a Service named kafka, not librdkafka properties (set enableServiceLinks: false on the pod)",
		strings.Join(c.Ignored, ", "))
}

// Map returns a new configuration of the properties, bootstrap.servers
// (brokers, or c.Brokers when brokers is empty) and extra, which wins.
func (c Config) Map(brokers string, extra kafka.ConfigMap) kafka.ConfigMap {
	cm := maps.Clone(c.Props)
	if cm == nil {
		cm = kafka.ConfigMap{}
	}
	if brokers == "" {
		brokers = c.Brokers
	}
	cm["bootstrap.servers"] = brokers
	maps.Copy(cm, extra)
	return cm
}

// Variable is the KAFKA_* variable of a librdkafka property
// (session.timeout.ms → KAFKA_SESSION_TIMEOUT_MS).
func Variable(prop string) string {
	return "KAFKA_" + strings.ToUpper(strings.ReplaceAll(prop, ".", "_"))
}

// ConsumerProtocol reports group.protocol=consumer (KIP-848), the value
// matched as librdkafka matches it: spaces around it trimmed,
// case-insensitively.
func ConsumerProtocol(cm kafka.ConfigMap) bool {
	protocol, _ := cm["group.protocol"].(string)
	return strings.EqualFold(strings.TrimSpace(protocol), "consumer")
}

// classicOnly are the consumer properties librdkafka (2.11,
// rd_kafka_conf_finalize) refuses under group.protocol=consumer when they
// are set at all, even to their defaults, each with what applies instead.
var classicOnly = []struct{ prop, instead string }{
	{"group.protocol.type", "it is the classic protocol's"},
	{"heartbeat.interval.ms", "the broker's group.consumer.heartbeat.interval.ms applies"},
	{"partition.assignment.strategy", "the broker assigns the partitions (KAFKA_GROUP_REMOTE_ASSIGNOR names its assignor)"},
	{"session.timeout.ms", "the broker's group.consumer.session.timeout.ms applies"},
}

// DropClassicOnly deletes from cm, when it chooses group.protocol=consumer,
// the classic protocol's properties, which librdkafka refuses under it (a
// consumer would not start). It returns one line for each it deleted,
// naming its variable and why it is ignored.
func DropClassicOnly(cm kafka.ConfigMap) []string {
	if !ConsumerProtocol(cm) {
		return nil
	}
	var ignored []string
	for _, c := range classicOnly {
		if _, set := cm[c.prop]; set {
			delete(cm, c.prop)
			ignored = append(ignored, fmt.Sprintf("%s is ignored under group.protocol=consumer: %s", Variable(c.prop), c.instead))
		}
	}
	return ignored
}

// quoted matches a property a librdkafka configuration error names:
// "session.timeout.ms" or `session.timeout.ms`.
var quoted = regexp.MustCompile("[\"`]([a-z0-9_.]+)[\"`]")

// Variables names the variables behind a configuration librdkafka refuses
// (err): those of the properties err names that set (a configuration
// built from the environment) holds, joined by ", "; "KAFKA_*" when it
// names none of them.
func Variables(err error, set kafka.ConfigMap) string {
	var vars []string
	for _, m := range quoted.FindAllStringSubmatch(err.Error(), -1) {
		if _, ok := set[m[1]]; ok && !slices.Contains(vars, Variable(m[1])) {
			vars = append(vars, Variable(m[1]))
		}
	}
	if len(vars) == 0 {
		return "KAFKA_*"
	}
	return strings.Join(vars, ", ")
}

// value types a KAFKA_* value: librdkafka takes every property as a string,
// but confluent-kafka-go's own go.* properties must be ints or bools.
func value(prop, v string) kafka.ConfigValue {
	if !strings.HasPrefix(prop, "go.") {
		return v
	}
	if n, err := strconv.Atoi(v); err == nil {
		return n
	}
	if v == "true" || v == "false" {
		return v == "true"
	}
	return v
}

// ErrConfig is a configuration librdkafka refuses (an unknown property, a
// value it cannot take).
var ErrConfig = errors.New("librdkafka refuses the configuration")

// ErrRefused is a connection the brokers refused: wrong credentials, or a
// failed TLS handshake. Retrying cannot fix it.
var ErrRefused = errors.New("kafka refused the connection")

// Check connects with cm (a producer's view of it: consumer-only
// properties are fine) and waits up to timeout for the brokers' metadata. A
// refused SASL authentication or TLS handshake ends it at once with an
// ErrRefused error that says which settings to check; brokers that do not
// answer give an error naming KAFKA_BOOTSTRAP_SERVERS. The errors never
// hold a secret: librdkafka's texts name the broker and the mechanism, not
// the password.
func Check(ctx context.Context, cm kafka.ConfigMap, timeout time.Duration) error {
	pc := maps.Clone(cm)
	pc["go.logs.channel.enable"] = true // librdkafka's own lines stay out of the caller's stderr
	p, err := kafka.NewProducer(&pc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	defer p.Close()
	go func() {
		for range p.Logs() {
		}
	}()
	refused := make(chan error, 1)
	go func() {
		for ev := range p.Events() {
			if ke, ok := ev.(kafka.Error); ok {
				if err := refusal(ke); err != nil {
					select {
					case refused <- err:
					default:
					}
				}
			}
		}
	}()
	deadline := time.Now().Add(timeout)
	for {
		_, err := p.GetMetadata(nil, false, 1000)
		if err == nil {
			return nil
		}
		select {
		case err := <-refused:
			return err
		default:
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("kafka: no answer from KAFKA_BOOTSTRAP_SERVERS %v within %s: %v", cm["bootstrap.servers"], timeout, err)
		}
	}
}

// refusal is the clear error of a refused connection, or nil.
func refusal(e kafka.Error) error {
	msg := e.Error()
	switch {
	case e.Code() == kafka.ErrAuthentication || strings.Contains(msg, "SASL authentication error") || strings.Contains(msg, "SASL handshake failed"):
		return fmt.Errorf("%w: SASL authentication failed (%s): check KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD", ErrRefused, msg)
	case e.Code() == kafka.ErrSsl || strings.Contains(msg, "SSL handshake failed"):
		return fmt.Errorf("%w: TLS handshake failed (%s): check KAFKA_SECURITY_PROTOCOL and KAFKA_SSL_*", ErrRefused, msg)
	}
	return nil
}
