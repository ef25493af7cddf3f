package servicetest

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
)

// CheckDeadLetter checks dl, the dead letter of sent, which landed on the
// service's topic at src (its partition and offset), against
// docs/contract.md §5: sent's key and value
// byte for byte and every one of its headers; on the DLQ partition of the
// source partition's number; x-dlq-error-code code, x-attempts attempts,
// x-source-topic, x-original-partition and x-original-offset naming src,
// x-consumer-group the service's group; an x-dlq-reason of valid UTF-8, not
// empty, at most 1000 bytes; an x-dlq-at in RFC 3339 UTC, within a minute
// of now. A failure is reported on t and the check goes on.
func (e *Env) CheckDeadLetter(t testing.TB, dl *kafka.Message, sent kafkatest.Message, src kafka.TopicPartition, code string, attempts int) {
	t.Helper()
	h := func(k string) string { return kafkatest.Header(dl, k) }
	if !bytes.Equal(dl.Key, sent.Key) || !bytes.Equal(dl.Value, sent.Value) {
		t.Errorf("dead letter key/value differ from the original:\n key %q, want %q\n value %s\n want  %s", dl.Key, sent.Key, dl.Value, sent.Value)
	}
	for k, v := range sent.Headers {
		if got := h(k); got != v {
			t.Errorf("original header %s = %q, want %q", k, got, v)
		}
	}
	if dl.TopicPartition.Partition != src.Partition {
		t.Errorf("dead letter on DLQ partition %d, want the source's %d", dl.TopicPartition.Partition, src.Partition)
	}
	want := map[string]string{
		consumer.HeaderErrorCode:         code,
		consumer.HeaderAttempts:          strconv.Itoa(attempts),
		consumer.HeaderSourceTopic:       e.Topic,
		consumer.HeaderOriginalPartition: strconv.Itoa(int(src.Partition)),
		consumer.HeaderOriginalOffset:    strconv.FormatInt(int64(src.Offset), 10),
		consumer.HeaderConsumerGroup:     e.Group,
	}
	for k, v := range want {
		if got := h(k); got != v {
			t.Errorf("DLQ header %s = %q, want %q", k, got, v)
		}
	}
	if r := h(consumer.HeaderReason); r == "" || !utf8.ValidString(r) || len(r) > 1000 {
		t.Errorf("DLQ header %s = %q: want human text, valid UTF-8, at most 1000 bytes", consumer.HeaderReason, r)
	}
	at, err := time.Parse(time.RFC3339, h(consumer.HeaderDLQAt))
	if err != nil || !strings.HasSuffix(h(consumer.HeaderDLQAt), "Z") || time.Since(at) > time.Minute || time.Until(at) > time.Minute {
		t.Errorf("DLQ header %s = %q: not a recent RFC 3339 UTC time (%v)", consumer.HeaderDLQAt, h(consumer.HeaderDLQAt), err)
	}
}
