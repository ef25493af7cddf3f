package consumer

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
)

// A partition's position moved back under its member (the log truncated
// after an unclean leader election, or the topic recreated and the
// position reset to its start): the offsets at or before the last one
// handed over hold other messages now, and every one of them is handed
// over, after what was queued, with a warning. librdkafka itself discards
// what it fetched before a seek or a pause of the runtime's, so nothing
// else brings such offsets. Dropping them until the offsets passed the old
// ones lost those messages: the ones after were acked past them.
func TestAPositionMovedBackHandsOverEveryMessageAgain(t *testing.T) {
	var logs bytes.Buffer
	r := &Runtime{cfg: Config{QueueBytes: 1 << 20}, workers: map[int32]*worker{}, log: zerolog.New(&logs)}
	w := &worker{in: make(chan queued, 16), lastDispatched: -1}
	r.workers[0] = w
	topic := "t"
	msg := func(o int64) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: kafka.Offset(o)}, Value: []byte("{}")}
	}
	for o := range int64(5) { // consumed before the position moved
		r.dispatch(msg(o))
	}
	for o := range int64(7) { // the position back at 0: other messages 0..6
		r.dispatch(msg(o))
	}
	var got []int64
	for len(w.in) > 0 {
		got = append(got, int64((<-w.in).m.TopicPartition.Offset))
	}
	if want := []int64{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("handed over %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "position moved back"); n != 1 {
		t.Fatalf("%d warnings of a position moved back, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"last_handed_over":4`) {
		t.Fatalf("the warning does not name the last offset handed over:\n%s", logs.String())
	}
}
