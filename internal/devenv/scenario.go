package devenv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/internal/kafkaenv"
	"github.com/pin-platform/pin/internal/term"
)

// play runs the steps of a scenario in turn: each one's wait, its line,
// its SQL (the other components' part: chats, leads) and its events, until
// the broker acknowledged them.
func (d *devEnv) play(ctx context.Context, p *devProducer, steps []demo.Step) error {
	for _, st := range steps {
		if st.After > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(st.After):
			}
		}
		if st.Say != "" {
			d.say("\n● %s", st.Say)
		}
		if st.SQL != "" {
			if _, err := d.db.ExecContext(ctx, st.SQL, st.SQLArgs...); err != nil {
				return fmt.Errorf("%s: %w", st.Say, err)
			}
		}
		for _, e := range st.Events {
			if e.Note != "" {
				d.say("  → %s", e.Note)
			}
			if err := p.produce(e); err != nil {
				return err
			}
		}
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// load produces n events of the realistic mix, with a progress bar.
func (d *devEnv) load(ctx context.Context, p *devProducer, n int) error {
	l := demo.NewLoad(uint64(time.Now().UnixNano()), 100, 100)
	d.say("\n● %d events of realistic load", n)
	if err := d.play(ctx, p, l.Setup()); err != nil {
		return err
	}
	bar := term.NewProgress(d.out, d.opts.TTY, "produce", n)
	for i := 0; i < n; i++ {
		if err := p.produce(l.Next()); err != nil {
			return err
		}
		bar.Set(i + 1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	bar.Done()
	return nil
}

// watermarks returns the high watermark per source partition.
func (d *devEnv) watermarks() map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	c, err := kafka.NewConsumer(kafkaenv.Client(d.brokers, kafka.ConfigMap{"group.id": "pinctl-dev-watermarks"}))
	if err != nil {
		return out
	}
	defer c.Close()
	for _, t := range demo.Topics {
		for _, name := range []string{t.Name, t.DLQ} {
			out[name] = map[int32]int64{}
			for p := 0; p < t.Partitions; p++ {
				_, hi, err := c.QueryWatermarkOffsets(name, int32(p), 5000)
				if err == nil {
					out[name][int32(p)] = hi
				}
			}
		}
	}
	return out
}

// waitCaughtUp waits until every group committed its topic's high
// watermarks and no message is parked.
func (d *devEnv) waitCaughtUp(ctx context.Context) error {
	var bar *term.Progress
	deadline := time.Now().Add(d.opts.Timeout)
	for {
		hi := d.watermarks()
		total, done := int64(0), int64(0)
		for _, t := range demo.Topics {
			committed := d.committed(t.Group, t.Name, t.Partitions)
			for p, h := range hi[t.Name] {
				total += h
				done += min(committed[p], h)
			}
		}
		var parked int
		_ = d.db.QueryRowContext(ctx, `SELECT count(*) FROM parked_messages`).Scan(&parked)
		if d.opts.Events > 0 {
			if bar == nil {
				bar = term.NewProgress(d.out, d.opts.TTY, "consume", int(total))
			}
			bar.Set(int(done))
		}
		if done == total && parked == 0 {
			if bar != nil {
				bar.Done()
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the consumers did not catch up in %s (%d of %d offsets committed, %d parked)", d.opts.Timeout, done, total, parked)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// committed returns the group's committed offset per partition of topic
// (none: left out).
func (d *devEnv) committed(group, topic string, partitions int) map[int32]int64 {
	out := map[int32]int64{}
	c, err := kafka.NewConsumer(kafkaenv.Client(d.brokers, kafka.ConfigMap{"group.id": group}))
	if err != nil {
		return out
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for p := 0; p < partitions; p++ {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: int32(p)})
	}
	got, err := c.Committed(tps, 5000)
	if err != nil {
		return out
	}
	for _, tp := range got {
		if tp.Offset >= 0 {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out
}

// devProducer produces with delivery reports drained in the background.
type devProducer struct {
	p       *kafka.Producer
	mu      sync.Mutex
	err     error
	pending sync.WaitGroup
}

func newDevProducer(brokers string) (*devProducer, error) {
	p, err := NewLoadProducer(brokers, 5)
	if err != nil {
		return nil, err
	}
	dp := &devProducer{p: p}
	go func() {
		for ev := range p.Events() {
			if m, ok := ev.(*kafka.Message); ok {
				if m.TopicPartition.Error != nil {
					dp.mu.Lock()
					dp.err = m.TopicPartition.Error
					dp.mu.Unlock()
				}
				dp.pending.Done()
			}
		}
	}()
	return dp, nil
}

func (p *devProducer) produce(e demo.Event) error {
	topic := e.Topic
	p.pending.Add(1)
	for {
		err := p.p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: e.Key, Value: e.Value}, nil)
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
			p.p.Flush(100)
			continue
		}
		if err != nil {
			p.pending.Done()
		}
		return err
	}
}

func (p *devProducer) flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *devProducer) close() { p.p.Flush(5000); p.p.Close() }
