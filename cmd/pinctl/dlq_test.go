package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

const (
	testSource = "pin.test.source.v1"
	testDLQ    = "pin.test.source-dlq.v1"
	testGroup  = "pin-test-group"
)

// deadLetter is a DLQ message as the runtime writes it (docs/contract.md §5).
type deadLetter struct {
	dlqPartition int32
	srcPartition int32
	srcOffset    int64
	code         string
	attempts     int
	at           time.Time
	id           uuid.UUID // MessageId; uuid.Nil: a value that is not an envelope
	key          string
	extra        map[string]string // original headers, x-replay-count, …
	noSource     bool              // without x-source-topic
	noValue      bool              // published without its value (a null value)
}

func (d deadLetter) value() []byte {
	if d.id == uuid.Nil {
		return []byte("not json at all")
	}
	b, err := json.Marshal(map[string]any{
		"MessageId": d.id.String(), "EventType": "pin.test.happened", "ContractVersion": 1,
		"CreatedAt": "2026-11-30T10:00:00Z", "Payload": map[string]any{"N": 1},
	})
	if err != nil {
		panic(err)
	}
	return b
}

func (d deadLetter) message() kafkatest.Message {
	if d.at.IsZero() {
		d.at = time.Now()
	}
	h := map[string]string{
		consumer.HeaderReason:            "the " + d.code + " reason",
		consumer.HeaderErrorCode:         d.code,
		consumer.HeaderSourceTopic:       testSource,
		consumer.HeaderOriginalPartition: strconv.Itoa(int(d.srcPartition)),
		consumer.HeaderOriginalOffset:    strconv.FormatInt(d.srcOffset, 10),
		consumer.HeaderConsumerGroup:     testGroup,
		consumer.HeaderAttempts:          strconv.Itoa(d.attempts),
		consumer.HeaderDLQAt:             d.at.UTC().Format(time.RFC3339),
	}
	if d.noSource {
		delete(h, consumer.HeaderSourceTopic)
	}
	for k, v := range d.extra {
		h[k] = v
	}
	m := kafkatest.Message{Partition: d.dlqPartition, Key: []byte(d.key), Value: d.value(), Headers: h}
	if d.noValue {
		m.Value = nil
	}
	return m
}

func newDLQCluster(t *testing.T, dls ...deadLetter) *kafkatest.Cluster {
	t.Helper()
	kc := kafkatest.NewCluster(t, map[string]int{testSource: 3, testDLQ: 3})
	for _, d := range dls {
		kc.Produce(t, testDLQ, d.message())
	}
	return kc
}

