package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/internal/devenv"
	"github.com/pin-platform/pin/internal/kafkaenv"
	"github.com/pin-platform/pin/internal/term"
)

// brokerOnly is the broker limit: a consumer with the runtime's
// configuration (a group, auto commit of stored offsets, its KAFKA_*
// overrides) reads the n messages of topic, storing each offset after the
// message as the runtime does after its database commit, and commits; no
// database work. It returns the time from creating the consumer (so
// joining the group is included, as for the consumer process) and from the
// partitions' assignment to the synchronous commit of the last offset.
func brokerOnly(ctx context.Context, brokers, group, topic string, n int, overrides kafka.ConfigMap, timeout time.Duration) (rateResult, error) {
	cm := consumer.KafkaConsumerDefaults() // the runtime's, then its KAFKA_* overrides
	for k, v := range overrides {
		cm[k] = v
	}
	kafkaenv.DropClassicOnly(cm) // as the runtime leaves them out
	cm["bootstrap.servers"] = brokers
	cm["group.id"] = group
	cm["enable.auto.offset.store"] = false
	cm["go.application.rebalance.enable"] = true
	var r rateResult
	start := time.Now()
	var assigned time.Time
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return r, err
	}
	defer kafkaenv.CloseConsumer(c)
	err = c.Subscribe(topic, func(c *kafka.Consumer, ev kafka.Event) error {
		switch e := ev.(type) {
		case kafka.AssignedPartitions:
			if assigned.IsZero() {
				assigned = time.Now()
			}
			return c.Assign(e.Partitions)
		case kafka.RevokedPartitions:
			return c.Unassign()
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	deadline := start.Add(timeout)
	for got := 0; got < n; {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("broker only: %d of %d messages in %s", got, n, timeout)
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			got++
			tp := e.TopicPartition
			tp.Offset++
			if _, err := c.StoreOffsets([]kafka.TopicPartition{tp}); err != nil {
				return r, err
			}
		case kafka.Error:
			if e.IsFatal() {
				return r, e
			}
		}
	}
	if _, err := c.Commit(); err != nil {
		return r, err
	}
	now := time.Now()
	r.Seconds = now.Sub(start).Seconds()
	r.EPS = float64(n) / r.Seconds
	r.JoinSeconds = assigned.Sub(start).Seconds()
	r.AssignedEPS = float64(n) / now.Sub(assigned).Seconds()
	return r, nil
}

// commitStart commits each partition's first offset (its low watermark)
// for group, as a deployed group has its offsets committed. librdkafka
// resets a partition without a committed offset after a 100 ms backoff
// (its debug log: "backoff: (re)starting offset query timer"), which a
// new group meets once in its life; measured from the assignment, it was
// 3–4 % of a rewards run of 100,000 events and made the rate depend on N.
func commitStart(brokers, group, topic string, partitions int) error {
	w, err := newOffsetWatcher(brokers, group, topic, partitions)
	if err != nil {
		return err
	}
	defer w.close()
	tps := slices.Clone(w.tps)
	for i := range tps {
		lo, _, err := w.c.QueryWatermarkOffsets(topic, tps[i].Partition, 5000)
		if err != nil {
			return fmt.Errorf("%s [%d]: low watermark: %w", topic, tps[i].Partition, err)
		}
		tps[i].Offset = kafka.Offset(lo)
	}
	got, err := w.c.CommitOffsets(tps)
	if err != nil {
		return fmt.Errorf("commit the first offsets of %s for group %s: %w", topic, group, err)
	}
	for _, tp := range got {
		if tp.Error != nil {
			return fmt.Errorf("commit %s [%d] for group %s: %w", topic, tp.Partition, group, tp.Error)
		}
	}
	return nil
}

// offsetWatcher reads a group's committed offsets and a topic's high
// watermarks through one long-lived client: the benchmark reads them every
// few milliseconds, which dev's committed() — a new client per call — is
// too slow for.
type offsetWatcher struct {
	c   *kafka.Consumer
	tps []kafka.TopicPartition
}

func newOffsetWatcher(brokers, group, topic string, partitions int) (*offsetWatcher, error) {
	c, err := kafka.NewConsumer(kafkaenv.Client(brokers, kafka.ConfigMap{"group.id": group, "enable.auto.commit": false}))
	if err != nil {
		return nil, err
	}
	w := &offsetWatcher{c: c}
	for p := 0; p < partitions; p++ {
		w.tps = append(w.tps, kafka.TopicPartition{Topic: &topic, Partition: int32(p)})
	}
	return w, nil
}

// committed returns the group's committed offset per partition (0 when
// none).
func (w *offsetWatcher) committed() ([]int64, error) {
	got, err := w.c.Committed(w.tps, 5000)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(w.tps))
	for _, tp := range got {
		if tp.Offset >= 0 && int(tp.Partition) < len(out) {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out, nil
}

// high returns the high watermark per partition of topic (the watcher's
// topic when empty).
func (w *offsetWatcher) high(topic string) ([]int64, error) {
	if topic == "" {
		topic = *w.tps[0].Topic
	}
	out := make([]int64, len(w.tps))
	for p := range out {
		_, hi, err := w.c.QueryWatermarkOffsets(topic, int32(p), 5000)
		if err != nil {
			return nil, err
		}
		out[p] = hi
	}
	return out, nil
}

func (w *offsetWatcher) close() { kafkaenv.CloseConsumer(w.c) }

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// commitObs is one observed advance of a partition's committed offset:
// every offset below Offset was committed by At at the latest.
type commitObs struct {
	Offset int64
	At     time.Time
}

// commitSampler polls the committed offsets every interval and records
// each advance per partition.
type commitSampler struct {
	w    *offsetWatcher
	mu   sync.Mutex
	obs  [][]commitObs
	last []int64
	err  error
	stop chan struct{}
	done chan struct{}
}

func startCommitSampler(w *offsetWatcher, every time.Duration) *commitSampler {
	s := &commitSampler{w: w, obs: make([][]commitObs, len(w.tps)), last: make([]int64, len(w.tps)),
		stop: make(chan struct{}), done: make(chan struct{})}
	for i := range s.last {
		s.last[i] = -1
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *commitSampler) sample() {
	got, err := s.w.committed()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return
	}
	for p, o := range got {
		if o > s.last[p] {
			s.last[p] = o
			s.obs[p] = append(s.obs[p], commitObs{o, now})
		}
	}
}

// current returns the committed offsets last seen.
func (s *commitSampler) current() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.last...)
}

