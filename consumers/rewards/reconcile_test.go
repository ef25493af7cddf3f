package rewards

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/servicetest"
)

// startReconciling runs the consumer with its count of Active bonds on a
// 20 ms schedule.
func (e *env) startReconciling() {
	e.T.Helper()
	e.StartService(func(reg prometheus.Registerer) consumer.Service {
		s := New(reg)
		if len(s.Gauges) != 1 || s.Gauges[0].Name != MetricBondReplicas || s.Gauges[0].IntervalVar != ReconcileIntervalVar {
			e.T.Fatalf("the service's gauges are %+v, want %s on %s", s.Gauges, MetricBondReplicas, ReconcileIntervalVar)
		}
		s.Gauges[0].Interval = 20 * time.Millisecond
		return s
	}, consumertest.Options{Kafka: kafka.ConfigMap{"auto.commit.interval.ms": 100}})
}

// awaitActiveGauge waits until the running consumer exports
// rewards_bond_replicas{status="Active"} = want, computed after since.
func (e *env) awaitActiveGauge(want float64, since time.Time) {
	e.T.Helper()
	var got, at float64
	present := false
	kafkatest.Eventually(e.T, servicetest.Wait, func() bool {
		mfs, err := e.Run.Registry.Gather()
		if err != nil {
			e.T.Fatalf("gather: %v", err)
		}
		present, at = false, 0
		for _, mf := range mfs {
			switch mf.GetName() {
			case MetricBondReplicas:
				for _, m := range mf.GetMetric() {
					if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetName() == "status" && m.GetLabel()[0].GetValue() == "Active" {
						got, present = m.GetGauge().GetValue(), true
					}
				}
			case MetricBondReplicas + "_timestamp_seconds":
				at = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return present && at >= float64(since.UnixNano())/1e9 && got == want
	}, "rewards_bond_replicas{status=\"Active\"} computed after %v to be %v (last: present %v, %v at %v)",
		since, want, lazyValue(func() any { return present }), lazyValue(func() any { return got }), lazyValue(func() any { return at }))
}

// lazyValue formats as what its function returns when it is formatted.
type lazyValue func() any

func (l lazyValue) String() string { return fmt.Sprint(l()) }

// The running consumer's count of Active bonds follows the replica: bonds
// created, closed, rebound, the replica lost, and the replay from offset 0
// that rebuilds it.
func TestReconcileGaugeFollowsTheReplica(t *testing.T) {
	e := newEnv(t)
	e.startReconciling()
	e.awaitActiveGauge(0, time.Now())

	a, b, c := newBond(uuid.New()), newBond(uuid.New()), newBond(uuid.New())
	e.produce(created(a, 1, baseTime), created(b, 1, baseTime), created(c, 1, baseTime))
	e.waitCommitted()
	e.awaitActiveGauge(3, time.Now())

	e.produce(closed(a, "Revoked", 2, baseTime.Add(time.Minute)))
	e.waitCommitted()
	e.awaitActiveGauge(2, time.Now())

	next := newBond(b.Referred) // a rebind: still one Active bond for b's referred user
	e.produce(replaced(b, next, 2, baseTime.Add(2*time.Minute)), created(next, 1, baseTime.Add(2*time.Minute)))
	e.waitCommitted()
	e.awaitActiveGauge(2, time.Now())

	// The replica is lost (a restore of an empty database): the count
	// says so, and the referral side's would not match.
	e.Stop()
	e.Exec(`DELETE FROM referral_bond_replicas`)
	e.Exec(`DELETE FROM processed_messages`)
	e.startReconciling()
	e.awaitActiveGauge(0, time.Now())

	// The runbook's replay from offset 0 brings it back.
	e.Stop()
	e.resetGroup(allPartitions(0))
	e.startReconciling()
	e.waitCommitted()
	e.awaitActiveGauge(2, time.Now())
	if n, err := CountActive(context.Background(), e.DB); err != nil || n != 2 {
		t.Fatalf("CountActive: %d, %v; want 2", n, err)
	}
}

// The count reads the partial unique index of Active bonds (an index-only
// or bitmap scan of it), never the table's closed bonds: the planner,
// forbidden a sequential scan, still finds a plan through that index.
func TestCountActiveReadsThePartialIndex(t *testing.T) {
	t.Parallel()
	e := &env{servicetest.New(t, New, 6)}
	for i := range 20 {
		status := "Revoked"
		if i%4 == 0 {
			status = "Active"
		}
		e.Exec(`INSERT INTO referral_bond_replicas (bond_id, referred_user_id, referrer_user_id, status, bound_at, replica_version, synced_at)
			VALUES ($1, $2, $3, $4, now(), 1, now())`, uuid.New(), uuid.New(), uuid.New(), status)
	}
	ctx := context.Background()
	if n, err := CountActive(ctx, e.DB); err != nil || n != 5 {
		t.Fatalf("CountActive: %d, %v; want 5", n, err)
	}
	conn, err := e.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := conn.QueryRowContext(ctx, `EXPLAIN (FORMAT JSON) `+countActiveSQL).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, `"Index Name": "ux_referral_bond_replicas_referred_active"`) {
		t.Fatalf("the count of Active bonds does not use the partial index:\n%s", plan)
	}
}