func TestDLQList(t *testing.T) {
	t.Parallel()
	a := deadLetter{dlqPartition: 0, srcPartition: 0, srcOffset: 17, code: "CODE_A", attempts: 4, at: time.Now().Add(-2 * time.Hour),
		id: uuid.New(), key: uuid.NewString(), extra: map[string]string{"x-test-origin": "a"}}
	b := deadLetter{dlqPartition: 0, srcPartition: 0, srcOffset: 18, code: consumer.EnvelopeInvalid.Name, attempts: 1, key: "k-b"}
	c := deadLetter{dlqPartition: 1, srcPartition: 1, srcOffset: 3, code: "CODE_A", attempts: 7, id: uuid.New(), key: uuid.NewString(),
		extra: map[string]string{headerReplayCount: "2", headerReplayedAt: "2026-12-01T08:00:00Z"}}
	kc := newDLQCluster(t, a, b, c)

	list := func(t *testing.T, f dlqFilter, limit int, asJSON bool) (string, int) {
		t.Helper()
		var out, sum bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := listDLQ(ctx, dlqListOptions{Brokers: kc.Bootstrap, Topic: testDLQ, Filter: f, Limit: limit, JSON: asJSON}, &out, &sum)
		if err != nil {
			t.Fatalf("listDLQ: %v", err)
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
		out, n := list(t, allDLQ(), 0, false)
		if n != 3 || strings.Join(headings(out), " ") != "p0@0 p0@1 p1@0" {
			t.Fatalf("listed %d messages %v, want p0@0 p0@1 p1@0:\n%s", n, headings(out), out)
		}
		for _, want := range []string{
			"p0@0  CODE_A  attempts 4  dead-lettered " + a.at.UTC().Format(time.RFC3339),
			"source    " + testSource + " p0@17 (group " + testGroup + ")",
			"reason    the CODE_A reason",
			"envelope  MessageId " + a.id.String() + "  EventType pin.test.happened  key " + a.key,
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
		f := allDLQ()
		f.Code = "CODE_A"
		out, _ := list(t, f, 0, false)
		if got := strings.Join(headings(out), " "); got != "p0@0 p1@0" {
			t.Fatalf("listed %s, want p0@0 p1@0", got)
		}
	})

	t.Run("--since selects by x-dlq-at", func(t *testing.T) {
		t.Parallel()
		f := allDLQ()
		since, err := parseSince("1h", time.Now())
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
		out, n := list(t, allDLQ(), 1, false)
		if n != 1 || len(headings(out)) != 1 {
			t.Fatalf("listed %d, want 1:\n%s", n, out)
		}
	})

	t.Run("--partition and --offset-range", func(t *testing.T) {
		t.Parallel()
		f := allDLQ()
		f.Partition, f.From, f.To = 0, 1, 1
		out, _ := list(t, f, 0, false)
		if got := strings.Join(headings(out), " "); got != "p0@1" {
			t.Fatalf("listed %s, want p0@1", got)
		}
	})

	t.Run("--json prints one object per line", func(t *testing.T) {
		t.Parallel()
		out, _ := list(t, allDLQ(), 0, true)
		var es []dlqEntry
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var e dlqEntry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			es = append(es, e)
		}
		if len(es) != 3 {
			t.Fatalf("%d JSON lines, want 3:\n%s", len(es), out)
		}
		e := es[0]
		if e.Code != "CODE_A" || e.Attempts == nil || *e.Attempts != 4 || e.SourceTopic != testSource ||
			e.SourcePartition == nil || *e.SourcePartition != 0 || e.SourceOffset == nil || *e.SourceOffset != 17 ||
			e.ConsumerGroup != testGroup || e.Envelope == nil || e.Envelope.MessageID != a.id.String() ||
			e.Key != a.key || e.Headers["x-test-origin"] != "a" {
			t.Errorf("first entry %+v", e)
		}
		if es[1].Envelope != nil || es[1].EnvelopeError == "" {
			t.Errorf("second entry: envelope %+v, error %q; want unreadable", es[1].Envelope, es[1].EnvelopeError)
		}
		if es[2].ReplayCount != 2 {
			t.Errorf("third entry: replay count %d, want 2", es[2].ReplayCount)
		}
	})

	t.Run("the command line", func(t *testing.T) {
		t.Parallel()
		var out, errOut bytes.Buffer
		err := dlqListCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", testDLQ, "--code", "CODE_A", "--since", "3h"}, &out, &errOut)
		if err != nil {
			t.Fatalf("dlq list: %v\n%s", err, errOut.String())
		}
		if got := strings.Join(headings(out.String()), " "); got != "p0@0 p1@0" || !strings.Contains(out.String(), "2 message(s) of "+testDLQ) {
			t.Fatalf("listed %s:\n%s", got, out.String())
		}
	})

	t.Run("an unknown topic is an error", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		_, err := listDLQ(context.Background(), dlqListOptions{Brokers: kc.Bootstrap, Topic: "pin.nope.v1", Filter: allDLQ()}, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("error %v, want the topic does not exist", err)
		}
	})
}

func TestDLQFlags(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ranges := []struct {
		in       string
		from, to int64
		bad      bool
	}{
		{"3-9", 3, 9, false}, {"3-", 3, -1, false}, {"-9", -1, 9, false}, {"4-4", 4, 4, false},
		{"9-3", 0, 0, true}, {"-", 0, 0, true}, {"x-1", 0, 0, true}, {"5", 0, 0, true},
	}
	for _, r := range ranges {
		from, to, err := parseOffsetRange(r.in)
		if (err != nil) != r.bad || (!r.bad && (from != r.from || to != r.to)) {
			t.Errorf("parseOffsetRange(%q) = %d, %d, %v", r.in, from, to, err)
		}
	}
	if got, err := parseSince("90m", now); err != nil || !got.Equal(now.Add(-90*time.Minute)) {
		t.Errorf("parseSince(90m) = %v, %v", got, err)
	}
	if got, err := parseSince("2026-11-30T10:00:00Z", now); err != nil || !got.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("parseSince(RFC 3339) = %v, %v", got, err)
	}
	for _, bad := range []string{"yesterday", "-1h", "0s"} {
		if _, err := parseSince(bad, now); err == nil {
			t.Errorf("parseSince(%q) accepted", bad)
		}
	}
	for _, args := range [][]string{
		{"--brokers", "b"},                                    // no topic
		{"--topic", "t", "--brokers", ""},                     // no brokers
		{"--brokers", "b", "--topic", "t", "--since", "soon"}, // bad since
		{"--brokers", "b", "--topic", "t", "--max-replays", "0"},
		{"--brokers", "b", "--topic", "t", "--offset-range", "7"},
		{"--brokers", "b", "--topic", "t"}, // no --yes, stdin not a terminal
	} {
		err := dlqReplayCmd(context.Background(), args, strings.NewReader("y\n"), new(bytes.Buffer), new(bytes.Buffer))
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("dlq replay %q: error %v, want a usage error", args, err)
		}
	}
}

