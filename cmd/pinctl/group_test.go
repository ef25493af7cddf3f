package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/dlq/dlqtest"
	"github.com/pin-platform/pin/internal/kafkaenv"
)

// groupTopic makes a 3-partition topic on the mock cluster holding n
// messages per partition and commits the high watermark of each for
// dlqtest.Group, as a group that has read everything would have.
func groupTopic(t *testing.T, n int) *kafkatest.Cluster {
	t.Helper()
	return groupTopicOn(t, kafkatest.NewCluster, n)
}

// groupTopicOn is groupTopic on the cluster newCluster starts.
func groupTopicOn(t *testing.T, newCluster func(testing.TB, map[string]int) *kafkatest.Cluster, n int) *kafkatest.Cluster {
	t.Helper()
	kc := newCluster(t, map[string]int{dlqtest.Source: 3})
	for p := range int32(3) {
		for i := range n {
			kc.Produce(t, dlqtest.Source, kafkatest.Message{Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("{}")})
		}
	}
	cm := kc.Config(kafka.ConfigMap{"group.id": dlqtest.Group, "enable.auto.commit": false})
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer kafkaenv.CloseConsumer(c)
	topic := dlqtest.Source
	var tps []kafka.TopicPartition
	for p := range int32(3) {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(n)})
	}
	if _, err := c.CommitOffsets(tps); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return kc
}

func wantCommitted(t *testing.T, kc *kafkatest.Cluster, want int64) {
	t.Helper()
	got := kc.Committed(t, dlqtest.Group, dlqtest.Source)
	for p := range int32(3) {
		if off, ok := got[p]; !ok || off != want {
			t.Fatalf("committed offsets %v, want %d on every partition", got, want)
		}
	}
}

func TestGroupReset(t *testing.T) {
	t.Parallel()

	t.Run("commits the low watermark of every partition and prints before and after", func(t *testing.T) {
		t.Parallel()
		kc := groupTopic(t, 4)
		wantCommitted(t, kc, 4)
		var out bytes.Buffer
		err := groupResetCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--group", dlqtest.Group, "--topic", dlqtest.Source, "--to-earliest", "--yes"},
			strings.NewReader(""), &out, &out)
		if err != nil {
			t.Fatalf("group reset: %v\n%s", err, out.String())
		}
		wantCommitted(t, kc, 0)
		for _, want := range []string{
			"group " + dlqtest.Group + ", topic " + dlqtest.Source + " (3 partitions)",
			"committed before", "to commit", "committed",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		// Every partition's row of the last table: before 4, after 0, lag 4.
		tables := strings.Split(out.String(), "committed before")
		last := tables[len(tables)-1]
		for p := range 3 {
			if !strings.Contains(strings.Join(strings.Fields(last), " "), fmt.Sprintf("%d 0 4 4 0 4", p)) {
				t.Errorf("partition %d: no row \"%d 0 4 4 0 4\" in\n%s", p, p, last)
			}
		}
	})

	t.Run("a dry run commits nothing", func(t *testing.T) {
		t.Parallel()
		kc := groupTopic(t, 2)
		var out bytes.Buffer
		if _, err := resetGroup(context.Background(), groupResetOptions{Brokers: kc.Bootstrap, Group: dlqtest.Group, Topic: dlqtest.Source, DryRun: true}, &out); err != nil {
			t.Fatalf("dry run: %v\n%s", err, out.String())
		}
		wantCommitted(t, kc, 2)
	})

	t.Run("not confirmed commits nothing", func(t *testing.T) {
		t.Parallel()
		kc := groupTopic(t, 2)
		no := func() (bool, error) { return false, nil }
		if _, err := resetGroup(context.Background(), groupResetOptions{Brokers: kc.Bootstrap, Group: dlqtest.Group, Topic: dlqtest.Source, Confirm: no}, new(bytes.Buffer)); err == nil {
			t.Fatal("reset without confirmation succeeded")
		}
		wantCommitted(t, kc, 2)
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
			kc := groupTopicOn(t, b.New, 3)
			cm := kc.Config(kafka.ConfigMap{
				"group.id": dlqtest.Group, "enable.auto.commit": false, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
			})
			member, err := kafka.NewConsumer(&cm)
			if err != nil {
				t.Fatal(err)
			}
			if err := member.Subscribe(dlqtest.Source, nil); err != nil {
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
				_, err := resetGroup(context.Background(), groupResetOptions{Brokers: kc.Bootstrap, Group: dlqtest.Group, Topic: dlqtest.Source, Join: join}, &out)
				return out.String(), err
			}

			out, err := reset(false)
			if !errors.Is(err, errGroupActive) {
				t.Fatalf("reset with a member: error %v, want errGroupActive\n%s", err, out)
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
			if out, err := reset(true); !errors.Is(err, errGroupActive) || !kfake && !strings.Contains(err.Error(), "another member holds the rest") {
				t.Fatalf("reset --join with a member: error %v, want errGroupActive\n%s", err, out)
			}
			close(polling)
			<-stopped
			wantCommitted(t, kc, 3)

			kafkaenv.CloseConsumer(member) // leaves the group at once
			if kfake {
				// Kafka's behaviour: an empty group takes a commit from
				// outside it, no --join needed.
				out, err := reset(false)
				if err != nil {
					t.Fatalf("reset after the member left: %v\n%s", err, out)
				}
				if !strings.Contains(out, "state Empty, 0 member(s)") || !strings.Contains(out, "done: group "+dlqtest.Group) {
					t.Errorf("the output does not show an empty group reset:\n%s", out)
				}
			} else {
				// The mock cluster refuses commits from outside a group that
				// ever had a member (Kafka accepts them once it is empty): the
				// error says to join.
				if out, err := reset(false); !errors.Is(err, errGroupActive) || !strings.Contains(err.Error(), "--join") {
					t.Fatalf("reset from outside after the member left: error %v, want errGroupActive naming --join\n%s", err, out)
				}
				if out, err := reset(true); err != nil {
					t.Fatalf("reset --join after the member left: %v\n%s", err, out)
				}
			}
			// The committed offsets are the low watermarks.
			wantCommitted(t, kc, 0)
		})
	})

	t.Run("usage errors", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"--brokers", "b", "--group", "g", "--topic", "t"},                  // no --to-earliest
			{"--brokers", "b", "--group", "g", "--to-earliest", "--yes"},        // no topic
			{"--brokers", "b", "--topic", "t", "--to-earliest", "--yes"},        // no group
			{"--brokers", "b", "--group", "g", "--topic", "t", "--to-earliest"}, // no --yes, stdin not a terminal
		} {
			err := groupResetCmd(context.Background(), args, strings.NewReader("y\n"), new(bytes.Buffer), new(bytes.Buffer))
			var ue usageError
			if !errors.As(err, &ue) {
				t.Errorf("group reset %q: error %v, want a usage error", args, err)
			}
		}
	})
}

// The mock cluster does not implement DescribeGroups: the decision on a
// description is tested on its own.
func TestGroupMembers(t *testing.T) {
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
			members, ok := groupMembers(tt.d)
			if len(members) != tt.wantMembers || ok != tt.wantOK {
				t.Fatalf("groupMembers = %q, %v; want %d members, %v", members, ok, tt.wantMembers, tt.wantOK)
			}
		})
	}
	if !activeGroupCommitError(kafka.NewError(kafka.ErrUnknownMemberID, "Broker: Unknown member", false)) ||
		activeGroupCommitError(kafka.NewError(kafka.ErrUnknownTopicOrPart, "x", false)) || activeGroupCommitError(errors.New("x")) {
		t.Error("activeGroupCommitError misclassifies")
	}
}
