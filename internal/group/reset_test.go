package group

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/group/grouptest"
	"github.com/pin-platform/pin/internal/kafkaenv"
)

func TestReset(t *testing.T) {
	t.Parallel()

	t.Run("a dry run commits nothing", func(t *testing.T) {
		t.Parallel()
		kc := grouptest.NewTopic(t, kafkatest.NewCluster, 2)
		var out bytes.Buffer
		if _, err := Reset(context.Background(), ResetOptions{Brokers: kc.Bootstrap, Group: grouptest.Group, Topic: grouptest.Topic, DryRun: true}, &out); err != nil {
			t.Fatalf("dry run: %v\n%s", err, out.String())
		}
		grouptest.WantCommitted(t, kc, 2)
	})

	t.Run("not confirmed commits nothing", func(t *testing.T) {
		t.Parallel()
		kc := grouptest.NewTopic(t, kafkatest.NewCluster, 2)
		no := func() (bool, error) { return false, nil }
		if _, err := Reset(context.Background(), ResetOptions{Brokers: kc.Bootstrap, Group: grouptest.Group, Topic: grouptest.Topic, Confirm: no}, new(bytes.Buffer)); err == nil {
			t.Fatal("reset without confirmation succeeded")
		}
		grouptest.WantCommitted(t, kc, 2)
	})

	// A member of the group, and a reset from outside while it runs and
	// once it left. librdkafka's mock cluster neither describes groups nor
	// accepts a commit from outside a group that ever had members: there
	// the reset is refused by the broker while the member runs, and after
	// it left it needs --join. kfake's coordinator behaves like Kafka's: it
	// describes the group (the reset names its member) and, once the group
	// is empty, accepts the commit from outside.
	kafkatest.EachBroker(t, func(t *testing.T, b kafkatest.Broker) {
		t.Run("refused while the group has a member, done once it left", func(t *testing.T) {
			t.Parallel()
			kfake := b.Name == "kfake"
			kc := grouptest.NewTopic(t, b.New, 3)
			cm := kc.Config(kafka.ConfigMap{
				"group.id": grouptest.Group, "enable.auto.commit": false, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
			})
			member, err := kafka.NewConsumer(&cm)
			if err != nil {
				t.Fatal(err)
			}
			if err := member.Subscribe(grouptest.Topic, nil); err != nil {
				t.Fatal(err)
			}
			kafkatest.Eventually(t, 30*time.Second, func() bool {
				member.Poll(50)
				a, err := member.Assignment()
				return err == nil && len(a) == 3
			}, "the member got the topic's partitions")
			polling := make(chan struct{})
			stopped := make(chan struct{})
			go func() { // keep the member alive
				defer close(stopped)
				for {
					select {
					case <-polling:
						return
					default:
						member.Poll(50)
					}
				}
			}()
			reset := func(join bool) (string, error) {
				var out bytes.Buffer
				_, err := Reset(context.Background(), ResetOptions{Brokers: kc.Bootstrap, Group: grouptest.Group, Topic: grouptest.Topic, Join: join}, &out)
				return out.String(), err
			}

			out, err := reset(false)
			if !errors.Is(err, ErrActive) {
				t.Fatalf("reset with a member: error %v, want ErrActive\n%s", err, out)
			}
			if kfake {
				// Described: refused before anything is committed, with the
				// member named.
				if !strings.Contains(out, "state Stable, 1 member(s)") || !strings.Contains(out, "member rdkafka-") {
					t.Errorf("the output does not name the group's state and member:\n%s", out)
				}
			} else if !strings.Contains(out, "could not describe the group") {
				// The mock cluster describes no groups: the broker refuses the
				// commit from outside the group.
				t.Errorf("the output does not say the group could not be described:\n%s", out)
			}
			// With --join as well: on kfake the description refuses it first;
			// on the mock cluster, joining, it would share the partitions
			// with the member.
			if out, err := reset(true); !errors.Is(err, ErrActive) || !kfake && !strings.Contains(err.Error(), "another member holds the rest") {
				t.Fatalf("reset --join with a member: error %v, want ErrActive\n%s", err, out)
			}
			close(polling)
			<-stopped
			grouptest.WantCommitted(t, kc, 3)

			kafkaenv.CloseConsumer(member) // leaves the group at once
			if kfake {
				// Kafka's behaviour: an empty group takes a commit from
				// outside it, no --join needed.
				out, err := reset(false)
				if err != nil {
					t.Fatalf("reset after the member left: %v\n%s", err, out)
				}
				if !strings.Contains(out, "state Empty, 0 member(s)") || !strings.Contains(out, "done: group "+grouptest.Group) {
					t.Errorf("the output does not show an empty group reset:\n%s", out)
				}
			} else {
				// The mock cluster refuses commits from outside a group that
				// ever had a member (Kafka accepts them once it is empty): the
				// error says to join.
				if out, err := reset(false); !errors.Is(err, ErrActive) || !strings.Contains(err.Error(), "--join") {
					t.Fatalf("reset from outside after the member left: error %v, want ErrActive naming --join\n%s", err, out)
				}
				if out, err := reset(true); err != nil {
					t.Fatalf("reset --join after the member left: %v\n%s", err, out)
				}
			}
			// The committed offsets are the low watermarks.
			grouptest.WantCommitted(t, kc, 0)
		})
	})

}

