package consumer

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/kafkatest"
)

// groupMember reads librdkafka's member id out of its serialized group
// metadata (membership.go): this pins the layout against the librdkafka
// linked in. A classic member is out before it joins, in once its join
// is answered, out again once its unsubscribe has given back what it
// held; under both assignors and on both brokers. Should the layout
// change, the first check fails here rather than leave guessing.
func TestGroupMemberFollowsTheClassicJoinAndLeave(t *testing.T) {
	t.Parallel()
	blank, err := kafka.NewTestConsumerGroupMetadata("g")
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := cgmdMemberID(blank); !ok || id != "" {
		t.Fatalf("a new group's metadata: member id %q, readable %v; want \"\", true", id, ok)
	}
	for _, strategy := range []string{"range", "cooperative-sticky"} {
		t.Run(strategy, func(t *testing.T) {
			kafkatest.EachBroker(t, func(t *testing.T, b kafkatest.Broker) {
				t.Parallel()
				const topic = "test.membership.v1"
				cluster := b.New(t, map[string]int{topic: 2})
				cm := cluster.Config(kafka.ConfigMap{
					"group.id": "test-membership", "partition.assignment.strategy": strategy,
					"enable.auto.commit": false, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
				})
				c, err := kafka.NewConsumer(&cm)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = c.Close() }()
				in := func(want bool, what string) {
					t.Helper()
					member, known := groupMember(c)
					if !known {
						t.Fatalf("%s: the member id is unreadable", what)
					}
					if member != want {
						t.Fatalf("%s: group member %v, want %v", what, member, want)
					}
				}
				in(false, "before the subscribe")
				if err := c.Subscribe(topic, nil); err != nil {
					t.Fatal(err)
				}
				assigned := func() bool {
					c.Poll(50)
					ps, err := c.Assignment()
					return err == nil && len(ps) == 2
				}
				kafkatest.Eventually(t, 30*time.Second, assigned, "the assignment")
				in(true, "assigned")
				if err := c.Unsubscribe(); err != nil {
					t.Fatal(err)
				}
				out := func() bool {
					c.Poll(50)
					member, known := groupMember(c)
					return known && !member
				}
				kafkatest.Eventually(t, 30*time.Second, out, "the member to leave its group after the unsubscribe")
				if ps, err := c.Assignment(); err != nil || len(ps) != 0 {
					t.Fatalf("out of the group with %v assigned (%v)", ps, err)
				}
			})
		})
	}
}

// A group.instance.id makes a static member, a blank one not, whatever
// its type (KAFKA_GROUP_INSTANCE_ID arrives as a string; a ConfigMap
// built in code may hold a number).
func TestStaticMemberReadsAnyInstanceID(t *testing.T) {
	for _, c := range []struct {
		cm   kafka.ConfigMap
		want bool
	}{
		{kafka.ConfigMap{}, false},
		{kafka.ConfigMap{"group.instance.id": ""}, false},
		{kafka.ConfigMap{"group.instance.id": " "}, false},
		{kafka.ConfigMap{"group.instance.id": "rewards-consumers-0"}, true},
		{kafka.ConfigMap{"group.instance.id": 3}, true},
	} {
		if got := staticMember(c.cm); got != c.want {
			t.Errorf("staticMember(%v) = %v, want %v", c.cm, got, c.want)
		}
	}
}
