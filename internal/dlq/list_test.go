package dlq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/internal/dlq/dlqtest"
)

func TestList(t *testing.T) {
	t.Parallel()
	a := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, SrcOffset: 17, Code: "CODE_A", Attempts: 4, At: time.Now().Add(-2 * time.Hour),
		ID: uuid.New(), Key: uuid.NewString(), Extra: map[string]string{"x-test-origin": "a"}}
	b := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, SrcOffset: 18, Code: consumer.EnvelopeInvalid.Name, Attempts: 1, Key: "k-b"}
	c := dlqtest.DeadLetter{DLQPartition: 1, SrcPartition: 1, SrcOffset: 3, Code: "CODE_A", Attempts: 7, ID: uuid.New(), Key: uuid.NewString(),
		Extra: map[string]string{HeaderReplayCount: "2", HeaderReplayedAt: "2026-12-01T08:00:00Z"}}
	kc := dlqtest.NewCluster(t, a, b, c)

	list := func(t *testing.T, f Filter, limit int, asJSON bool) (string, int) {
		t.Helper()
		var out, sum bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := List(ctx, ListOptions{Brokers: kc.Bootstrap, Topic: dlqtest.DLQ, Filter: f, Limit: limit, JSON: asJSON}, &out, &sum)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if !strings.HasPrefix(sum.String(), strconv.Itoa(n)+" message(s)") {
			t.Errorf("summary %q, want the count %d", sum.String(), n)
		}
		return out.String(), n
	}
	headings := func(out string) []string {
		var hs []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "p") {
				hs = append(hs, strings.Fields(l)[0])
			}
		}
		return hs
	}

	t.Run("every message with its headers and envelope, to the high watermarks", func(t *testing.T) {
		t.Parallel()
		out, n := list(t, All(), 0, false)
		if n != 3 || strings.Join(headings(out), " ") != "p0@0 p0@1 p1@0" {
			t.Fatalf("listed %d messages %v, want p0@0 p0@1 p1@0:\n%s", n, headings(out), out)
		}
		for _, want := range []string{
			"p0@0  CODE_A  attempts 4  dead-lettered " + a.At.UTC().Format(time.RFC3339),
			"source    " + dlqtest.Source + " p0@17 (group " + dlqtest.Group + ")",
			"reason    the CODE_A reason",
			"envelope  MessageId " + a.ID.String() + "  EventType pin.test.happened  key " + a.Key,
			"p0@1  EVENT_ENVELOPE_INVALID  attempts 1",
			"envelope  unreadable envelope (",
			"key k-b",
			"p1@0  CODE_A  attempts 7",
			"replayed  2 time(s), last at 2026-12-01T08:00:00Z",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("--code selects one error code", func(t *testing.T) {
		t.Parallel()
		f := All()
		f.Code = "CODE_A"
		out, _ := list(t, f, 0, false)
		if got := strings.Join(headings(out), " "); got != "p0@0 p1@0" {
			t.Fatalf("listed %s, want p0@0 p1@0", got)
		}
	})

	t.Run("--since selects by x-dlq-at", func(t *testing.T) {
		t.Parallel()
		f := All()
		since, err := ParseSince("1h", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		f.Since = since
		out, _ := list(t, f, 0, false)
		if got := strings.Join(headings(out), " "); got != "p0@1 p1@0" {
			t.Fatalf("listed %s, want p0@1 p1@0 (p0@0 is 2 h old)", got)
		}
	})

	t.Run("--limit stops early", func(t *testing.T) {
		t.Parallel()
		out, n := list(t, All(), 1, false)
		if n != 1 || len(headings(out)) != 1 {
			t.Fatalf("listed %d, want 1:\n%s", n, out)
		}
	})

	t.Run("--partition and --offset-range", func(t *testing.T) {
		t.Parallel()
		f := All()
		f.Partition, f.From, f.To = 0, 1, 1
		out, _ := list(t, f, 0, false)
		if got := strings.Join(headings(out), " "); got != "p0@1" {
			t.Fatalf("listed %s, want p0@1", got)
		}
	})

	t.Run("--json prints one object per line", func(t *testing.T) {
		t.Parallel()
		out, _ := list(t, All(), 0, true)
		var es []entry
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var e entry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			es = append(es, e)
		}
		if len(es) != 3 {
			t.Fatalf("%d JSON lines, want 3:\n%s", len(es), out)
		}
		e := es[0]
		if e.Code != "CODE_A" || e.Attempts == nil || *e.Attempts != 4 || e.SourceTopic != dlqtest.Source ||
			e.SourcePartition == nil || *e.SourcePartition != 0 || e.SourceOffset == nil || *e.SourceOffset != 17 ||
			e.ConsumerGroup != dlqtest.Group || e.Envelope == nil || e.Envelope.MessageID != a.ID.String() ||
			e.Key != a.Key || e.Headers["x-test-origin"] != "a" {
			t.Errorf("first entry %+v", e)
		}
		if es[1].Envelope != nil || es[1].EnvelopeError == "" {
			t.Errorf("second entry: envelope %+v, error %q; want unreadable", es[1].Envelope, es[1].EnvelopeError)
		}
		if es[2].ReplayCount != 2 {
			t.Errorf("third entry: replay count %d, want 2", es[2].ReplayCount)
		}
	})

	t.Run("an unknown topic is an error", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		_, err := List(context.Background(), ListOptions{Brokers: kc.Bootstrap, Topic: "pin.nope.v1", Filter: All()}, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("error %v, want the topic does not exist", err)
		}
	})
}
