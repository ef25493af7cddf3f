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

// Headers of a dead letter too large for the DLQ with all of the original
// (see dlqProducer.send). Each holds the size in bytes of what was left
// out; the original stays readable at x-source-topic /
// x-original-partition / x-original-offset while the topic's retention
// keeps it.
const (
	// HeaderValueOmitted: the value was left out.
	HeaderValueOmitted = "x-dlq-value-omitted"
	// HeaderHeadersOmitted: the original headers were left out (their
	// keys and values, summed).
	HeaderHeadersOmitted = "x-dlq-headers-omitted"
	// HeaderKeyTruncated: the key was cut to its first keyKept bytes.
	HeaderKeyTruncated = "x-dlq-key-truncated"
)

// keyKept is how much of a key is kept when even a dead letter without
// its value and headers does not fit.
const keyKept = 1024

// omitted is the set of headers the producer adds for what it left out: a
// message replayed from a DLQ gets fresh ones.
var omitted = map[string]bool{HeaderValueOmitted: true, HeaderHeadersOmitted: true, HeaderKeyTruncated: true}

// dlqProducer publishes dead letters with an idempotent producer (acks=all)
// and waits for each delivery report. A producer that hit a fatal error
// (the idempotent producer's sequence broke) is replaced on the next send.
type dlqProducer struct {
	cm    kafka.ConfigMap
	topic string
	group string
	log   zerolog.Logger

	// mu guards p: held shared while p is used (a Produce, a metadata
	// read), exclusively to replace it.
	mu    sync.RWMutex
	p     *kafka.Producer
	done  chan struct{}
	fatal atomic.Bool

	// partitions is the DLQ topic's partition count as last read (0: not
	// read yet), checked is when; source is the highest source partition
	// count seen. Guarded by pmu.
	pmu        sync.Mutex
	partitions int32
	source     int32
	checked    time.Time
	missing    func(n int) // reports source partitions the DLQ lacks (a gauge)
}

// partitionsRecheck is how often the DLQ's partition count is read again
// while it has fewer partitions than the source: once it has grown, dead
// letters go to their own partition numbers again.
const partitionsRecheck = 30 * time.Second

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
	d := &dlqProducer{cm: cm, topic: svc.DLQTopic, group: svc.Group, log: log, missing: func(int) {}}
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