func (s *commitSampler) close() []([]commitObs) {
	close(s.stop)
	<-s.done
	return s.obs
}

// commitTime is when offset of partition was first seen committed.
func commitTime(obs []commitObs, offset int64) (time.Time, bool) {
	i := sort.Search(len(obs), func(i int) bool { return obs[i].Offset > offset })
	if i == len(obs) {
		return time.Time{}, false
	}
	return obs[i].At, true
}

// produced is a message of the paced run: when Produce was called, and
// where the broker put it.
type produced struct {
	at        time.Time
	acked     time.Time // its delivery report
	partition int32
	offset    int64
	ok        bool
}

// pacedProduce produces count events from next at rate per second and
// returns each message's produce time and position once all were
// acknowledged. Message i is due at start + i/rate; every millisecond the
// messages that are due are produced (a timer per message would cost more
// wake-ups than the consumer under test). The events are generated before
// the clock starts, so their JSON encoding does not compete with the
// consumer either.
//
// The producer is warmed up first: one message to benchWarmupTopic,
// acknowledged, before the clock starts. A new producer's first messages
// wait for its connections and its idempotent producer id; in a first
// try that took up to half a second, and the paced run's first second
// measured the producer's start and the consumer's catching up with it.
//
// linger.ms is 5, librdkafka's default and what a producer of the platform
// runs with: with 0, every message became a message set of its own, and the
// in-process broker, which finds a fetch's offset by walking the
// partition's message sets one by one, spent a third of a core on it. The
// produce time is stamped when Produce is called, so the linger counts in
// the latency.
func pacedProduce(ctx context.Context, brokers string, next func() demo.Event, count int, rate float64) ([]produced, error) {
	events := make([]demo.Event, count)
	for i := range events {
		events[i] = next()
	}
	p, err := devenv.NewLoadProducer(brokers, 5)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := warmUp(ctx, p); err != nil {
		return nil, err
	}
	recs := make([]produced, count)
	var mu sync.Mutex
	var deliveryErr error
	acked := make(chan struct{})
	go func() {
		n := 0
		for ev := range p.Events() {
			m, ok := ev.(*kafka.Message)
			if !ok {
				continue
			}
			i := m.Opaque.(int)
			mu.Lock()
			if m.TopicPartition.Error != nil {
				deliveryErr = m.TopicPartition.Error
			} else {
				recs[i].partition, recs[i].offset, recs[i].ok = m.TopicPartition.Partition, int64(m.TopicPartition.Offset), true
				recs[i].acked = time.Now()
			}
			mu.Unlock()
			if n++; n == count {
				close(acked)
				return
			}
		}
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for i := 0; i < count; {
		due := min(count, int(time.Since(start).Seconds()*rate)+1)
		for ; i < due; i++ {
			e, topic := events[i], events[i].Topic
			mu.Lock()
			recs[i].at = time.Now()
			mu.Unlock()
			if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
				Key: e.Key, Value: e.Value, Opaque: i}, nil); err != nil {
				return nil, err
			}
			events[i] = demo.Event{} // produced: let it go
		}
		if i == count {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	select {
	case <-acked:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		return nil, errors.New("paced run: the broker did not acknowledge every message in 60 s")
	}
	mu.Lock()
	defer mu.Unlock()
	return recs, deliveryErr
}

// warmUp produces one message to benchWarmupTopic and waits for its
// acknowledgement.
func warmUp(ctx context.Context, p *kafka.Producer) error {
	topic := benchWarmupTopic
	ack := make(chan kafka.Event, 1)
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Value: []byte("warm-up")}, ack); err != nil {
		return err
	}
	select {
	case ev := <-ack:
		if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
			return fmt.Errorf("paced run: warm-up message: %w", m.TopicPartition.Error)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return errors.New("paced run: the warm-up message was not acknowledged in 30 s")
	}
}

