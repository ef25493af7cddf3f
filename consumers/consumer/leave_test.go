package consumer_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// A member stopped while its group assigns (the rolling restart's
// everyday case: a new pod joins, an old one gets SIGTERM) leaves
// cleanly under every group protocol and on both brokers: Run returns
// nil, the member that stays is ready again, and every message has one
// effect. Stopped at once, a little later and later still after the
// join, the member meets the rebalance in each of its phases: its revoke,
// an assignment served while it leaves, the join's sync, a SyncGroup
// refused by the next rebalance. On kfake the delay counts from the
// member's first JoinGroup at the coordinator, so that every round stops
// a member the group counts in. (Closed with
// the group mid-rebalance, librdkafka's termination could assert and
// abort the process, librdkafka#4792, and on kfake the other member's
// join waited for minutes: the runtime leaves the group before it closes
// the consumer.) Where a join ends once every member has rejoined (kfake,
// and KIP-848's heartbeats on both brokers) the member leaves within its
// budget. The mock cluster's classic coordinator holds a join open for
// the session timeout less a second (5 s here, the budget), so there the
// member may close at the budget, as it did before.
func TestAMemberStoppedWhileTheGroupAssignsLeavesCleanly(t *testing.T) {
	t.Parallel()
	delays := []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, 600 * time.Millisecond, 1500 * time.Millisecond}
	for _, p := range groupProtocols {
		t.Run(p.name, func(t *testing.T) {
			onEachBroker(t, func(t *testing.T, e *env) {
				opts := consumertest.Options{BatchSize: 4, Kafka: p.kafka}
				leadID := e.lead()
				stay := e.start(probeService(long...), opts)
				kafkatest.Eventually(t, 60*time.Second, ready(stay), "the first member to be ready")
				produced := 0
				for round, d := range delays {
					for i := 0; i < 12; i++ {
						_, v := envelope(leadID, "")
						e.produce(int32(i%3), v)
						produced++
					}
					var fellBack atomic.Bool
					lopts := opts
					lopts.Logger = watchedLogger("could not leave its group", &fellBack)
					joined := e.newMemberJoins()
					leaving := e.start(probeService(long...), lopts)
					joined()
					time.Sleep(d)
					stopped := make(chan error, 1)
					began := time.Now()
					go func() { stopped <- leaving.Stop() }()
					select {
					case err := <-stopped:
						t.Logf("round %d (stopped %v after the join): stopped in %v", round, d, time.Since(began).Round(time.Millisecond))
						if err != nil {
							t.Fatalf("round %d (stopped %v after the join): Run returned %v, want nil", round, d, err)
						}
					case <-time.After(90 * time.Second):
						t.Fatalf("round %d (stopped %v after the join): the member did not stop", round, d)
					}
					if fellBack.Load() && (e.cluster.Kfake() != nil || p.name == "consumer") {
						t.Errorf("round %d (stopped %v after the join): the member closed without leaving its group", round, d)
					}
					kafkatest.Eventually(t, 90*time.Second, ready(stay), fmt.Sprintf("round %d: the member that stays to be ready again", round))
				}
				e.waitCommitted(int64(produced))
				if got := e.events(leadID); got != produced {
					t.Fatalf("lead_events = %d, want %d: lost or doubled effects", got, produced)
				}
			})
		})
	}
}

// A static member (group.instance.id, KIP-345) does not leave its group
// at shutdown: the group keeps its partitions for it across a restart,
// and an unsubscribe would send the LeaveGroup that gives them away. A
// dynamic member, stopped the same way, does leave: the check sees
// LeaveGroup requests at all.
func TestAStaticMemberKeepsItsMembershipAcrossAStop(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		kafka      kafka.ConfigMap
		wantLeaves bool
	}{
		{"static", kafka.ConfigMap{"group.instance.id": "probe-0"}, false},
		{"dynamic", kafka.ConfigMap{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := kfakeEnv(t)
			leaves := e.cluster.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.LeaveGroup}, Group: probeGroup, Observe: true, Count: -1})
			defer leaves.Remove()
			r := e.start(probeService(long...), consumertest.Options{BatchSize: 4, Kafka: c.kafka})
			kafkatest.Eventually(t, 60*time.Second, ready(r), "the member to be ready")
			if err := r.Stop(); err != nil {
				t.Fatalf("Run returned %v, want nil", err)
			}
			if got := leaves.Hits() > 0; got != c.wantLeaves {
				t.Fatalf("LeaveGroup sent: %v, want %v", got, c.wantLeaves)
			}
		})
	}
}