// use runs fn with the live producer, replacing one that failed fatally
// first. The one replaced is closed once it has delivered the reports of
// what it still had in flight (another worker may be waiting on one), so
// nobody waits on a producer that is gone, or calls into one.
func (d *dlqProducer) use(fn func(*kafka.Producer) error) error {
	if d.fatal.Load() {
		d.mu.Lock()
		if d.fatal.Load() {
			d.log.Warn().Msg("dlq producer failed fatally: replacing it")
			old, oldDone := d.p, d.done
			if err := d.open(); err != nil {
				d.mu.Unlock()
				return fmt.Errorf("dlq producer: %w", err)
			}
			go func() {
				old.Flush(int(d.deliveryTimeout().Milliseconds()))
				old.Close()
				<-oldDone
			}()
		}
		d.mu.Unlock()
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return fn(d.p)
}

// deliveryTimeout bounds the wait for a delivery report: librdkafka
// reports every message within message.timeout.ms (5 min by default).
func (d *dlqProducer) deliveryTimeout() time.Duration {
	ms := 300000
	for _, k := range []string{"message.timeout.ms", "delivery.timeout.ms"} {
		switch v := d.cm[k].(type) {
		case int:
			ms = v
		case string:
			if n, err := strconv.Atoi(v); err == nil {
				ms = n
			}
		}
	}
	return time.Duration(ms)*time.Millisecond + 10*time.Second
}

// send publishes the original key, value and headers plus the DLQ headers
// to the DLQ partition for the source partition (partitionFor), and
// returns once the broker acknowledged it.
//
// A dead letter always fits: when the DLQ refuses it for its size (the
// producer's message.max.bytes, the topic's max.message.bytes), it goes
// without the original headers, else without the value, else without
// both, and only then with the key cut to keyKept bytes (a cut key can no
// longer be replayed to its partition), each omission recorded in a
// header (HeaderHeadersOmitted, HeaderValueOmitted, HeaderKeyTruncated). A record the source topic took must never hold its
// partition because the DLQ's limits are smaller: its size is the
// message's own fault, not the world's.
func (d *dlqProducer) send(ctx context.Context, km *kafka.Message, code Code, reason string, attempts int) error {
	var orig []kafka.Header
	origBytes := 0
	for _, h := range km.Headers {
		if !dlqHeaders[h.Key] && !omitted[h.Key] { // a message replayed from a DLQ gets fresh ones
			orig = append(orig, h)
			origBytes += len(h.Key) + len(h.Value)
		}
	}
	src := ""
	if km.TopicPartition.Topic != nil {
		src = *km.TopicPartition.Topic
	}
	var ours []kafka.Header
	add := func(k, v string) { ours = append(ours, kafka.Header{Key: k, Value: []byte(v)}) }
	add(HeaderReason, abbreviate(strings.ToValidUTF8(reason, "?"), 1000))
	add(HeaderErrorCode, code.Name)
	add(HeaderSourceTopic, src)
	add(HeaderOriginalPartition, strconv.Itoa(int(km.TopicPartition.Partition)))
	add(HeaderOriginalOffset, strconv.FormatInt(int64(km.TopicPartition.Offset), 10))
	add(HeaderConsumerGroup, d.group)
	add(HeaderAttempts, strconv.Itoa(attempts))
	add(HeaderDLQAt, time.Now().UTC().Format(time.RFC3339))

	// What is left out, step by step, while the DLQ refuses the record
	// for its size.
	type shape struct{ noHeaders, noValue, cutKey bool }
	tried := map[shape]bool{}
	part := d.partitionFor(km.TopicPartition.Partition)
	var err error
	for _, sh := range []shape{{}, {true, false, false}, {false, true, false}, {true, true, false},
		{false, false, true}, {true, false, true}, {false, true, true}, {true, true, true}} {
		// Leave out only what is there: a shape that leaves out
		// nothing more than one tried already is skipped.
		sh = shape{sh.noHeaders && len(orig) > 0, sh.noValue && len(km.Value) > 0, sh.cutKey && len(km.Key) > keyKept}
		if tried[sh] {
			continue
		}
		tried[sh] = true
		m := d.dead(km, part, orig, ours, sh.noHeaders, sh.noValue, sh.cutKey, origBytes)
		if err = d.produce(ctx, m); !tooLarge(err) {
			if err == nil && sh != (shape{}) {
				d.log.Warn().Int("value_bytes", len(km.Value)).Int("headers_bytes", origBytes).Int("key_bytes", len(km.Key)).
					Bool("value_omitted", sh.noValue).Bool("headers_omitted", sh.noHeaders).Bool("key_truncated", sh.cutKey).
					Str("code", code.Name).Msg("dead letter too large for the DLQ: sent without part of the original")
			}
			return err
		}
	}
	return err
}

// dead builds the DLQ record of km in one of send's shapes.
func (d *dlqProducer) dead(km *kafka.Message, part int32, orig, ours []kafka.Header, noHeaders, noValue, cutKey bool, origBytes int) *kafka.Message {
	topic := d.topic
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part},
		Key:            km.Key,
		Value:          km.Value,
	}
	hs := make([]kafka.Header, 0, len(orig)+len(ours)+3)
	if !noHeaders {
		hs = append(hs, orig...)
	}
	hs = append(hs, ours...)
	size := func(k string, n int) { hs = append(hs, kafka.Header{Key: k, Value: []byte(strconv.Itoa(n))}) }
	if noHeaders && len(orig) > 0 {
		size(HeaderHeadersOmitted, origBytes)
	}
	if noValue && len(km.Value) > 0 {
		m.Value = nil
		size(HeaderValueOmitted, len(km.Value))
	}
	if cutKey && len(km.Key) > keyKept {
		m.Key = km.Key[:keyKept]
		size(HeaderKeyTruncated, len(km.Key))
	}
	m.Headers = hs
	return m
}

