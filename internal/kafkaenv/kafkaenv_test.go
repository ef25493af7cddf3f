package kafkaenv

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// classic holds every property librdkafka refuses under
// group.protocol=consumer, and one it takes under both protocols.
func classic() kafka.ConfigMap {
	return kafka.ConfigMap{
		"session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
		"partition.assignment.strategy": "cooperative-sticky", "group.protocol.type": "consumer",
		"max.poll.interval.ms": "300000",
	}
}

// Under group.protocol=consumer, in any case, the classic protocol's
// properties are left out with a line each naming the variable; under the
// classic protocol, named or not, nothing is.
func TestDropClassicOnly(t *testing.T) {
	for _, protocol := range []string{"consumer", "Consumer", "CONSUMER", " consumer"} { // librdkafka trims an enum's spaces
		cm := classic()
		cm["group.protocol"] = protocol
		got := DropClassicOnly(cm)
		want := []string{
			"KAFKA_GROUP_PROTOCOL_TYPE is ignored under group.protocol=consumer: it is the classic protocol's",
			"KAFKA_HEARTBEAT_INTERVAL_MS is ignored under group.protocol=consumer: the broker's group.consumer.heartbeat.interval.ms applies",
			"KAFKA_PARTITION_ASSIGNMENT_STRATEGY is ignored under group.protocol=consumer: the broker assigns the partitions (KAFKA_GROUP_REMOTE_ASSIGNOR names its assignor)",
			"KAFKA_SESSION_TIMEOUT_MS is ignored under group.protocol=consumer: the broker's group.consumer.session.timeout.ms applies",
		}
		if !slices.Equal(got, want) {
			t.Errorf("group.protocol=%s: %q, want %q", protocol, got, want)
		}
		if wantCM := (kafka.ConfigMap{"group.protocol": protocol, "max.poll.interval.ms": "300000"}); !reflect.DeepEqual(cm, wantCM) {
			t.Errorf("group.protocol=%s: %v left, want %v", protocol, cm, wantCM)
		}
		// librdkafka refuses the whole and takes what is left.
		full := classic()
		full["group.protocol"], full["group.id"] = protocol, "g"
		if c, err := kafka.NewConsumer(&full); err == nil {
			c.Close()
			t.Errorf("librdkafka takes %v: is its refusal gone?", full)
		}
		cm["group.id"] = "g"
		c, err := kafka.NewConsumer(&cm)
		if err != nil {
			t.Fatalf("librdkafka refuses %v: %v", cm, err)
		}
		c.Close()
	}
	for _, protocol := range []string{"", "classic"} {
		cm := classic()
		if protocol != "" {
			cm["group.protocol"] = protocol
		}
		before := maps.Clone(cm)
		if got := DropClassicOnly(cm); got != nil || !reflect.DeepEqual(cm, before) {
			t.Errorf("group.protocol=%q: %q, %v left; want nothing left out", protocol, got, cm)
		}
	}
	if got := DropClassicOnly(nil); got != nil {
		t.Errorf("nil: %q", got)
	}
}

// A configuration librdkafka refuses names the variables of the
// properties its error names that the environment set, or KAFKA_* when it
// names none.
func TestVariables(t *testing.T) {
	refused := func(cm kafka.ConfigMap) error {
		t.Helper()
		c, err := kafka.NewConsumer(&cm)
		if err == nil {
			c.Close()
			t.Fatalf("librdkafka takes %v", cm)
		}
		return err
	}
	for _, tc := range []struct {
		env  kafka.ConfigMap
		want string
	}{
		{kafka.ConfigMap{"session.timeout.ms": "soon"}, "KAFKA_SESSION_TIMEOUT_MS"},
		{kafka.ConfigMap{"session.timeout.ms": "0"}, "KAFKA_SESSION_TIMEOUT_MS"},
		{kafka.ConfigMap{"no.such.property": "1"}, "KAFKA_NO_SUCH_PROPERTY"},
		{kafka.ConfigMap{"group.protocol": "consumer", "heartbeat.interval.ms": "500"}, "KAFKA_HEARTBEAT_INTERVAL_MS"},
		{kafka.ConfigMap{"max.poll.interval.ms": "1000", "session.timeout.ms": "6000"}, "KAFKA_MAX_POLL_INTERVAL_MS, KAFKA_SESSION_TIMEOUT_MS"},
		{kafka.ConfigMap{"max.poll.interval.ms": "1000"}, "KAFKA_MAX_POLL_INTERVAL_MS"},         // session.timeout.ms is librdkafka's
		{kafka.ConfigMap{"security.protocol": "session.timeout.ms"}, "KAFKA_SECURITY_PROTOCOL"}, // a value is no property
	} {
		cm := maps.Clone(tc.env)
		cm["group.id"] = "g"
		err := refused(cm)
		if got := Variables(err, tc.env); got != tc.want {
			t.Errorf("%v (%v): %q, want %q", tc.env, err, got, tc.want)
		}
	}
	// librdkafka's own, not set by the environment: no variable to name.
	err := refused(kafka.ConfigMap{"group.id": "g", "session.timeout.ms": "6000", "max.poll.interval.ms": "1000"})
	if got := Variables(err, kafka.ConfigMap{}); got != "KAFKA_*" {
		t.Errorf("nothing set: %q, want KAFKA_*", got)
	}
}
