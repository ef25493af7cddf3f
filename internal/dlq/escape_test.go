package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/dlq/dlqtest"
)

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
func TestOutputEscapesMessageContents(t *testing.T) {
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
	kc := kafkatest.NewCluster(t, map[string]int{dlqtest.Source: 3, dlqtest.DLQ: 3})
	kc.Produce(t, dlqtest.DLQ,
		kafkatest.Message{Partition: 0, Key: []byte(key), Value: value, Headers: map[string]string{
			consumer.HeaderErrorCode: code, consumer.HeaderReason: reason, consumer.HeaderDLQAt: "\x9b31m\xff",
			consumer.HeaderConsumerGroup: "g\x00\x1b[2K", consumer.HeaderSourceTopic: "pin\x1b[K.topic",
			consumer.HeaderOriginalPartition: "0", consumer.HeaderOriginalOffset: "1",
			HeaderReplayCount: "1", HeaderReplayedAt: "\x1b[5m2026\r", evilKey: evilValue,
		}},
		// An unreadable envelope whose error quotes raw JSON with CR LF in it.
		kafkatest.Message{Partition: 0, Value: []byte("{\"MessageId\": [1,\r\n2]}"), Headers: map[string]string{
			consumer.HeaderErrorCode: "CODE_B\r\n", consumer.HeaderSourceTopic: dlqtest.Source,
			consumer.HeaderOriginalPartition: "0", consumer.HeaderOriginalOffset: "2",
		}},
		// Without its value, with hostile headers where the original is.
		kafkatest.Message{Partition: 0, Key: []byte("\x1b[2Komitted"), Headers: map[string]string{
			consumer.HeaderErrorCode: "CODE_C", consumer.HeaderValueOmitted: "12\x1b[2J", consumer.HeaderSourceTopic: dlqtest.Source,
			consumer.HeaderOriginalPartition: "1", consumer.HeaderOriginalOffset: "5\r\nforged",
		}})
	list := func(t *testing.T, asJSON bool) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		var out, sum bytes.Buffer
		n, err := List(ctx, ListOptions{Brokers: kc.Bootstrap, Topic: dlqtest.DLQ, Filter: All(), JSON: asJSON}, &out, &sum)
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
		if strings.Join(headings, " ") != "p0@0 p0@1 p0@2" || len(lines) != 5+4+4+2+1 || lines[len(lines)-1] != "3 message(s) of "+dlqtest.DLQ {
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
		var e entry
		if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
			t.Fatalf("line %q: %v", lines[0], err)
		}
		// Escaped, not lost: the valid UTF-8 reads back as it was.
		if e.Code != code || e.Reason != reason || e.Headers[evilKey] != evilValue || e.Envelope == nil || e.Envelope.EventType != eventType {
			t.Errorf("read back %+v", e)
		}
		for _, l := range lines[1:] {
			if err := json.Unmarshal([]byte(l), new(entry)); err != nil {
				t.Errorf("line %q: %v", l, err)
			}
		}
	})

	t.Run("dlq replay", func(t *testing.T) {
		t.Parallel()
		c, out, err := replay(t, kc, ReplayOptions{DryRun: true})
		if err != nil || c != (Counts{Selected: 3, Replayed: 2, Refused: 1}) {
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
