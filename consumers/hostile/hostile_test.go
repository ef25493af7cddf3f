package hostile

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/consumer/consumertest"
	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/consumers/messenger"
	"github.com/pin-platform/pin/consumers/rewards"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// service is one consumer under test: how to build it, a valid event of
// it, the payload member each hostile value goes into, and its codes.
type service struct {
	name     string
	build    func(prometheus.Registerer) consumer.Service
	topic    demo.Topic
	valid    func() demo.Event
	text     string // a string member of the payload
	time     string // a timestamp member of the payload
	invalid  string // its invalid code
	lagGauge string
}

var far = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

func services() []service {
	now := time.Now().UTC()
	topic := func(name string) demo.Topic {
		for _, t := range demo.Topics {
			if t.Service == name {
				return t
			}
		}
		panic(name)
	}
	return []service{
		{
			name: "messenger", build: messenger.New, topic: topic("messenger"),
			valid: func() demo.Event {
				return demo.LeadParticipantsChanged(uuid.New(), 1, []demo.Participant{{UserID: uuid.New(), Role: "Executor"}}, nil, now)
			},
			text: "ActiveParticipants.0.Role", time: "ChangedAt", invalid: "MSG_LEAD_PARTICIPANTS_INVALID",
		},
		{
			name: "rewards", build: rewards.New, topic: topic("rewards"),
			valid: func() demo.Event { return demo.BondCreated(uuid.New(), uuid.New(), uuid.New(), 1, now) },
			text:  "BondId", time: "BoundAt", invalid: "REWARDS_BOND_EVENT_INVALID",
			lagGauge: rewards.MetricLagSeconds,
		},
		{
			name: "crm", build: crm.New, topic: topic("crm"),
			valid: func() demo.Event {
				return demo.SelectionShared(uuid.New(), uuid.New(), uuid.New(), "Shared", "a title", 3, now)
			},
			text: "SelectionTitle", time: "OccurredAt", invalid: "CRM_SELECTION_EVENT_INVALID",
		},
	}
}

// hostileCase turns a valid event into one that must end in the DLQ with
// the code it returns (the service's invalid code, or the envelope's).
type hostileCase struct {
	name string
	make func(s service, e demo.Event) ([]byte, string)
}

// caseReasons is what the DLQ's reason header says, for the cases that
// name it.
var caseReasons = map[string]string{
	"a payload time 16 hours from UTC": "not a time PostgreSQL stores",
	"a payload time in year 0000":      "not a time PostgreSQL stores",
	"CreatedAt 16 hours from UTC":      "CreatedAt",
}

var cases = []hostileCase{
	{"a NUL character in a string member", func(s service, e demo.Event) ([]byte, string) {
		return edit(e.Value, func(env map[string]any) { setPath(env["Payload"], s.text, "a\x00b") }), s.invalid
	}},
	{"CreatedAt in year 9999", func(s service, e demo.Event) ([]byte, string) {
		return edit(e.Value, func(env map[string]any) { env["CreatedAt"] = far.Format(time.RFC3339) }), s.invalid
	}},
	{"a payload time more than MAX_CLOCK_SKEW ahead", func(s service, e demo.Event) ([]byte, string) {
		return edit(e.Value, func(env map[string]any) {
			setPath(env["Payload"], s.time, time.Now().Add(25*time.Hour).UTC().Format(time.RFC3339))
		}), s.invalid
	}},
	{"a payload time 16 hours from UTC", func(s service, e demo.Event) ([]byte, string) {
		return edit(e.Value, func(env map[string]any) {
			setPath(env["Payload"], s.time, time.Now().Add(-time.Hour).In(time.FixedZone("", 16*3600)).Format(time.RFC3339))
		}), s.invalid
	}},
	{"a payload time in year 0000", func(s service, e demo.Event) ([]byte, string) {
		return edit(e.Value, func(env map[string]any) { setPath(env["Payload"], s.time, "0000-06-01T00:00:00Z") }), s.invalid
	}},
	{"CreatedAt 16 hours from UTC", func(s service, e demo.Event) ([]byte, string) {
		return edit(e.Value, func(env map[string]any) {
			env["CreatedAt"] = time.Now().Add(-time.Hour).In(time.FixedZone("", -16*3600)).Format(time.RFC3339)
		}), s.invalid
	}},
	{"JSON nested 20,000 deep in a payload member", func(s service, e demo.Event) ([]byte, string) {
		deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
		v := strings.Replace(string(e.Value), `"Payload":{`, `"Payload":{"Deep":`+deep+`,`, 1)
		return []byte(v), consumer.EnvelopeInvalid.Name
	}},
	{"invalid UTF-8 in a string member", func(s service, e demo.Event) ([]byte, string) {
		v := edit(e.Value, func(env map[string]any) { setPath(env["Payload"], s.text, "MARK") })
		return []byte(strings.Replace(string(v), "MARK", "\xff\xfe", 1)), consumer.EnvelopeInvalid.Name
	}},
}

