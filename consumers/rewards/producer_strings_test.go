package rewards

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/kafkatest"
)

// Producer strings are cut where they are logged and quoted: a ~1 MB
// MessageId, EventType or payload member makes log lines and an
// x-dlq-reason of a bounded size, on every attempt; the DLQ record keeps
// the message's value byte for byte.
func TestHugeProducerStringsMakeBoundedLogLinesAndReasons(t *testing.T) {
	e := newEnv(t)
	huge := strings.Repeat("é", 450_000) // 900,000 bytes: the producer's limit is 1,000,000
	b := newBond(uuid.New())
	good := created(b, 1, baseTime)
	raw := func(edit func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good.value, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		v, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	values := map[string][]byte{
		"MessageId not a UUID": raw(func(m map[string]any) { m["MessageId"] = huge }),
		"BondId not a UUID": raw(func(m map[string]any) {
			m["MessageId"] = uuid.NewString()
			m["Payload"].(map[string]any)["BondId"] = huge
		}),
	}
	unknown := [][]byte{ // skipped, logged: a string no route takes, and the JSON text of one that is not a string
		raw(func(m map[string]any) { m["MessageId"], m["EventType"] = uuid.NewString(), huge }),
		raw(func(m map[string]any) { m["MessageId"], m["EventType"] = uuid.NewString(), []string{huge} }),
	}
	var msgs []kafkatest.Message
	for _, v := range append(slices.Collect(maps.Values(values)), unknown...) {
		msgs = append(msgs, kafkatest.Message{Partition: -1, Key: []byte(good.key), Value: v})
	}
	e.Produce(msgs...)
	e.start()
	dlq := e.AwaitDLQ(len(values))
	e.waitCommitted()
	const maxReason, maxLine = 1024, 4096
	for _, m := range dlq {
		reason := kafkatest.Header(m, "x-dlq-reason")
		if len(reason) > maxReason || !strings.Contains(reason, "…(+") {
			t.Errorf("x-dlq-reason of %d bytes (want at most %d, cut with a marker): %.300q", len(reason), maxReason, reason)
		}
		kept := false
		for _, v := range values {
			kept = kept || bytes.Equal(m.Value, v)
		}
		if !kept {
			t.Errorf("DLQ value of %d bytes is not a produced value byte for byte", len(m.Value))
		}
	}
	lines := strings.Split(strings.TrimSpace(e.Logs.String()), "\n")
	if len(lines) < len(values)+len(unknown) {
		t.Fatalf("%d log lines, want one per message at least", len(lines))
	}
	for _, l := range lines {
		if len(l) > maxLine {
			t.Errorf("a log line of %d bytes (want at most %d): %.300s", len(l), maxLine, l)
		}
	}
	skipped := e.Logs.Find("skipped-unknown-event-type", nil)
	if len(skipped) != len(unknown) {
		t.Fatalf("%d skipped-unknown-event-type lines, want %d", len(skipped), len(unknown))
	}
	for _, l := range skipped {
		if et, _ := l["EventType"].(string); !strings.Contains(et, "…(+") {
			t.Errorf("skipped with EventType %.300q: want it cut with a marker", et)
		}
	}
}
