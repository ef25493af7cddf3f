// Package demotest runs the three consumers in process on the demo
// scenario (consumers/demo), for tests that need every path of them at
// once: a broker with the three topics and their DLQs, the consumers
// logging JSON lines into buffers, and the scenario played step by step as
// `make run` plays it.
package demotest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/roster"
)

// RetryTimeScale is the consumers' RETRY_TIME_SCALE, as in `make run`:
// crm's parked selection comes back within seconds, and messenger's cannot
// run out of retries on a slow machine.
const RetryTimeScale = 0.1

// Settle bounds every wait of a run.
const Settle = 2 * time.Minute

// Options tune a run.
type Options struct {
	Level          zerolog.Level        // the consumers' log level (zero, debug, means info: the default)
	TracerProvider trace.TracerProvider // nil: none
}

// Run is the three consumers on a broker of their own.
type Run struct {
	t       *testing.T
	Cluster *kafkatest.Cluster
	Runs    map[string]*consumertest.Running   // by service
	Logs    map[string]*consumertest.LogBuffer // by service
}

// NewCluster is a broker with the three topics and their DLQs.
func NewCluster(t *testing.T) *kafkatest.Cluster {
	t.Helper()
	topics := map[string]int{}
	for _, tp := range demo.Topics {
		topics[tp.Name], topics[tp.DLQ] = tp.Partitions, tp.Partitions
	}
	return kafkatest.NewCluster(t, topics)
}

// Start runs the three consumers on cl against the database at url.
func Start(t *testing.T, cl *kafkatest.Cluster, url string, o Options) *Run {
	t.Helper()
	if o.Level == zerolog.DebugLevel { // the zero value: the default level
		o.Level = zerolog.InfoLevel
	}
	r := &Run{t: t, Cluster: cl, Runs: map[string]*consumertest.Running{}, Logs: map[string]*consumertest.LogBuffer{}}
	for _, tp := range demo.Topics {
		buf := &consumertest.LogBuffer{}
		log := zerolog.New(buf).Level(o.Level).With().Timestamp().Logger()
		r.Logs[tp.Service] = buf
		svc, _ := roster.Named(tp.Service)
		r.Runs[tp.Service] = consumertest.Start(t, cl.Bootstrap, url, svc.New, consumertest.Options{
			RetryTimeScale: RetryTimeScale,
			Logger:         &log,
			TracerProvider: o.TracerProvider,
			// Commit stored offsets every 100 ms: the tests wait for them.
			Kafka: kafka.ConfigMap{"auto.commit.interval.ms": 100},
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for s, b := range r.Logs {
				t.Logf("%s consumer log:\n%s", s, b.String())
			}
		}
	})
	return r
}

// Stop stops the consumers as SIGTERM does.
func (r *Run) Stop() {
	r.t.Helper()
	for _, run := range r.Runs {
		if err := run.Stop(); err != nil {
			r.t.Fatalf("stop a consumer: %v", err)
		}
	}
}

// Produce produces events in order, each to the partition of its key.
func (r *Run) Produce(events []demo.Event) {
	r.t.Helper()
	for _, e := range events {
		r.Cluster.Produce(r.t, e.Topic, kafkatest.Message{Partition: -1, Key: e.Key, Value: e.Value})
	}
}

// CaughtUp reports whether every group committed every message of its
// topic.
func (r *Run) CaughtUp() bool {
	r.t.Helper()
	for _, tp := range demo.Topics {
		committed := int64(0)
		for _, o := range r.Cluster.Committed(r.t, tp.Group, tp.Name) {
			committed += o
		}
		if committed != int64(r.Cluster.Count(r.t, tp.Name)) {
			return false
		}
	}
	return true
}

// Play runs the scenario's steps in order on db: each step's provisioning
// once the consumers caught up with what came before it (what the
// scenario's pauses are for), then its events for which keep (nil: all) is
// true, i being the event's index in sc.Events().
func (r *Run) Play(sc *demo.Scenario, db *sql.DB, keep func(i int) bool) {
	r.t.Helper()
	i := 0
	for _, st := range sc.Steps {
		if st.SQL != "" {
			Poll(r.t, "the consumers did not catch up before: "+st.Say, r.CaughtUp)
			if _, err := db.ExecContext(context.Background(), st.SQL, st.SQLArgs...); err != nil {
				r.t.Fatalf("%s: %v", st.Say, err)
			}
		}
		var events []demo.Event
		for _, e := range st.Events {
			if keep == nil || keep(i) {
				events = append(events, e)
			}
			i++
		}
		r.Produce(events)
	}
}

// Setup runs the scenario's provisioning on db.
func Setup(t *testing.T, sc *demo.Scenario, db *sql.DB) {
	t.Helper()
	for _, st := range sc.Setup {
		if _, err := db.ExecContext(context.Background(), st.SQL, st.SQLArgs...); err != nil {
			t.Fatalf("%s: %v", st.Say, err)
		}
	}
}

// WaitDone waits until the consumers caught up and nothing is parked.
func (r *Run) WaitDone(db *sql.DB) {
	r.t.Helper()
	Poll(r.t, "the consumers did not finish the scenario (offsets committed, nothing parked)", func() bool {
		var parked int
		if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM parked_messages`).Scan(&parked); err != nil {
			r.t.Fatal(err)
		}
		return parked == 0 && r.CaughtUp()
	})
}

// Outcomes returns the outcomes the consumers logged, by MessageId.
func (r *Run) Outcomes() map[string][]string {
	out := map[string][]string{}
	for _, b := range r.Logs {
		for _, l := range b.Lines(func(m map[string]any) bool { return m["outcome"] != nil && m["MessageId"] != nil }) {
			id := fmt.Sprint(l["MessageId"])
			out[id] = append(out[id], fmt.Sprint(l["outcome"]))
		}
	}
	return out
}

// Poll checks cond every 100 ms until it holds, failing the test after
// Settle.
func Poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Settle)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", Settle, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
