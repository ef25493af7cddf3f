package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
)

// DLQ headers (docs/contract.md §5).
const (
	HeaderReason            = "x-dlq-reason"
	HeaderErrorCode         = "x-dlq-error-code"
	HeaderSourceTopic       = "x-source-topic"
	HeaderOriginalPartition = "x-original-partition"
	HeaderOriginalOffset    = "x-original-offset"
	HeaderConsumerGroup     = "x-consumer-group"
	HeaderAttempts          = "x-attempts"
	HeaderDLQAt             = "x-dlq-at"
)

var dlqHeaders = map[string]bool{
	HeaderReason: true, HeaderErrorCode: true, HeaderSourceTopic: true, HeaderOriginalPartition: true,
	HeaderOriginalOffset: true, HeaderConsumerGroup: true, HeaderAttempts: true, HeaderDLQAt: true,
}

// HeaderValueOmitted marks a dead letter whose value was too large for the
// DLQ: it holds the original size in bytes; the value stays readable at
// x-source-topic / x-original-partition / x-original-offset while the
// topic's retention keeps it.
const HeaderValueOmitted = "x-dlq-value-omitted"

// dlqProducer publishes dead letters with an idempotent producer (acks=all)
// and waits for each delivery report. A producer that hit a fatal error
// (the idempotent producer's sequence broke) is replaced on the next send.
type dlqProducer struct {
	cm    kafka.ConfigMap
	topic string
	group string
	log   zerolog.Logger

	mu    sync.Mutex
	p     *kafka.Producer
	done  chan struct{}
	fatal atomic.Bool
}

func newDLQProducer(cm kafka.ConfigMap, svc Service, log zerolog.Logger) (*dlqProducer, error) {
	cm["enable.idempotence"] = true
	cm["acks"] = "all"
	// confluent-kafka-go allocates a produce channel and an events channel
	// of 1,000,000 entries each by default: ~24 MB of live heap (and twice
	// that with GOGC=100) for a producer that sends one dead letter at a
	// time and awaits it. Ours need a few.
	for k, v := range map[string]kafka.ConfigValue{"linger.ms": 0, "go.produce.channel.size": 16, "go.events.channel.size": 1024} {
		if _, ok := cm[k]; !ok {
			cm[k] = v
		}
	}
	// Consumer-only properties given through KAFKA_* are ignored by
	// librdkafka with a warning; drop the ones we set for the consumer.
	for _, k := range []string{"auto.offset.reset", "enable.auto.commit", "auto.commit.interval.ms", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms", "partition.assignment.strategy", "group.instance.id", "enable.auto.offset.store", "fetch.wait.max.ms", "fetch.min.bytes", "group.protocol"} {
		delete(cm, k)
	}
	d := &dlqProducer{cm: cm, topic: svc.DLQTopic, group: svc.Group, log: log}
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *dlqProducer) open() error {
	cm := kafka.ConfigMap{}
	for k, v := range d.cm {
		cm[k] = v
	}
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { // events not tied to a delivery channel: errors, logs
		defer close(done)
		for ev := range p.Events() {
			if e, ok := ev.(kafka.Error); ok {
				d.log.Warn().Err(e).Bool("fatal", e.IsFatal()).Msg("dlq producer error")
				if e.IsFatal() {
					d.fatal.Store(true)
				}
			}
		}
	}()
	d.p, d.done, _ = p, done, d.fatal.Swap(false)
	return nil
}

// producer returns the live producer, replacing one that failed fatally.
func (d *dlqProducer) producer() (*kafka.Producer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fatal.Load() {
		d.log.Warn().Msg("dlq producer failed fatally: replacing it")
		d.p.Close()
		<-d.done
		if err := d.open(); err != nil {
			return nil, err
		}
	}
	return d.p, nil
}

// send publishes the original key, value and headers plus the DLQ headers
// to the DLQ partition of the same number, and returns once the broker
// acknowledged it. A value too large for the DLQ is left out (see
// HeaderValueOmitted) rather than blocking the partition forever.
func (d *dlqProducer) send(ctx context.Context, km *kafka.Message, code Code, reason string, attempts int) error {
	hs := make([]kafka.Header, 0, len(km.Headers)+9)
	for _, h := range km.Headers {
		if !dlqHeaders[h.Key] && h.Key != HeaderValueOmitted { // a message replayed from a DLQ gets fresh ones
			hs = append(hs, h)
		}
	}
	src := ""
	if km.TopicPartition.Topic != nil {
		src = *km.TopicPartition.Topic
	}
	add := func(k, v string) { hs = append(hs, kafka.Header{Key: k, Value: []byte(v)}) }
	add(HeaderReason, abbreviate(strings.ToValidUTF8(reason, "?"), 1000))
	add(HeaderErrorCode, code.Name)
	add(HeaderSourceTopic, src)
	add(HeaderOriginalPartition, strconv.Itoa(int(km.TopicPartition.Partition)))
	add(HeaderOriginalOffset, strconv.FormatInt(int64(km.TopicPartition.Offset), 10))
	add(HeaderConsumerGroup, d.group)
	add(HeaderAttempts, strconv.Itoa(attempts))
	add(HeaderDLQAt, time.Now().UTC().Format(time.RFC3339))

	topic := d.topic
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: km.TopicPartition.Partition},
		Key:            km.Key,
		Value:          km.Value,
		Headers:        hs,
	}
	err := d.produce(ctx, m)
	if tooLarge(err) {
		d.log.Warn().Int("value_bytes", len(km.Value)).Str("code", code.Name).Msg("dead letter too large for the DLQ: value left out")
		m.Value = nil
		m.Headers = append(m.Headers, kafka.Header{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(km.Value)))})
		err = d.produce(ctx, m)
	}
	return err
}

func tooLarge(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke.Code() {
	case kafka.ErrMsgSizeTooLarge, kafka.ErrRecordListTooLarge, kafka.ErrInvalidMsgSize:
		return true
	}
	return false
}

func (d *dlqProducer) produce(ctx context.Context, m *kafka.Message) error {
	p, err := d.producer()
	if err != nil {
		return fmt.Errorf("dlq producer: %w", err)
	}
	delivery := make(chan kafka.Event, 1)
	if err := p.Produce(m, delivery); err != nil {
		return fmt.Errorf("dlq produce: %w", err)
	}
	select {
	case ev := <-delivery:
		r, ok := ev.(*kafka.Message)
		if !ok {
			return fmt.Errorf("dlq produce: unexpected event %v", ev)
		}
		if r.TopicPartition.Error != nil {
			return fmt.Errorf("dlq produce: %w", r.TopicPartition.Error)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *dlqProducer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.p.Flush(5000)
	d.p.Close()
	<-d.done
}
