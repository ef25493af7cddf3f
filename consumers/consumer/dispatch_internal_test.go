package consumer

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
)

// The poll goroutine decodes a message's envelope as it hands the message
// to its worker (a partition's next batch is decoded while its worker
// waits on a transaction), an unreadable one with its error; the worker
// then takes that decode, not a second one of the value.
func TestDispatchHandsTheEnvelopeOverDecoded(t *testing.T) {
	w := &worker{in: make(chan queued, 4), lastDispatched: -1}
	r := &Runtime{cfg: Config{QueueBytes: 1 << 20}, workers: map[int32]*worker{0: w}}
	w.r = r
	topic := "t"
	msg := func(offset kafka.Offset, value string) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: offset}, Value: []byte(value)}
	}
	id := uuid.New()
	r.dispatch(msg(7, `{"MessageId":"`+id.String()+`","EventType":"x","ContractVersion":1,"CreatedAt":"2026-12-03T10:00:00Z","Payload":{}}`))
	r.dispatch(msg(8, `not json`))
	if len(w.in) != 2 {
		t.Fatalf("%d messages handed over, want 2", len(w.in))
	}
	good, bad := <-w.in, <-w.in
	if !good.pre.ok || good.pre.err != nil || good.pre.env.MessageID != id || good.pre.env.EventType != "x" {
		t.Fatalf("the readable envelope handed over as %+v", good.pre)
	}
	if !bad.pre.ok || bad.pre.err == nil {
		t.Fatalf("the unreadable envelope handed over as %+v, want its error", bad.pre)
	}

	// decode takes pre: here a value that would not decode, with the
	// envelope decoded from another.
	it := &item{km: msg(9, `not json`)}
	r.decode(it, good.pre)
	if it.decodeErr != nil || it.msg == nil || it.msg.MessageID != id || it.id != id.String() {
		t.Fatalf("decode with a decoded envelope: %+v, %v", it.msg, it.decodeErr)
	}
	// and decodes the value itself without one (a parked message's).
	it = &item{km: msg(10, `not json`)}
	r.decode(it, predecoded{})
	if it.decodeErr == nil || it.msg != nil {
		t.Fatalf("decode of an unreadable value: %+v, %v", it.msg, it.decodeErr)
	}
}