// partitionFor is the DLQ partition of a dead letter from source partition
// p: the same number while the DLQ has it (so the DLQ keeps each key's
// order, as the source does); else, when the source grew and its DLQ did
// not, p modulo the DLQ's partitions — all of one source partition's dead
// letters still go to one DLQ partition, in order — with a warning and
// pin_consumer_dlq_partitions_missing naming the mismatch.
func (d *dlqProducer) partitionFor(p int32) int32 {
	d.pmu.Lock()
	if p+1 > d.source {
		d.source = p + 1
	}
	// Read the DLQ's partitions again while they are unknown, or while
	// this partition is beyond them (the DLQ may have grown since): at
	// most once a second, or once partitionsRecheck, and never under pmu
	// (the rebalance callback takes it).
	since := time.Since(d.checked)
	read := (d.partitions == 0 && since > time.Second) || (p >= d.partitions && d.partitions > 0 && since > partitionsRecheck)
	if read {
		d.checked = time.Now()
	}
	n := d.partitions
	d.pmu.Unlock()
	if read {
		if got, err := d.readPartitions(); err != nil {
			d.log.Warn().Err(err).Msg("dlq: reading the DLQ topic's partitions failed")
		} else {
			d.pmu.Lock()
			d.partitions, n = got, got
			d.reportLocked()
			d.pmu.Unlock()
		}
	}
	if n == 0 || p < n {
		return p // unknown: the broker's answer decides
	}
	return p % n
}

// setPartitions records what the runtime read at start: the DLQ's and the
// source's partition counts.
func (d *dlqProducer) setPartitions(dlq, source int) {
	d.pmu.Lock()
	defer d.pmu.Unlock()
	d.partitions, d.checked = int32(dlq), time.Now()
	d.source = max(d.source, int32(source))
	d.reportLocked()
}

// sourcePartition records a source partition the consumer was assigned.
func (d *dlqProducer) sourcePartition(p int32) {
	d.pmu.Lock()
	defer d.pmu.Unlock()
	if p+1 > d.source {
		d.source = p + 1
		d.reportLocked()
	}
}

// readPartitions reads the DLQ's partition count from the broker.
func (d *dlqProducer) readPartitions() (int32, error) {
	var n int32
	err := d.use(func(p *kafka.Producer) error {
		topic := d.topic
		md, err := p.GetMetadata(&topic, false, 5000)
		if err != nil {
			return err
		}
		t, ok := md.Topics[topic]
		if !ok || t.Error.Code() != kafka.ErrNoError || len(t.Partitions) == 0 {
			return fmt.Errorf("topic %s has no partitions in the broker's answer", topic)
		}
		n = int32(len(t.Partitions))
		return nil
	})
	return n, err
}

func (d *dlqProducer) reportLocked() {
	missing := 0
	if d.partitions > 0 && d.source > d.partitions {
		missing = int(d.source - d.partitions)
	}
	d.missing(missing)
	if missing > 0 {
		d.log.Warn().Str("dlq_topic", d.topic).Int32("dlq_partitions", d.partitions).Int32("source_partitions", d.source).
			Msg("the DLQ topic has fewer partitions than its source: dead letters of the partitions it lacks go to partition (number modulo its partitions); add partitions to the DLQ topic")
	}
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
	delivery := make(chan kafka.Event, 1)
	if err := d.use(func(p *kafka.Producer) error { return p.Produce(m, delivery) }); err != nil {
		return d.unknownPartition(fmt.Errorf("dlq produce: %w", err))
	}
	timeout := time.NewTimer(d.deliveryTimeout())
	defer timeout.Stop()
	select {
	case ev := <-delivery:
		r, ok := ev.(*kafka.Message)
		if !ok {
			return fmt.Errorf("dlq produce: unexpected event %v", ev)
		}
		if r.TopicPartition.Error != nil {
			return d.unknownPartition(fmt.Errorf("dlq produce: %w", r.TopicPartition.Error))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout.C:
		return errors.New("dlq produce: no delivery report within message.timeout.ms")
	}
}

// unknownPartition passes err on; when the DLQ lacks the partition it was
// sent to (the topic shrank, or was recreated smaller), the next send
// reads its partition count again first.
func (d *dlqProducer) unknownPartition(err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.Code() == kafka.ErrUnknownPartition || ke.Code() == kafka.ErrUnknownTopicOrPart) {
		d.pmu.Lock()
		d.partitions = 0
		d.checked = time.Time{} // read again on the next send
		d.pmu.Unlock()
	}
	return err
}

func (d *dlqProducer) close() {
	d.mu.Lock() // waits for the producer's users
	defer d.mu.Unlock()
	d.p.Flush(int(dlqFlushBudget.Milliseconds()))
	d.p.Close()
	<-d.done
}
