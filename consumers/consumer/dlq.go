package consumer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
)

// DLQ headers (CONTRACT.md §5).
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

// dlqProducer publishes dead letters with an idempotent producer (acks=all)
// and waits for each delivery report.
type dlqProducer struct {
	p     *kafka.Producer
	topic string
	group string
	log   zerolog.Logger
	done  chan struct{}
}

func newDLQProducer(cm kafka.ConfigMap, svc Service, log zerolog.Logger) (*dlqProducer, error) {
	cm["enable.idempotence"] = true
	cm["acks"] = "all"
	if _, ok := cm["linger.ms"]; !ok {
		cm["linger.ms"] = 0
	}
	// Consumer-only properties given through KAFKA_* are ignored by
	// librdkafka with a warning; drop the ones we set for the consumer.
	for _, k := range []string{"auto.offset.reset", "enable.auto.commit", "auto.commit.interval.ms", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms", "partition.assignment.strategy", "group.instance.id", "enable.auto.offset.store", "fetch.wait.max.ms", "fetch.min.bytes", "group.protocol"} {
		delete(cm, k)
	}
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return nil, err
	}
	d := &dlqProducer{p: p, topic: svc.DLQTopic, group: svc.Group, log: log, done: make(chan struct{})}
	go func() { // events not tied to a delivery channel: errors, logs
		defer close(d.done)
		for ev := range p.Events() {
			if e, ok := ev.(kafka.Error); ok {
				d.log.Warn().Err(e).Bool("fatal", e.IsFatal()).Msg("dlq producer error")
			}
		}
	}()
	return d, nil
}

// send publishes the original key, value and headers plus the DLQ headers
// to the DLQ partition of the same number, and returns once the broker
// acknowledged it.
func (d *dlqProducer) send(ctx context.Context, km *kafka.Message, code Code, reason string, attempts int) error {
	hs := make([]kafka.Header, 0, len(km.Headers)+8)
	for _, h := range km.Headers {
		if !dlqHeaders[h.Key] { // a message replayed from a DLQ gets fresh ones
			hs = append(hs, h)
		}
	}
	src := ""
	if km.TopicPartition.Topic != nil {
		src = *km.TopicPartition.Topic
	}
	add := func(k, v string) { hs = append(hs, kafka.Header{Key: k, Value: []byte(v)}) }
	add(HeaderReason, strings.ToValidUTF8(reason, "?"))
	add(HeaderErrorCode, code.Name)
	add(HeaderSourceTopic, src)
	add(HeaderOriginalPartition, strconv.Itoa(int(km.TopicPartition.Partition)))
	add(HeaderOriginalOffset, strconv.FormatInt(int64(km.TopicPartition.Offset), 10))
	add(HeaderConsumerGroup, d.group)
	add(HeaderAttempts, strconv.Itoa(attempts))
	add(HeaderDLQAt, time.Now().UTC().Format(time.RFC3339))

	topic := d.topic
	delivery := make(chan kafka.Event, 1)
	err := d.p.Produce(&kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: km.TopicPartition.Partition},
		Key:            km.Key,
		Value:          km.Value,
		Headers:        hs,
	}, delivery)
	if err != nil {
		return fmt.Errorf("dlq produce: %w", err)
	}
	select {
	case ev := <-delivery:
		m, ok := ev.(*kafka.Message)
		if !ok {
			return fmt.Errorf("dlq produce: unexpected event %v", ev)
		}
		if m.TopicPartition.Error != nil {
			return fmt.Errorf("dlq produce: %w", m.TopicPartition.Error)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *dlqProducer) close() {
	d.p.Flush(5000)
	d.p.Close()
	<-d.done
}