func TestHostileInputEndsInTheDLQWithItsCode(t *testing.T) {
	for _, s := range services() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			cl := kafkatest.NewCluster(t, map[string]int{s.topic.Name: s.topic.Partitions, s.topic.DLQ: s.topic.Partitions})
			all := append([]hostileCase{}, cases...)
			if s.name == "messenger" {
				all = append(all, hostileCase{"10,000 active participants", func(s service, e demo.Event) ([]byte, string) {
					return edit(e.Value, func(env map[string]any) {
						var ps []map[string]any
						for range 10000 {
							ps = append(ps, map[string]any{"UserId": uuid.New(), "Role": "CoAgent"})
						}
						env["Payload"].(map[string]any)["ActiveParticipants"] = ps
					}), s.invalid
				}})
			}
			want := map[string]string{} // key → code
			names, reasons := map[string]string{}, map[string]string{}
			for _, c := range all {
				key := uuid.NewString()
				v, code := c.make(s, s.valid())
				want[key], names[key], reasons[key] = code, c.name, caseReasons[c.name]
				cl.Produce(t, s.topic.Name, kafkatest.Message{Partition: -1, Key: []byte(key), Value: v})
			}
			run := consumertest.Start(t, cl.Bootstrap, pgtest.NewDB(t), s.build, consumertest.Options{})
			got := cl.ReadAll(t, s.topic.DLQ, len(want), 60*time.Second)
			for _, m := range got {
				k := string(m.Key)
				if c := kafkatest.Header(m, consumer.HeaderErrorCode); c != want[k] {
					t.Errorf("%s: dead-lettered as %s (%s), want %s", names[k], c, kafkatest.Header(m, consumer.HeaderReason), want[k])
				}
				if r := kafkatest.Header(m, consumer.HeaderReason); !strings.Contains(r, reasons[k]) {
					t.Errorf("%s: reason %q, want it to say %q", names[k], r, reasons[k])
				}
				delete(want, k)
			}
			for k := range want {
				t.Errorf("%s: not dead-lettered", names[k])
			}
			if n := run.Counter("pin_consumer_dlq_total", map[string]string{"code": consumer.ProcessingFailed.Name}); n != 0 {
				t.Errorf("%v messages dead-lettered as %s", n, consumer.ProcessingFailed.Name)
			}
		})
	}
}

// An event time ahead of the consumer's clock (within MAX_CLOCK_SKEW) is
// applied, and the lag gauges read 0, not a negative number that no
// "lag > 5 min" alert would ever see.
func TestLagIsNeverNegative(t *testing.T) {
	t.Parallel()
	s := services()[1] // rewards: the lag of its replica's newest synced_at
	cl := kafkatest.NewCluster(t, map[string]int{s.topic.Name: s.topic.Partitions, s.topic.DLQ: s.topic.Partitions})
	ahead := time.Now().Add(time.Hour)
	e := demo.BondCreated(uuid.New(), uuid.New(), uuid.New(), 1, ahead)
	cl.Produce(t, s.topic.Name, kafkatest.Message{Partition: -1, Key: e.Key, Value: e.Value})
	run := consumertest.Start(t, cl.Bootstrap, pgtest.NewDB(t), s.build, consumertest.Options{})
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		return run.Counter("pin_consumer_messages_total", map[string]string{"outcome": "created"}) == 1
	}, "the bond created")
	if v := run.Counter(s.lagGauge, nil); v != 0 {
		t.Fatalf("%s = %v, want 0 (an event an hour ahead is no lag)", s.lagGauge, v)
	}
}

