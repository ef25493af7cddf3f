package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pin-platform/pin/consumers/demo"
)

// headerSeq carries an event's place in its service's stream: the topics
// are read back at the end and each record matched to what it was made as.
const headerSeq = "x-chaos-seq"

// startBroker starts kfake, franz-go's Kafka-protocol fake, in process:
// three brokers (so that partition leaders and group coordinators can
// move), every topic of the services with its DLQ, and a minimum session
// timeout low enough for the consumers' short one.
func startBroker(topics []demo.Topic) (*kfake.Cluster, string, error) {
	opts := []kfake.Opt{kfake.NumBrokers(3), kfake.GroupMinSessionTimeout(time.Second)}
	for _, t := range topics {
		opts = append(opts, kfake.SeedTopics(int32(t.Partitions), t.Name, t.DLQ))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("start kfake: %w", err)
	}
	bootstrap := ""
	for i, a := range c.ListenAddrs() {
		if i > 0 {
			bootstrap += ","
		}
		bootstrap += a
	}
	return c, bootstrap, nil
}

// clientConfig is a librdkafka client of the run's broker: quiet (kfake's
// empty telemetry subscription is an info line per connection, and the
// faults drop connections on purpose).
func clientConfig(bootstrap string, extra kafka.ConfigMap) *kafka.ConfigMap {
	cm := kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 3, "log.connection.close": false}
	for k, v := range extra {
		cm[k] = v
	}
	return &cm
}

// producer feeds the services' topics: idempotent, every delivery awaited
// in the background.
type producer struct {
	p       *kafka.Producer
	pending sync.WaitGroup
	failed  atomic.Int64
	lastErr atomic.Value
}

func newProducer(bootstrap string) (*producer, error) {
	p, err := kafka.NewProducer(clientConfig(bootstrap, kafka.ConfigMap{
		"enable.idempotence":           true,
		"linger.ms":                    5,
		"queue.buffering.max.messages": 1000000,
	}))
	if err != nil {
		return nil, err
	}
	pr := &producer{p: p}
	go func() {
		for ev := range p.Events() {
			if m, ok := ev.(*kafka.Message); ok {
				if m.TopicPartition.Error != nil {
					pr.failed.Add(1)
					pr.lastErr.Store(m.TopicPartition.Error.Error())
				}
				pr.pending.Done()
			}
		}
	}()
	return pr, nil
}

func (p *producer) produce(topic string, e *event) error {
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            e.key,
		Value:          e.value,
		Headers:        []kafka.Header{{Key: headerSeq, Value: []byte(strconv.Itoa(e.seq))}},
	}
	p.pending.Add(1)
	for {
		err := p.p.Produce(m, nil)
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			p.pending.Done()
		}
		return err
	}
}

// feed produces events to topic at rate events/s, from start on.
func (p *producer) feed(ctx context.Context, topic string, events []*event, rate float64, start time.Time, produced *atomic.Int64) error {
	for i := 0; i < len(events); {
		due := min(len(events), int(time.Since(start).Seconds()*rate)+1)
		for ; i < due; i++ {
			if err := p.produce(topic, events[i]); err != nil {
				return fmt.Errorf("produce to %s: %w", topic, err)
			}
			produced.Add(1)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// wait waits for every delivery report.
func (p *producer) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *producer) close() { p.p.Flush(5000); p.p.Close() }

// view reads the broker's state: high watermarks and the groups' committed
// offsets. Its clients join no group.
type view struct {
	bootstrap string
	meta      *kafka.Consumer
	groups    map[string]*kafka.Consumer
}

func newView(bootstrap string) (*view, error) {
	c, err := kafka.NewConsumer(clientConfig(bootstrap, kafka.ConfigMap{"group.id": "pinctl-chaos-view"}))
	if err != nil {
		return nil, err
	}
	return &view{bootstrap: bootstrap, meta: c, groups: map[string]*kafka.Consumer{}}, nil
}

func (v *view) close() {
	v.meta.Close()
	for _, c := range v.groups {
		c.Close()
	}
}

// highWatermarks returns each partition's high watermark.
func (v *view) highWatermarks(topic string, partitions int) ([]int64, error) {
	out := make([]int64, partitions)
	for p := range partitions {
		_, hi, err := v.meta.QueryWatermarkOffsets(topic, int32(p), 5000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s[%d]: %w", topic, p, err)
		}
		out[p] = hi
	}
	return out, nil
}

// committed returns the group's committed offset of each partition (0
// where it has none).
func (v *view) committed(group, topic string, partitions int) ([]int64, error) {
	c, ok := v.groups[group]
	if !ok {
		var err error
		if c, err = kafka.NewConsumer(clientConfig(v.bootstrap, kafka.ConfigMap{"group.id": group})); err != nil {
			return nil, err
		}
		v.groups[group] = c
	}
	tps := make([]kafka.TopicPartition, partitions)
	for p := range partitions {
		tps[p] = kafka.TopicPartition{Topic: &topic, Partition: int32(p)}
	}
	out := make([]int64, partitions)
	got, err := c.Committed(tps, 5000)
	var ke kafka.Error
	if errors.As(err, &ke) && ke.Code() == kafka.ErrGroupIDNotFound {
		return out, nil // kfake knows no group that never committed
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	for _, tp := range got {
		if tp.Offset >= 0 {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out, nil
}

// readTopic reads every record of topic up to the high watermarks.
func readTopic(ctx context.Context, bootstrap, topic string, partitions int) ([]*kafka.Message, error) {
	c, err := kafka.NewConsumer(clientConfig(bootstrap, kafka.ConfigMap{
		"group.id": "pinctl-chaos-reader", "enable.auto.commit": false, "enable.partition.eof": false,
	}))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	want := 0
	for p := range partitions {
		lo, hi, err := c.QueryWatermarkOffsets(topic, int32(p), 5000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s[%d]: %w", topic, p, err)
		}
		if hi > lo {
			want += int(hi - lo)
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: kafka.Offset(lo)})
		}
	}
	if want == 0 {
		return nil, nil
	}
	if err := c.Assign(tps); err != nil {
		return nil, err
	}
	out := make([]*kafka.Message, 0, want)
	deadline := time.Now().Add(2 * time.Minute)
	for len(out) < want {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("read %s: %d of %d records in 2 minutes", topic, len(out), want)
		}
		switch ev := c.Poll(200).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error == nil {
				out = append(out, ev)
			}
		case kafka.Error:
			if ev.IsFatal() {
				return nil, ev
			}
		}
	}
	return out, nil
}

func header(m *kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}
