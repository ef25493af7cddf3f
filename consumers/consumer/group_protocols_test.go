package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// groupProtocols are the consumer group protocols an operator can choose
// through KAFKA_* (docs/contract.md §2): the classic protocol with an
// eager assignor (librdkafka's default, range and roundrobin), the
// classic protocol with the cooperative-sticky assignor, and KIP-848's
// consumer protocol, where the broker assigns and librdkafka's rebalance
// protocol is cooperative whatever partition.assignment.strategy says.
var groupProtocols = []struct {
	name  string
	kafka kafka.ConfigMap
}{
	{"classic-eager", kafka.ConfigMap{}},
	{"classic-cooperative-sticky", kafka.ConfigMap{"partition.assignment.strategy": "cooperative-sticky"}},
	{"consumer", kafka.ConfigMap{"group.protocol": "consumer"}},
}

// Under each protocol, a member joins a running one and the first leaves:
// every message has one effect and one mark, and both took part.
func TestEveryGroupProtocolConsumesThroughJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	for _, p := range groupProtocols {
		t.Run(p.name, func(t *testing.T) {
			onEachBroker(t, func(t *testing.T, e *env) {
				checkRebalanceWith(t, e, probeService(long...), probeService(long...), consumertest.Options{BatchSize: 4, Kafka: p.kafka})
			})
		})
	}
}

// Under each protocol, a group with more members than partitions: every
// member is ready once the group assigned it, the one left without a
// partition included; and a member whose partitions all go to others is
// ready again once the group assigned it its (empty) share.
func TestEveryGroupProtocolMakesEveryMemberReady(t *testing.T) {
	t.Parallel()
	for _, p := range groupProtocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, kafkatest.NewCluster)
			opts := consumertest.Options{Kafka: p.kafka}
			var members []*consumertest.Running
			for i := 0; i < 4; i++ { // the probe topic has 3 partitions
				members = append(members, e.start(probeService(long...), opts))
			}
			kafkatest.Eventually(t, 60*time.Second, allReady(members...), "every member to be ready")
			leadID := e.lead()
			for i := 0; i < 30; i++ {
				_, v := envelope(leadID, "")
				e.produce(int32(i%3), v)
			}
			e.waitCommitted(30)
			if got := e.events(leadID); got != 30 {
				t.Fatalf("lead_events = %d, want 30", got)
			}
			// Leave one at a time, each once the group settled after the
			// last: a member closed while the group still assigns hits a
			// librdkafka assertion now and then (librdkafka#4027), which
			// would take the whole test binary down.
			for i := len(members) - 1; i > 0; i-- {
				if err := members[i].Stop(); err != nil {
					t.Fatal(err)
				}
				kafkatest.Eventually(t, 60*time.Second, allReady(members[:i]...), "the others to be ready again")
			}
		})
	}
}

// A member that loses its assignment (the coordinator forgot it: its
// heartbeats answered UNKNOWN_MEMBER_ID) is out of the group until it
// rejoins: /readyz says so meanwhile, and is ready again once the group
// assigned it again.
func TestAMemberThatLostItsAssignmentIsNotReadyUntilItRejoins(t *testing.T) {
	t.Parallel()
	e := kfakeEnv(t)
	fc := e.cluster.Kfake()
	r := e.start(probeService(long...), consumertest.Options{})
	kafkatest.Eventually(t, 30*time.Second, ready(r), "the member to be ready")

	// While the coordinator refuses the member's rejoin, it has no
	// partition and is no member.
	rejoins := fc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: probeGroup, Err: kerr.CoordinatorLoadInProgress, Count: -1})
	forgot := fc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: probeGroup, Err: kerr.UnknownMemberID, Count: -1})
	waitHits(t, rejoins, 2)
	if err := r.Runtime.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "group") {
		t.Fatalf("Ready = %v while the member is out of its group, want an error naming the group", err)
	}
	forgot.Remove()
	rejoins.Remove()
	kafkatest.Eventually(t, 30*time.Second, ready(r), "the member to be ready again once it rejoined")
	leadID := e.lead()
	e.produceN(leadID, 10)
	e.waitCommitted(10)
}

// The classic protocol's settings left in the environment under KIP-848's
// consumer protocol (chosen in any case, as librdkafka matches it), which
// librdkafka refuses under it, are ignored with one warning line each: the
// consumer joins and consumes.
func TestTheConsumerProtocolIgnoresTheClassicProtocolsSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	environ := []string{"KAFKA_BOOTSTRAP_SERVERS=" + e.cluster.Bootstrap, "DATABASE_URL=" + e.url, "HTTP_ADDR=127.0.0.1:0",
		"KAFKA_GROUP_PROTOCOL=Consumer", "KAFKA_SESSION_TIMEOUT_MS=6000", "KAFKA_HEARTBEAT_INTERVAL_MS=500",
		"KAFKA_PARTITION_ASSIGNMENT_STRATEGY=cooperative-sticky"}
	m := startMain(t, environ, `"consumer started"`)
	leadID := e.lead()
	e.produceN(leadID, 10)
	e.waitCommitted(10)
	if code := m.stop(); code != consumer.ExitOK {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, consumer.ExitOK, m.stderr.String())
	}
	if got := e.events(leadID); got != 10 {
		t.Fatalf("lead_events = %d, want 10", got)
	}
	for _, want := range []string{
		"KAFKA_SESSION_TIMEOUT_MS is ignored under group.protocol=consumer: the broker's group.consumer.session.timeout.ms applies",
		"KAFKA_HEARTBEAT_INTERVAL_MS is ignored under group.protocol=consumer: the broker's group.consumer.heartbeat.interval.ms applies",
		"KAFKA_PARTITION_ASSIGNMENT_STRATEGY is ignored under group.protocol=consumer",
	} {
		if n := strings.Count(m.stderr.String(), want); n != 1 {
			t.Errorf("%d lines %q, want 1; stderr:\n%s", n, want, m.stderr.String())
		}
	}
}