// readSource reads the n messages of the source topic (failing if there
// are more or fewer).
func readSource(t *testing.T, kc *kafkatest.Cluster, n int) []*kafka.Message {
	t.Helper()
	if got := kc.Count(t, testSource); got != n {
		t.Fatalf("source topic holds %d messages, want %d", got, n)
	}
	if n == 0 {
		return nil
	}
	ms := kc.ReadAll(t, testSource, n, 30*time.Second)
	if len(ms) != n {
		t.Fatalf("read %d messages of the source topic, want %d", len(ms), n)
	}
	return ms
}

func replay(t *testing.T, kc *kafkatest.Cluster, o dlqReplayOptions) (replayCounts, string, error) {
	t.Helper()
	o.Brokers, o.Topic = kc.Bootstrap, testDLQ
	if o.MaxReplays == 0 {
		o.MaxReplays = 3
	}
	if o.Filter == (dlqFilter{}) {
		o.Filter = allDLQ()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var out bytes.Buffer
	c, err := replayDLQ(ctx, o, &out, nil)
	return c, out.String(), err
}

func TestDLQReplay(t *testing.T) {
	t.Parallel()

	t.Run("to the source topic and original partition, with the original key, value and headers", func(t *testing.T) {
		t.Parallel()
		d := deadLetter{dlqPartition: 1, srcPartition: 2, srcOffset: 40, code: "CODE_A", attempts: 4, id: uuid.New(), key: uuid.NewString(),
			extra: map[string]string{"x-test-origin": "a", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
		kc := newDLQCluster(t, d)
		at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
		c, out, err := replay(t, kc, dlqReplayOptions{Now: func() time.Time { return at }})
		if err != nil || c != (replayCounts{Selected: 1, Replayed: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		m := readSource(t, kc, 1)[0]
		want := d.message()
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
			"traceparent":     d.extra["traceparent"],
			headerReplayCount: "1",
			headerReplayedAt:  "2026-12-01T09:30:00Z",
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
		once := deadLetter{dlqPartition: 0, srcPartition: 1, code: "CODE_A", id: uuid.New(), key: "once", extra: map[string]string{headerReplayCount: "1"}}
		spent := deadLetter{dlqPartition: 0, srcPartition: 1, code: "CODE_A", id: uuid.New(), key: "spent", extra: map[string]string{headerReplayCount: "3"}}
		kc := newDLQCluster(t, once, spent)
		c, out, err := replay(t, kc, dlqReplayOptions{MaxReplays: 3})
		if err != nil || c != (replayCounts{Selected: 2, Replayed: 1, Refused: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		if !strings.Contains(out, "refused  p0@1 CODE_A") || !strings.Contains(out, "replayed 3 time(s) already") {
			t.Errorf("output does not name the refused message:\n%s", out)
		}
		m := readSource(t, kc, 1)[0]
		if string(m.Key) != "once" || kafkatest.Header(m, headerReplayCount) != "2" {
			t.Fatalf("replayed %q with x-replay-count %q, want once with 2", m.Key, kafkatest.Header(m, headerReplayCount))
		}
		// With a higher limit the spent one goes too.
		c, out, err = replay(t, kc, dlqReplayOptions{MaxReplays: 4, Filter: dlqFilter{Partition: 0, From: 1, To: 1}})
		if err != nil || c != (replayCounts{Selected: 1, Replayed: 1}) {
			t.Fatalf("replay with --max-replays 4: %v, %v\n%s", c, err, out)
		}
		if ms := readSource(t, kc, 2); kafkatest.Header(ms[1], headerReplayCount) != "4" {
			t.Fatalf("x-replay-count %q, want 4", kafkatest.Header(ms[1], headerReplayCount))
		}
	})

	t.Run("a dead letter without its value is refused, never produced, and the others go on", func(t *testing.T) {
		t.Parallel()
		// As the runtime publishes a dead letter too large for the DLQ: no
		// value, x-dlq-value-omitted holding the original size.
		omitted := deadLetter{dlqPartition: 0, srcPartition: 2, srcOffset: 40, code: "CODE_A", attempts: 7, id: uuid.New(), key: "too large",
			noValue: true, extra: map[string]string{consumer.HeaderValueOmitted: "2097152"}}
		fine := deadLetter{dlqPartition: 0, srcPartition: 1, srcOffset: 41, code: "CODE_A", attempts: 7, id: uuid.New(), key: "fine"}
		kc := newDLQCluster(t, omitted, fine)
		c, out, err := replay(t, kc, dlqReplayOptions{})
		if err != nil || c != (replayCounts{Selected: 2, Replayed: 1, Refused: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		var refused []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "refused") {
				refused = append(refused, l)
			}
		}
		if len(refused) != 1 {
			t.Fatalf("%d refused lines, want 1:\n%s", len(refused), out)
		}
		for _, want := range []string{
			"refused  p0@0 CODE_A", "key too large",
			consumer.HeaderValueOmitted + ": 2097152 bytes", "tombstone",
			testSource + " partition 2 offset 40",
			"kcat -C -b " + kc.Bootstrap + " -t " + testSource + " -p 2 -o 40 -c 1",
		} {
			if !strings.Contains(refused[0], want) {
				t.Errorf("the refused line lacks %q:\n%s", want, refused[0])
			}
		}
		// The source topic got the other one only: nothing on partition 2.
		m := readSource(t, kc, 1)[0]
		if string(m.Key) != "fine" || m.TopicPartition.Partition != 1 || !bytes.Equal(m.Value, fine.value()) {
			t.Fatalf("replayed %q to partition %d, want fine to partition 1", m.Key, m.TopicPartition.Partition)
		}

		// A dry run refuses it too; the command line counts it and exits 0
		// (a refusal is not a failure).
		c, out, err = replay(t, kc, dlqReplayOptions{DryRun: true})
		if err != nil || c != (replayCounts{Selected: 2, Replayed: 1, Refused: 1}) || !strings.Contains(out, "refused  p0@0") {
			t.Fatalf("dry run: %v, %v\n%s", c, err, out)
		}
		var cmdOut bytes.Buffer
		if err := dlqReplayCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", testDLQ, "--offset-range", "0-0", "--yes"},
			strings.NewReader(""), &cmdOut, &cmdOut); err != nil {
			t.Fatalf("dlq replay: %v\n%s", err, cmdOut.String())
		}
		if !strings.Contains(cmdOut.String(), "selected 1, replayed 0, refused 1, failed 0") {
			t.Errorf("counts:\n%s", cmdOut.String())
		}
		readSource(t, kc, 1)
	})

	t.Run("a dead letter with no value at all is refused; headers that do not say where its original is give no command", func(t *testing.T) {
		t.Parallel()
		bare := deadLetter{dlqPartition: 1, srcPartition: 0, srcOffset: 9, code: "CODE_A", id: uuid.New(), key: "bare", noValue: true,
			extra: map[string]string{consumer.HeaderOriginalOffset: "9; rm -rf ~"}}
		kc := newDLQCluster(t, bare)
		c, out, err := replay(t, kc, dlqReplayOptions{})
		if err != nil || c != (replayCounts{Selected: 1, Refused: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		if !strings.Contains(out, "refused  p1@0 CODE_A") || !strings.Contains(out, "it has no value") ||
			!strings.Contains(out, `x-original-offset "9; rm -rf ~"`) || strings.Contains(out, "kcat") {
			t.Errorf("refused line:\n%s", out)
		}
		readSource(t, kc, 0)
	})

	t.Run("confirmation: --yes produces without a question; without a terminal and --yes nothing is produced; a dry run needs none", func(t *testing.T) {
		t.Parallel()
		d := deadLetter{dlqPartition: 1, srcPartition: 0, srcOffset: 3, code: "CODE_A", id: uuid.New(), key: "k"}
		kc := newDLQCluster(t, d, d)
		cmd := func(stdin string, args ...string) (string, error) {
			var out bytes.Buffer
			err := dlqReplayCmd(context.Background(), append([]string{"--brokers", kc.Bootstrap, "--topic", testDLQ}, args...),
				strings.NewReader(stdin), &out, &out)
			return out.String(), err
		}

		// A script (stdin not a terminal) that does not say --yes: refused
		// before anything is read or produced, even with "y" on stdin.
		out, err := cmd("y\n")
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--yes") {
			t.Fatalf("dlq replay without --yes, stdin not a terminal: error %v, want a usage error naming --yes\n%s", err, out)
		}
		readSource(t, kc, 0)

		out, err = cmd("", "--dry-run")
		if err != nil || strings.Contains(out, "[y/N]") || !strings.Contains(out, "would replay 2") {
			t.Fatalf("dlq replay --dry-run: %v\n%s", err, out)
		}
		readSource(t, kc, 0)

		// A Confirm that says no: nothing produced.
		no := func() (bool, error) { return false, nil }
		c, out, err := replay(t, kc, dlqReplayOptions{Confirm: no})
		if err == nil || !strings.Contains(err.Error(), "not confirmed") || c.Replayed != 0 ||
			!strings.Contains(out, "replay 2 message(s) from "+testDLQ+" to "+testSource+" partition 0\n") {
			t.Fatalf("replay not confirmed: %v, %v\n%s", c, err, out)
		}
		readSource(t, kc, 0)

		out, err = cmd("", "--yes")
		if err != nil || strings.Contains(out, "[y/N]") || !strings.Contains(out, "replay 2 message(s) from "+testDLQ+" to "+testSource+" partition 0") ||
			!strings.Contains(out, "selected 2, replayed 2, refused 0, failed 0") {
			t.Fatalf("dlq replay --yes: %v\n%s", err, out)
		}
		readSource(t, kc, 2)
	})

	t.Run("a dry run produces nothing", func(t *testing.T) {
		t.Parallel()
		d := deadLetter{dlqPartition: 2, srcPartition: 2, srcOffset: 5, code: "CODE_A", id: uuid.New(), key: "k"}
		kc := newDLQCluster(t, d, d)
		c, out, err := replay(t, kc, dlqReplayOptions{DryRun: true})
		if err != nil || c != (replayCounts{Selected: 2, Replayed: 2}) {
			t.Fatalf("dry run: %v, %v\n%s", c, err, out)
		}
		if n := strings.Count(out, "would replay p2@"); n != 2 || !strings.Contains(out, "→ "+testSource+" p2") {
			t.Errorf("dry run output:\n%s", out)
		}
		readSource(t, kc, 0)
	})

	t.Run("--code, --partition and --offset-range select", func(t *testing.T) {
		t.Parallel()
		var dls []deadLetter
		for i := range 5 {
			dls = append(dls, deadLetter{dlqPartition: 0, srcPartition: 0, code: "CODE_A", id: uuid.New(), key: fmt.Sprint("a", i)})
		}
		dls = append(dls,
			deadLetter{dlqPartition: 0, srcPartition: 0, code: "CODE_B", id: uuid.New(), key: "b5"},
			deadLetter{dlqPartition: 1, srcPartition: 1, code: "CODE_A", id: uuid.New(), key: "other partition"})
		kc := newDLQCluster(t, dls...)
		f := dlqFilter{Code: "CODE_A", Partition: 0, From: 2, To: 5}
		c, out, err := replay(t, kc, dlqReplayOptions{Filter: f})
		if err != nil || c != (replayCounts{Selected: 3, Replayed: 3}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		var keys []string
		for _, m := range readSource(t, kc, 3) {
			keys = append(keys, string(m.Key))
		}
		if strings.Join(keys, " ") != "a2 a3 a4" {
			t.Fatalf("replayed %v, want a2 a3 a4 in order", keys)
		}
	})

	t.Run("a failed delivery or a message without its source is counted and the command fails", func(t *testing.T) {
		t.Parallel()
		kc := newDLQCluster(t,
			deadLetter{dlqPartition: 0, srcPartition: 0, code: "CODE_A", id: uuid.New(), key: "fine"},
			deadLetter{dlqPartition: 0, srcPartition: 7, code: "CODE_A", id: uuid.New(), key: "no such partition"},
			deadLetter{dlqPartition: 0, srcPartition: 0, code: "CODE_A", id: uuid.New(), key: "no source", noSource: true})
		var out, errOut bytes.Buffer
		err := dlqReplayCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", testDLQ, "--timeout", "5s", "--yes"},
			strings.NewReader(""), &out, &errOut)
		if err == nil || exitCode(new(bytes.Buffer), err) != 1 {
			t.Fatalf("dlq replay: error %v, want exit 1\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "selected 3, replayed 1, refused 0, failed 2") {
			t.Errorf("counts missing:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "no x-source-topic header") {
			t.Errorf("the message without a source is not named:\n%s", out.String())
		}
		if m := readSource(t, kc, 1)[0]; string(m.Key) != "fine" {
			t.Errorf("replayed %q, want fine", m.Key)
		}
	})
}

// assertPrintable fails unless out is valid UTF-8 whose every character
// but the newline is printable (strconv.IsPrint): no ESC, CR, NUL, DEL,
// C1 control, bidi override or invalid byte from a message reaches the
// terminal.
func assertPrintable(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8 in the output:\n%q", what, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if i := strings.IndexFunc(l, func(r rune) bool { return !strconv.IsPrint(r) }); i >= 0 {
			t.Errorf("%s: raw %U in line %q", what, []rune(l[i:])[0], l)
		}
	}
}

// A hostile dead letter (escape sequences, CR, LF, NUL, C1 controls, a bidi
// override and invalid UTF-8 in its key, value and headers) cannot reach
// the operator's terminal through dlq list or dlq replay: every field is
// escaped and every message keeps to its own lines.
func TestDLQOutputEscapesMessageContents(t *testing.T) {
	t.Parallel()
	const (
		key       = "k\x1b[2J\x1b[H\rforged p9@9\nline\x00\xff\xfe"
		eventType = "evil\x1b[31m\r\nforged\u009b2J\u202e"
		code      = "CODE\x1b]0;pwned\x07"
		reason    = "reason\r\nforged p9@9  CODE_A\x1b[1A\x00"
		evilKey   = "x-evil\x1b[2J"
		evilValue = "\u202eevil\n"
	)
	value, err := json.Marshal(map[string]any{"MessageId": uuid.NewString(), "EventType": eventType, "ContractVersion": 1,
		"CreatedAt": "2026-11-30T10:00:00Z", "Payload": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	kc := kafkatest.NewCluster(t, map[string]int{testSource: 3, testDLQ: 3})
	kc.Produce(t, testDLQ,
		kafkatest.Message{Partition: 0, Key: []byte(key), Value: value, Headers: map[string]string{
			consumer.HeaderErrorCode: code, consumer.HeaderReason: reason, consumer.HeaderDLQAt: "\x9b31m\xff",
			consumer.HeaderConsumerGroup: "g\x00\x1b[2K", consumer.HeaderSourceTopic: "pin\x1b[K.topic",
			consumer.HeaderOriginalPartition: "0", consumer.HeaderOriginalOffset: "1",
			headerReplayCount: "1", headerReplayedAt: "\x1b[5m2026\r", evilKey: evilValue,
		}},
		// An unreadable envelope whose error quotes raw JSON with CR LF in it.
		kafkatest.Message{Partition: 0, Value: []byte("{\"MessageId\": [1,\r\n2]}"), Headers: map[string]string{
			consumer.HeaderErrorCode: "CODE_B\r\n", consumer.HeaderSourceTopic: testSource,
			consumer.HeaderOriginalPartition: "0", consumer.HeaderOriginalOffset: "2",
		}},
		// Without its value, with hostile headers where the original is.
		kafkatest.Message{Partition: 0, Key: []byte("\x1b[2Komitted"), Headers: map[string]string{
			consumer.HeaderErrorCode: "CODE_C", consumer.HeaderValueOmitted: "12\x1b[2J", consumer.HeaderSourceTopic: testSource,
			consumer.HeaderOriginalPartition: "1", consumer.HeaderOriginalOffset: "5\r\nforged",
		}})
	list := func(t *testing.T, asJSON bool) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		var out, sum bytes.Buffer
		n, err := listDLQ(ctx, dlqListOptions{Brokers: kc.Bootstrap, Topic: testDLQ, Filter: allDLQ(), JSON: asJSON}, &out, &sum)
		if err != nil || n != 3 {
			t.Fatalf("dlq list (JSON %v): %d, %v\n%s", asJSON, n, err, out.String())
		}
		if !asJSON {
			out.Write(sum.Bytes())
		}
		return out.String()
	}

	t.Run("dlq list", func(t *testing.T) {
		t.Parallel()
		out := list(t, false)
		assertPrintable(t, "dlq list", out)
		// Each message: a heading, then indented lines of known labels, a
		// blank line between two; the last line is the count.
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		var headings []string
		for _, l := range lines[:len(lines)-1] {
			switch {
			case l == "":
			case strings.HasPrefix(l, "p0@"):
				headings = append(headings, strings.Fields(l)[0])
			case strings.HasPrefix(l, "    source    "), strings.HasPrefix(l, "    reason    "),
				strings.HasPrefix(l, "    envelope  "), strings.HasPrefix(l, "    replayed  "):
			default:
				t.Errorf("a line of no message's: %q", l)
			}
		}
		if strings.Join(headings, " ") != "p0@0 p0@1 p0@2" || len(lines) != 5+4+4+2+1 || lines[len(lines)-1] != "3 message(s) of "+testDLQ {
			t.Errorf("headings %v in %d lines, want p0@0 p0@1 p0@2 in 16:\n%s", headings, len(lines), out)
		}
		for _, want := range []string{
			"p0@0  " + strconv.Quote(code) + "  attempts -  dead-lettered " + strconv.Quote("\x9b31m\xff"),
			"source    " + strconv.Quote("pin\x1b[K.topic") + " p0@1 (group " + strconv.Quote("g\x00\x1b[2K") + ")",
			"reason    " + strconv.Quote("reason forged p9@9 CODE_A\x1b[1A\x00"),
			"EventType " + strconv.Quote(eventType) + "  key " + strconv.Quote(key),
			"replayed  1 time(s), last at " + strconv.Quote("\x1b[5m2026\r"),
			"p0@1  " + strconv.Quote("CODE_B\r\n"),
			`unreadable envelope ("EVENT_ENVELOPE_INVALID: MessageId [1,\r\n2] is not a UUID string")  key ` + "\n",
			"value left out of the DLQ (x-dlq-value-omitted: " + strconv.Quote("12\x1b[2J") + " bytes)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %s:\n%s", want, out)
			}
		}
	})

	t.Run("dlq list --json", func(t *testing.T) {
		t.Parallel()
		out := list(t, true)
		assertPrintable(t, "dlq list --json", out)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d lines, want one per message:\n%s", len(lines), out)
		}
		var e dlqEntry
		if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
			t.Fatalf("line %q: %v", lines[0], err)
		}
		// Escaped, not lost: the valid UTF-8 reads back as it was.
		if e.Code != code || e.Reason != reason || e.Headers[evilKey] != evilValue || e.Envelope == nil || e.Envelope.EventType != eventType {
			t.Errorf("read back %+v", e)
		}
		for _, l := range lines[1:] {
			if err := json.Unmarshal([]byte(l), new(dlqEntry)); err != nil {
				t.Errorf("line %q: %v", l, err)
			}
		}
	})

	t.Run("dlq replay", func(t *testing.T) {
		t.Parallel()
		c, out, err := replay(t, kc, dlqReplayOptions{DryRun: true})
		if err != nil || c != (replayCounts{Selected: 3, Replayed: 2, Refused: 1}) {
			t.Fatalf("dry run: %v, %v\n%s", c, err, out)
		}
		assertPrintable(t, "dlq replay", out)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "would replay p0@0 ") || !strings.HasPrefix(lines[1], "would replay p0@1 ") ||
			!strings.HasPrefix(lines[2], "refused  p0@2 ") {
			t.Fatalf("want one line per message:\n%s", out)
		}
		for _, want := range []string{
			"→ " + strconv.Quote("pin\x1b[K.topic") + " p0", "key " + strconv.Quote(key),
			`x-original-offset "5\r\nforged"`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %s:\n%s", want, out)
			}
		}
		if strings.Contains(out, "kcat") {
			t.Errorf("a command line from headers that do not make one:\n%s", out)
		}
	})
}