// Under KAFKA_GROUP_PROTOCOL=consumer (in any case), with the classic
// protocol's settings still in the environment, the reset joins the group
// and commits: its clients leave out the environment's classic settings
// and the member's own session and heartbeat, which librdkafka refuses
// under that protocol.
func TestResetUnderTheConsumerProtocol(t *testing.T) {
	// Not parallel: the clients read the process's environment.
	t.Setenv("KAFKA_GROUP_PROTOCOL", "Consumer")
	t.Setenv("KAFKA_SESSION_TIMEOUT_MS", "6000")
	t.Setenv("KAFKA_HEARTBEAT_INTERVAL_MS", "500")
	t.Setenv("KAFKA_PARTITION_ASSIGNMENT_STRATEGY", "cooperative-sticky")
	kc := grouptest.NewTopic(t, kafkatest.NewCluster, 2)
	var out bytes.Buffer
	if _, err := Reset(context.Background(), ResetOptions{Brokers: kc.Bootstrap, Group: grouptest.Group, Topic: grouptest.Topic, Join: true}, &out); err != nil {
		t.Fatalf("reset --join: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "done: group "+grouptest.Group) {
		t.Errorf("the output does not say the reset is done:\n%s", out.String())
	}
	grouptest.WantCommitted(t, kc, 0)
}

// The mock cluster does not implement DescribeGroups: the decision on a
// description is tested on its own.
func TestMembersOf(t *testing.T) {
	t.Parallel()
	member := kafka.MemberDescription{ClientID: "crm-1", ConsumerID: "crm-1-abc", Host: "/10.0.0.7"}
	tests := []struct {
		name        string
		d           kafka.ConsumerGroupDescription
		wantMembers int
		wantOK      bool
	}{
		{"the broker cannot describe groups", kafka.ConsumerGroupDescription{Error: kafka.NewError(kafka.ErrUnsupportedFeature, "no", false)}, 0, false},
		{"an empty group", kafka.ConsumerGroupDescription{State: kafka.ConsumerGroupStateEmpty}, 0, true},
		{"a group that never existed", kafka.ConsumerGroupDescription{State: kafka.ConsumerGroupStateDead}, 0, true},
		{"a stable group with members", kafka.ConsumerGroupDescription{State: kafka.ConsumerGroupStateStable, Members: []kafka.MemberDescription{member, member}}, 2, true},
		{"a rebalance in progress", kafka.ConsumerGroupDescription{State: kafka.ConsumerGroupStatePreparingRebalance}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			members, ok := membersOf(tt.d)
			if len(members) != tt.wantMembers || ok != tt.wantOK {
				t.Fatalf("membersOf = %q, %v; want %d members, %v", members, ok, tt.wantMembers, tt.wantOK)
			}
		})
	}
	if !activeCommitError(kafka.NewError(kafka.ErrUnknownMemberID, "Broker: Unknown member", false)) ||
		activeCommitError(kafka.NewError(kafka.ErrUnknownTopicOrPart, "x", false)) || activeCommitError(errors.New("x")) {
		t.Error("activeCommitError misclassifies")
	}
}
