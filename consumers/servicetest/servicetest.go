// Package servicetest is the harness the services' tests share
// (consumers/messenger, rewards and crm): a service under test on an
// in-process broker with its topic and DLQ (kafkatest), a fresh migrated
// database (pgtest) and its consumer run as in production
// (consumertest.Start); the envelope of docs/contract.md §4.1 built from
// the members a test varies; a dead letter checked against
// docs/contract.md §5; and the waits for what the consumer does — a
// message's outcome, the group's committed offsets, a counter, the DLQ.
//
// What one service's tests alone need (its events, its tables) stays in
// that service's harness_test.go.
package servicetest

import (
	"database/sql"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// Wait bounds every wait for something the consumer does.
const Wait = 30 * time.Second

// Main is a service package's TestMain: zerolog's time format as
// consumer.Main sets it, and one PostgreSQL server for the package's tests
// (pgtest.Main: the one DATABASE_URL names, or a private one), each test on
// its own clone of the migrated template.
func Main(m *testing.M) {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	pgtest.Main(m)
}

// Env is one end-to-end test of a service: a broker with the service's
// topic and DLQ, a fresh migrated database, and the service's consumer once
// Start runs it.
type Env struct {
	T       *testing.T
	Cluster *kafkatest.Cluster
	Client  *ent.Client
	DB      *sql.DB
	URL     string // the database's
	// Logs holds the JSON log lines of every consumer Start ran.
	Logs *Logs
	// Run is the consumer Start ran last.
	Run *consumertest.Running

	// The service's topic, DLQ and group (consumer.Service).
	Topic, DLQTopic, Group string

	build      func(prometheus.Registerer) consumer.Service
	routes     []consumer.RouteInfo
	partitions int
	produced   map[int32]int64 // partition → offset after the last message Produce wrote
}

// New sets up a test of the service build makes: a broker with its topic
// and its DLQ, partitions partitions each, and a fresh migrated database.
// Start runs the consumer.
func New(t *testing.T, build func(prometheus.Registerer) consumer.Service, partitions int) *Env {
	t.Helper()
	svc := build(prometheus.NewRegistry())
	e := &Env{T: t, Logs: &Logs{}, Topic: svc.Topic, DLQTopic: svc.DLQTopic, Group: svc.Group,
		build: build, routes: svc.Routes(), partitions: partitions, produced: map[int32]int64{}}
	e.Cluster = kafkatest.NewCluster(t, map[string]int{svc.Topic: partitions, svc.DLQTopic: partitions})
	e.Client, e.DB, e.URL = pgtest.NewClient(t)
	return e
}

// Start runs the service's consumer with o until the test ends or Stop.
// Without o.Logger it logs JSON lines at info into Logs, and a readable
// copy into the test's log (shown for a failed test, and with -v).
func (e *Env) Start(o consumertest.Options) *consumertest.Running {
	e.T.Helper()
	return e.StartService(e.build, o)
}

// StartService is Start of the service build makes: the service changed
// for a test (another group, no Read, its own publisher).
func (e *Env) StartService(build func(prometheus.Registerer) consumer.Service, o consumertest.Options) *consumertest.Running {
	e.T.Helper()
	if o.Logger == nil {
		console := zerolog.ConsoleWriter{Out: testWriter{e.T}, NoColor: true, TimeFormat: "15:04:05.000"}
		log := zerolog.New(zerolog.MultiLevelWriter(e.Logs, console)).Level(zerolog.InfoLevel).With().Timestamp().Logger()
		o.Logger = &log
	}
	e.Run = consumertest.Start(e.T, e.Cluster.Bootstrap, e.URL, build, o)
	return e.Run
}

// Stop stops the consumer as SIGTERM does: it drains, commits and leaves
// the group.
func (e *Env) Stop() {
	e.T.Helper()
	if err := e.Run.Stop(); err != nil {
		e.T.Fatalf("stop the consumer: %v", err)
	}
}

// Produce writes msgs to the service's topic in order and returns where
// they landed.
func (e *Env) Produce(msgs ...kafkatest.Message) []kafka.TopicPartition {
	e.T.Helper()
	tps := e.Cluster.Produce(e.T, e.Topic, msgs...)
	for _, tp := range tps {
		e.produced[tp.Partition] = max(e.produced[tp.Partition], int64(tp.Offset)+1)
	}
	return tps
}

// Produced is, for every partition of the topic, the offset after the
// last message Produce wrote there (0: none): what the group has committed
// once it processed everything.
func (e *Env) Produced() map[int32]int64 {
	out := map[int32]int64{}
	for p := range int32(e.partitions) {
		out[p] = e.produced[p]
	}
	return out
}

// Past is the committed offsets that put a group past every one of tps:
// per partition, the highest offset + 1.
func Past(tps ...kafka.TopicPartition) map[int32]int64 {
	out := map[int32]int64{}
	for _, tp := range tps {
		out[tp.Partition] = max(out[tp.Partition], int64(tp.Offset)+1)
	}
	return out
}

// AwaitCommitted waits until group has committed want (partition →
// offset) on the service's topic, and fails unless it committed exactly
// that on those partitions: nothing beyond.
func (e *Env) AwaitCommitted(group string, want map[int32]int64) {
	e.T.Helper()
	got := map[int32]int64{} // filled in place: the failure message shows the last read
	kafkatest.Eventually(e.T, Wait, func() bool {
		clear(got)
		maps.Copy(got, e.Cluster.Committed(e.T, group, e.Topic))
		for p, off := range want {
			if got[p] < off {
				return false
			}
		}
		return true
	}, "committed offsets of %s: %v, want %v", group, got, want)
	for p, off := range want {
		if got[p] != off {
			e.T.Errorf("%s committed %d on partition %d, want %d", group, got[p], p, off)
		}
	}
}

// Outcome is the outcome stored with the idempotency mark of message id
// of eventType ("" without a mark). It fails the test unless the mark
// names the service's group and topic.
func (e *Env) Outcome(eventType string, id uuid.UUID) string {
	e.T.Helper()
	key := e.key(eventType, id)
	var out, group, topic string
	err := e.DB.QueryRow(`SELECT outcome, consumer_group, topic FROM processed_messages WHERE idempotency_key = $1`, key).
		Scan(&out, &group, &topic)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	if err != nil {
		e.T.Fatalf("read the mark %s: %v", key, err)
	}
	if group != e.Group || topic != e.Topic {
		e.T.Errorf("mark %s: group %s topic %s, want %s %s", key, group, topic, e.Group, e.Topic)
	}
	return out
}

// AwaitOutcome waits for the idempotency mark of message id of eventType
// and fails unless its outcome is want.
func (e *Env) AwaitOutcome(eventType string, id uuid.UUID, want consumer.Outcome) {
	e.T.Helper()
	var got string
	kafkatest.Eventually(e.T, Wait, func() bool { got = e.Outcome(eventType, id); return got != "" },
		"no idempotency mark for message %s (want outcome %s)", id, want)
	if got != string(want) {
		e.T.Fatalf("message %s: outcome %q, want %q", id, got, want)
	}
}

// key is the idempotency key of message id of eventType
// (docs/contract.md §4.6): the prefix of the service's route.
func (e *Env) key(eventType string, id uuid.UUID) string {
	e.T.Helper()
	for _, r := range e.routes {
		if r.EventType == eventType {
			return r.KeyPrefix + id.String()
		}
	}
	e.T.Fatalf("the service has no route for %q", eventType)
	return ""
}

// AwaitCounter waits until the running consumer's counter (or gauge)
// name, summed over the series whose labels include labels, is want.
func (e *Env) AwaitCounter(name string, labels map[string]string, want float64) {
	e.T.Helper()
	var got float64
	kafkatest.Eventually(e.T, Wait, func() bool { got = e.Run.Counter(name, labels); return got == want },
		"%s%v = %v, want %v", name, labels, got, want)
}

// AwaitDLQ waits until the DLQ holds n dead letters, fails unless it holds
// exactly n, and returns them (n 0: checks that it is empty).
func (e *Env) AwaitDLQ(n int) []*kafka.Message {
	e.T.Helper()
	if n > 0 {
		kafkatest.Eventually(e.T, Wait, func() bool { return e.Cluster.Count(e.T, e.DLQTopic) >= n }, "%d dead letters", n)
	}
	if got := e.Cluster.Count(e.T, e.DLQTopic); got != n {
		e.T.Fatalf("the DLQ holds %d dead letters, want %d", got, n)
	}
	if n == 0 {
		return nil
	}
	ms := e.Cluster.ReadAll(e.T, e.DLQTopic, n, Wait)
	if len(ms) != n {
		e.T.Fatalf("read %d dead letters, want %d", len(ms), n)
	}
	return ms
}

// Count runs query, which counts something.
func (e *Env) Count(query string, args ...any) int {
	e.T.Helper()
	var n int
	if err := e.DB.QueryRow(query, args...).Scan(&n); err != nil {
		e.T.Fatalf("%s: %v", query, err)
	}
	return n
}

// Exec runs a statement on the test's database.
func (e *Env) Exec(query string, args ...any) {
	e.T.Helper()
	if _, err := e.DB.Exec(query, args...); err != nil {
		e.T.Fatalf("%s: %v", query, err)
	}
}

// Logs collects a consumer's JSON log lines.
type Logs struct{ consumertest.LogBuffer }

// Find returns the log lines whose message is msg and whose fields include
// every one of fields (nil: any line with that message).
func (l *Logs) Find(msg string, fields map[string]any) []map[string]any {
	return l.Lines(func(line map[string]any) bool { return line["message"] == msg && HasFields(line, fields) })
}

// HasFields reports whether the log line has every one of fields, with the
// same value (a JSON number is a float64).
func HasFields(line, fields map[string]any) bool {
	for k, v := range fields {
		if line[k] != v {
			return false
		}
	}
	return true
}

// testWriter sends the console log to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a runtime goroutine may log after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