// The in-process broker (librdkafka's mock cluster) keeps at most 5 MiB of
// messages per partition and silently drops the oldest message sets beyond
// that (rdkafka_mock.c: mpart->max_size, not configurable), so a topic can
// hold only ~14,000 messenger or ~70,000 rewards events. The benchmark
// therefore pre-produces up to feedBudget bytes per partition and, while the
// consumer runs, produces the rest ahead of it, keeping at most feedBudget
// of not-yet-committed messages per partition: nothing is dropped, and the
// consumer never waits for data (the producer is an order of magnitude
// faster than any consumer).
const (
	feedBudget     = 4 << 20
	recordOverhead = 64 // bytes per record besides key and value, roughly
	feedChunk      = 500
)

// feeder produces events and knows, from the delivery reports, each
// partition's high watermark and the average size of its messages.
type feeder struct {
	p        *kafka.Producer
	closed   sync.Once
	mu       sync.Mutex
	high     []int64
	bytes    []int64
	produced int
	acked    int
	err      error
}

func newFeeder(brokers string, partitions int) (*feeder, error) {
	p, err := devenv.NewLoadProducer(brokers, 5)
	if err != nil {
		return nil, err
	}
	f := &feeder{p: p, high: make([]int64, partitions), bytes: make([]int64, partitions)}
	go func() {
		for ev := range p.Events() {
			m, ok := ev.(*kafka.Message)
			if !ok {
				continue
			}
			f.mu.Lock()
			f.acked++
			if m.TopicPartition.Error != nil {
				f.err = m.TopicPartition.Error
			} else if pt := int(m.TopicPartition.Partition); pt < len(f.high) {
				f.high[pt] = max(f.high[pt], int64(m.TopicPartition.Offset)+1)
				f.bytes[pt] += int64(len(m.Key) + len(m.Value) + recordOverhead)
			}
			f.mu.Unlock()
		}
	}()
	return f, nil
}

// close flushes and closes the producer; later calls do nothing.
func (f *feeder) close() { f.closed.Do(func() { f.p.Flush(5000); f.p.Close() }) }

// produce produces count events from next and waits for their delivery
// reports.
func (f *feeder) produce(ctx context.Context, next func() demo.Event, count int) error {
	for i := 0; i < count; i++ {
		e := next()
		topic := e.Topic
		for {
			err := f.p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: e.Key, Value: e.Value}, nil)
			var ke kafka.Error
			if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
				f.p.Flush(100)
				continue
			}
			if err != nil {
				return err
			}
			break
		}
		f.mu.Lock()
		f.produced++
		f.mu.Unlock()
	}
	for {
		f.mu.Lock()
		done, err := f.acked == f.produced, f.err
		f.mu.Unlock()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// state returns the number of events produced and the high watermarks.
func (f *feeder) state() (int, []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.produced, append([]int64(nil), f.high...)
}

// room reports whether another chunk fits under the budget in every
// partition, given the committed offsets.
func (f *feeder) room(committed []int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for _, h := range f.high {
		total += int(h)
	}
	for p, h := range f.high {
		if h == 0 {
			continue
		}
		avg := float64(f.bytes[p]) / float64(h)
		var done int64
		if p < len(committed) {
			done = max(committed[p], 0)
		}
		// A chunk lands on the partitions in proportion to what they got
		// so far; double it for safety.
		share := 2 * float64(feedChunk) * float64(h) / float64(max(total, 1))
		if (float64(h-done)+share)*avg > feedBudget {
			return false
		}
	}
	return true
}

// fill pre-produces up to n events, stopping when a partition would exceed
// the budget; it returns how many were produced.
func (f *feeder) fill(ctx context.Context, next func() demo.Event, n int, bar *term.Progress) (int, error) {
	for {
		produced, _ := f.state()
		if produced >= n || !f.room(nil) {
			return produced, nil
		}
		if err := f.produce(ctx, next, min(feedChunk, n-produced)); err != nil {
			return produced, err
		}
		produced, _ = f.state()
		bar.Set(produced)
	}
}