// edit decodes an envelope, changes it and encodes it again.
func edit(value []byte, fn func(map[string]any)) []byte {
	var env map[string]any
	if err := json.Unmarshal(value, &env); err != nil {
		panic(err)
	}
	fn(env)
	b, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	return b
}

// setPath sets the member at a dotted path ("ActiveParticipants.0.Role").
func setPath(v any, path string, value any) {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		last := i == len(parts)-1
		switch c := v.(type) {
		case map[string]any:
			if last {
				c[p] = value
				return
			}
			v = c[p]
		case []any:
			n, err := strconv.Atoi(p)
			if err != nil {
				panic(err)
			}
			if last {
				c[n] = value
				return
			}
			v = c[n]
		}
	}
}

// A producer decides the EventType: 10,000 distinct garbage ones must not
// grow the exported series (each is counted under "unknown", its text only
// logged).
func TestGarbageEventTypesDoNotGrowTheSeries(t *testing.T) {
	t.Parallel()
	s := services()[2] // crm
	cl := kafkatest.NewCluster(t, map[string]int{s.topic.Name: s.topic.Partitions, s.topic.DLQ: s.topic.Partitions})
	garbage := func(n int) {
		msgs := make([]kafkatest.Message, n)
		for i := range msgs {
			v := edit(s.valid().Value, func(env map[string]any) { env["EventType"] = "garbage." + uuid.NewString() })
			msgs[i] = kafkatest.Message{Partition: int32(i % s.topic.Partitions), Key: []byte(uuid.NewString()), Value: v}
		}
		cl.Produce(t, s.topic.Name, msgs...)
	}
	run := consumertest.Start(t, cl.Bootstrap, pgtest.NewDB(t), s.build, consumertest.Options{})
	skipped := func(n float64) {
		t.Helper()
		kafkatest.Eventually(t, 60*time.Second, func() bool {
			return run.Counter("pin_consumer_unknown_event_types_total", nil) == n
		}, "%v unknown event types skipped (have %v)", n, run.Counter("pin_consumer_unknown_event_types_total", nil))
	}
	garbage(10)
	skipped(10)
	// The per-partition lag comes with librdkafka's first statistics.
	kafkatest.Eventually(t, 30*time.Second, func() bool {
		n := 0
		for id := range series(t, run) {
			if strings.HasPrefix(id, "pin_consumer_lag_messages,") {
				n++
			}
		}
		return n == s.topic.Partitions
	}, "the lag of every partition exported")
	before := series(t, run)
	garbage(10000)
	skipped(10010)
	if after := series(t, run); len(after) != len(before) {
		var grown []string
		for s := range after {
			if !before[s] {
				grown = append(grown, s)
			}
		}
		t.Fatalf("exported series: %d before, %d after 10,000 garbage event types; new: %v", len(before), len(after), grown)
	}
	if n := run.Counter("pin_consumer_unknown_event_types_total", map[string]string{"event_type": consumer.UnknownEventType}); n != 10010 {
		t.Fatalf("unknown event types under %q: %v, want 10010", consumer.UnknownEventType, n)
	}
}

// series is the registry's exported series, by family and labels.
func series(t *testing.T, run *consumertest.Running) map[string]bool {
	t.Helper()
	mfs, err := run.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			id := mf.GetName()
			for _, l := range m.GetLabel() {
				id += "," + l.GetName() + "=" + l.GetValue()
			}
			out[id] = true
		}
	}
	return out
}
