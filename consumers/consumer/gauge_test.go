package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/ent"
)

// gaugeReading is what a registry exports of a periodic gauge.
type gaugeReading struct {
	values  map[string]float64 // by label value; nil: no series
	stamp   float64            // _timestamp_seconds; 0: absent
	errors  float64            // _errors_total
	counted bool               // the errors counter is exported
}

func readGauge(t *testing.T, reg *prometheus.Registry, name, label string) gaugeReading {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var g gaugeReading
	for _, mf := range mfs {
		switch mf.GetName() {
		case name:
			g.values = map[string]float64{}
			for _, m := range mf.GetMetric() {
				g.values[labelOf(m, label)] = m.GetGauge().GetValue()
			}
		case name + "_timestamp_seconds":
			g.stamp = mf.GetMetric()[0].GetGauge().GetValue()
		case name + "_errors_total":
			g.errors, g.counted = mf.GetMetric()[0].GetCounter().GetValue(), true
		}
	}
	return g
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A service's periodic gauge runs beside the messages: a computation that
// hangs holds up no message, a failed or panicking one is counted and the
// process goes on, and the values and their time are exported only once a
// computation succeeded.
func TestPeriodicGauge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const name = "test_probe_things"

	var calls atomic.Int64
	release := make(chan struct{})
	compute := func(ctx context.Context, client *ent.Client) (map[string]float64, error) {
		switch calls.Add(1) {
		case 1: // hangs until released: the messages must not wait for it
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, errors.New("the database refused the count")
		case 2:
			panic("a bug in the count")
		}
		n, err := client.Lead.Query().Count(ctx)
		return map[string]float64{"Active": float64(n)}, err
	}
	build := func(reg prometheus.Registerer) consumer.Service {
		s := probeService()(reg)
		s.Gauges = []consumer.PeriodicGauge{{Name: name, Help: "leads", Label: "status",
			Interval: 20 * time.Millisecond, Timeout: time.Hour, Compute: compute}}
		return s
	}
	run := e.start(build, consumertest.Options{})

	// While the first computation hangs, messages are applied.
	leadID := e.lead()
	for range 5 {
		_, v := envelope(leadID, "")
		e.produce(0, v)
	}
	e.waitCommitted(5)
	if got := e.events(leadID); got != 5 {
		t.Fatalf("%d events applied, want 5", got)
	}
	g := readGauge(t, run.Registry, name, "status")
	if calls.Load() != 1 || g.values != nil || g.stamp != 0 || !g.counted || g.errors != 0 {
		t.Fatalf("while the first computation hangs: %d calls, %+v; want 1 call, no values, no time, 0 errors", calls.Load(), g)
	}

	// It fails, the next panics: two errors, still no values; then a
	// count.
	close(release)
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		g = readGauge(t, run.Registry, name, "status")
		return g.values != nil
	}, "the gauge to be computed (last read %+v)", lazy(func() any { return g }))
	if g.errors != 2 || g.values["Active"] != 1 || len(g.values) != 1 {
		t.Fatalf("after a failure, a panic and a count: %+v, want 2 errors and Active 1", g)
	}
	if at := time.Unix(0, int64(g.stamp*1e9)); time.Since(at) > time.Minute || time.Since(at) < 0 {
		t.Fatalf("computed at %v, want about now", at)
	}

	// Computed again on its schedule: the time moves on.
	first := g.stamp
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		return readGauge(t, run.Registry, name, "status").stamp > first
	}, "the gauge to be computed again")
	_ = run.Stop()
}

// The schedule comes from the gauge's variable; a bad value names it.
func TestGaugeIntervalsFromEnv(t *testing.T) {
	svc := consumer.Service{Gauges: []consumer.PeriodicGauge{{Name: "a", IntervalVar: "TEST_A_INTERVAL", Interval: time.Minute}, {Name: "b"}}}
	if err := consumer.GaugeIntervalsFromEnv([]string{"TEST_A_INTERVAL=5s", "OTHER=1"}, &svc); err != nil || svc.Gauges[0].Interval != 5*time.Second {
		t.Fatalf("TEST_A_INTERVAL=5s: %v, %v", svc.Gauges[0].Interval, err)
	}
	for _, bad := range []string{"soon", "0s", "-1m"} {
		err := consumer.GaugeIntervalsFromEnv([]string{"TEST_A_INTERVAL=" + bad}, &svc)
		var ce *consumer.ConfigError
		if !errors.As(err, &ce) || ce.Var != "TEST_A_INTERVAL" || strings.Contains(err.Error(), bad) {
			t.Errorf("TEST_A_INTERVAL=%s: %v, want a ConfigError naming the variable, not the value", bad, err)
		}
	}
}
