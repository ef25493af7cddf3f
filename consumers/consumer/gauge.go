package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/ent"
)

// PeriodicGauge is a gauge a service computes from the database on a
// schedule (a count another system's is compared with: rewards' Active
// bonds). The runtime runs Compute in a goroutine of its own, once the
// schema gate has opened and then every Interval, each call under its own
// Timeout on a pool connection, outside the transactions' lanes: it never
// holds up a message. It exports, on the registry as named (no service
// label, like the spec-named families):
//
//	<Name>{<Label>="…"}         the values of the last computation that succeeded
//	<Name>_timestamp_seconds    when that computation ran (Unix time)
//	<Name>_errors_total         computations that failed (each logged once)
//
// Nothing is exported under the first two before the first success, so a
// comparison never reads a 0 that was never counted; after a failure the
// last values stay, with their time.
type PeriodicGauge struct {
	Name  string
	Help  string
	Label string // the label of the values' series ("status")
	// IntervalVar names the environment variable of the schedule (a Go
	// duration), which Main reads; Interval is its default, and the
	// schedule of a runtime built without Main. Zero: a minute.
	IntervalVar string
	Interval    time.Duration
	// Timeout bounds one computation; zero: min(Interval, 10s).
	Timeout time.Duration
	// Compute returns the values by label value. Its error (or panic) is
	// counted and logged; the process goes on.
	Compute func(ctx context.Context, client *ent.Client) (map[string]float64, error)
}

func (g PeriodicGauge) interval() time.Duration {
	if g.Interval > 0 {
		return g.Interval
	}
	return time.Minute
}

func (g PeriodicGauge) timeout() time.Duration {
	if g.Timeout > 0 {
		return g.Timeout
	}
	return min(g.interval(), 10*time.Second)
}

// GaugeIntervalsFromEnv sets the Interval of each of svc's gauges from its
// IntervalVar in environ ("NAME=value" pairs), when set there. The error
// names the variable (a *ConfigError: exit 2).
func GaugeIntervalsFromEnv(environ []string, svc *Service) error {
	var errs []error
	for i, g := range svc.Gauges {
		if g.IntervalVar == "" {
			continue
		}
		for _, kv := range environ {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k != g.IntervalVar || v == "" {
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, &ConfigError{Var: k, Err: errors.New("is not a positive duration (e.g. 1m)")})
				continue
			}
			svc.Gauges[i].Interval = d
		}
	}
	return errors.Join(errs...)
}

// gauge is a PeriodicGauge's collector and its last computation.
type gauge struct {
	def           PeriodicGauge
	values, stamp *prometheus.Desc
	errors        prometheus.Counter

	mu   sync.Mutex
	last map[string]float64
	at   time.Time
}

func newGauge(reg prometheus.Registerer, g PeriodicGauge) (*gauge, error) {
	if g.Name == "" || g.Label == "" || g.Compute == nil {
		return nil, errors.New("consumer: a periodic gauge needs Name, Label and Compute")
	}
	c := &gauge{
		def:    g,
		values: prometheus.NewDesc(g.Name, g.Help, []string{g.Label}, nil),
		stamp: prometheus.NewDesc(g.Name+"_timestamp_seconds",
			"When "+g.Name+" was last computed (Unix time); absent before the first computation.", nil, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: g.Name + "_errors_total",
			Help: "Computations of " + g.Name + " that failed (the last values stay)."}),
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("consumer: gauge %s: %w", g.Name, err)
	}
	return c, nil
}

func (c *gauge) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.values
	ch <- c.stamp
	c.errors.Describe(ch)
}

func (c *gauge) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if !c.at.IsZero() {
		for v, n := range c.last {
			ch <- prometheus.MustNewConstMetric(c.values, prometheus.GaugeValue, n, v)
		}
		ch <- prometheus.MustNewConstMetric(c.stamp, prometheus.GaugeValue, float64(c.at.UnixNano())/1e9)
	}
	c.mu.Unlock()
	c.errors.Collect(ch)
}

// run computes the gauge now and then every Interval until ctx ends.
func (r *Runtime) runGauge(ctx context.Context, c *gauge) {
	tick := time.NewTicker(c.def.interval())
	defer tick.Stop()
	for {
		r.computeGauge(ctx, c)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *Runtime) computeGauge(ctx context.Context, c *gauge) {
	cctx, cancel := context.WithTimeout(ctx, c.def.timeout())
	defer cancel()
	values, err := func() (v map[string]float64, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return c.def.Compute(cctx, r.client)
	}()
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down
		}
		c.errors.Inc()
		r.log.Warn().Err(err).Str("gauge", c.def.Name).Dur("timeout", c.def.timeout()).Msg("periodic gauge not computed")
		return
	}
	c.mu.Lock()
	c.last, c.at = values, time.Now()
	c.mu.Unlock()
}
