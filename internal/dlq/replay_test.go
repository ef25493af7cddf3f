package dlq

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/dlq/dlqtest"
)

func replay(t *testing.T, kc *kafkatest.Cluster, o ReplayOptions) (Counts, string, error) {
	t.Helper()
	o.Brokers, o.Topic = kc.Bootstrap, dlqtest.DLQ
	if o.MaxReplays == 0 {
		o.MaxReplays = 3
	}
	if o.Filter == (Filter{}) {
		o.Filter = All()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var out bytes.Buffer
	c, err := Replay(ctx, o, &out)
	return c, out.String(), err
}

func TestReplay(t *testing.T) {
	t.Parallel()

	t.Run("to the source topic and original partition, with the original key, value and headers", func(t *testing.T) {
		t.Parallel()
		d := dlqtest.DeadLetter{DLQPartition: 1, SrcPartition: 2, SrcOffset: 40, Code: "CODE_A", Attempts: 4, ID: uuid.New(), Key: uuid.NewString(),
			Extra: map[string]string{"x-test-origin": "a", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
		kc := dlqtest.NewCluster(t, d)
		at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
		c, out, err := replay(t, kc, ReplayOptions{Now: func() time.Time { return at }})
		if err != nil || c != (Counts{Selected: 1, Replayed: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		m := dlqtest.ReadSource(t, kc, 1)[0]
		want := d.Message()
		if m.TopicPartition.Partition != 2 || !bytes.Equal(m.Key, want.Key) || !bytes.Equal(m.Value, want.Value) {
			t.Fatalf("replayed to partition %d with key %q value %s; want partition 2, the original key and value",
				m.TopicPartition.Partition, m.Key, m.Value)
		}
		got := map[string]string{}
		for _, h := range m.Headers {
			if _, dup := got[h.Key]; dup {
				t.Errorf("header %s twice", h.Key)
			}
			got[h.Key] = string(h.Value)
		}
		wantHeaders := map[string]string{
			"x-test-origin":   "a",
			"traceparent":     d.Extra["traceparent"],
			HeaderReplayCount: "1",
			HeaderReplayedAt:  "2026-12-01T09:30:00Z",
		}
		if len(got) != len(wantHeaders) {
			t.Errorf("headers %v, want exactly %v", got, wantHeaders)
		}
		for k, v := range wantHeaders {
			if got[k] != v {
				t.Errorf("header %s = %q, want %q", k, got[k], v)
			}
		}
	})

	t.Run("x-replay-count goes up by one; past --max-replays the message is refused", func(t *testing.T) {
		t.Parallel()
		once := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 1, Code: "CODE_A", ID: uuid.New(), Key: "once", Extra: map[string]string{HeaderReplayCount: "1"}}
		spent := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 1, Code: "CODE_A", ID: uuid.New(), Key: "spent", Extra: map[string]string{HeaderReplayCount: "3"}}
		kc := dlqtest.NewCluster(t, once, spent)
		c, out, err := replay(t, kc, ReplayOptions{MaxReplays: 3})
		if err != nil || c != (Counts{Selected: 2, Replayed: 1, Refused: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		if !strings.Contains(out, "refused  p0@1 CODE_A") || !strings.Contains(out, "replayed 3 time(s) already") {
			t.Errorf("output does not name the refused message:\n%s", out)
		}
		m := dlqtest.ReadSource(t, kc, 1)[0]
		if string(m.Key) != "once" || kafkatest.Header(m, HeaderReplayCount) != "2" {
			t.Fatalf("replayed %q with x-replay-count %q, want once with 2", m.Key, kafkatest.Header(m, HeaderReplayCount))
		}
		// With a higher limit the spent one goes too.
		c, out, err = replay(t, kc, ReplayOptions{MaxReplays: 4, Filter: Filter{Partition: 0, From: 1, To: 1}})
		if err != nil || c != (Counts{Selected: 1, Replayed: 1}) {
			t.Fatalf("replay with --max-replays 4: %v, %v\n%s", c, err, out)
		}
		if ms := dlqtest.ReadSource(t, kc, 2); kafkatest.Header(ms[1], HeaderReplayCount) != "4" {
			t.Fatalf("x-replay-count %q, want 4", kafkatest.Header(ms[1], HeaderReplayCount))
		}
	})

	t.Run("a dead letter with no value at all is refused; headers that do not say where its original is give no command", func(t *testing.T) {
		t.Parallel()
		bare := dlqtest.DeadLetter{DLQPartition: 1, SrcPartition: 0, SrcOffset: 9, Code: "CODE_A", ID: uuid.New(), Key: "bare", NoValue: true,
			Extra: map[string]string{consumer.HeaderOriginalOffset: "9; rm -rf ~"}}
		kc := dlqtest.NewCluster(t, bare)
		c, out, err := replay(t, kc, ReplayOptions{})
		if err != nil || c != (Counts{Selected: 1, Refused: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		if !strings.Contains(out, "refused  p1@0 CODE_A") || !strings.Contains(out, "it has no value") ||
			!strings.Contains(out, `x-original-offset "9; rm -rf ~"`) || strings.Contains(out, "kcat") {
			t.Errorf("refused line:\n%s", out)
		}
		dlqtest.ReadSource(t, kc, 0)
	})

	t.Run("a dry run produces nothing", func(t *testing.T) {
		t.Parallel()
		d := dlqtest.DeadLetter{DLQPartition: 2, SrcPartition: 2, SrcOffset: 5, Code: "CODE_A", ID: uuid.New(), Key: "k"}
		kc := dlqtest.NewCluster(t, d, d)
		c, out, err := replay(t, kc, ReplayOptions{DryRun: true})
		if err != nil || c != (Counts{Selected: 2, Replayed: 2}) {
			t.Fatalf("dry run: %v, %v\n%s", c, err, out)
		}
		if n := strings.Count(out, "would replay p2@"); n != 2 || !strings.Contains(out, "→ "+dlqtest.Source+" p2") {
			t.Errorf("dry run output:\n%s", out)
		}
		dlqtest.ReadSource(t, kc, 0)
	})

	t.Run("--code, --partition and --offset-range select", func(t *testing.T) {
		t.Parallel()
		var dls []dlqtest.DeadLetter
		for i := range 5 {
			dls = append(dls, dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, Code: "CODE_A", ID: uuid.New(), Key: fmt.Sprint("a", i)})
		}
		dls = append(dls,
			dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, Code: "CODE_B", ID: uuid.New(), Key: "b5"},
			dlqtest.DeadLetter{DLQPartition: 1, SrcPartition: 1, Code: "CODE_A", ID: uuid.New(), Key: "other partition"})
		kc := dlqtest.NewCluster(t, dls...)
		f := Filter{Code: "CODE_A", Partition: 0, From: 2, To: 5}
		c, out, err := replay(t, kc, ReplayOptions{Filter: f})
		if err != nil || c != (Counts{Selected: 3, Replayed: 3}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		var keys []string
		for _, m := range dlqtest.ReadSource(t, kc, 3) {
			keys = append(keys, string(m.Key))
		}
		if strings.Join(keys, " ") != "a2 a3 a4" {
			t.Fatalf("replayed %v, want a2 a3 a4 in order", keys)
		}
	})

}

// A DLQ larger than the bound of messages a replay holds replays fully,
// each message once and in order, without ever holding more than the
// bound: the replay streams.
func TestReplayStreamsWithinItsBound(t *testing.T) {
	t.Parallel()
	const n, bound = 60, 7
	var dls []dlqtest.DeadLetter
	for i := range n {
		dls = append(dls, dlqtest.DeadLetter{DLQPartition: int32(i % 3), SrcPartition: int32(i % 3), SrcOffset: int64(i),
			Code: "CODE_A", ID: uuid.New(), Key: fmt.Sprint("k", i)})
	}
	kc := dlqtest.NewCluster(t, dls...)
	peak := 0
	c, out, err := replay(t, kc, ReplayOptions{InFlight: bound, held: func(held int) { peak = max(peak, held) }})
	if err != nil || c != (Counts{Selected: n, Replayed: n}) {
		t.Fatalf("replay: %v, %v\n%s", c, err, out)
	}
	if peak > bound || peak == 0 {
		t.Errorf("the replay held up to %d messages at once, want between 1 and %d", peak, bound)
	}
	seen := map[string]int{}
	last := map[int32]int{}
	for _, m := range dlqtest.ReadSource(t, kc, n) {
		k := string(m.Key)
		seen[k]++
		var i int
		if _, err := fmt.Sscanf(k, "k%d", &i); err != nil {
			t.Fatalf("replayed a message with key %q", k)
		}
		if p := m.TopicPartition.Partition; i < last[p] {
			t.Errorf("partition %d: %s after k%d, out of order", p, k, last[p])
		} else {
			last[p] = i
		}
	}
	for i := range n {
		if k := fmt.Sprint("k", i); seen[k] != 1 {
			t.Errorf("%s replayed %d times, want once", k, seen[k])
		}
	}
}
