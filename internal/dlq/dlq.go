// Package dlq reads the dead-letter topics of docs/contract.md §5 and
// sends their messages back to their source topics: the logic of `pinctl
// dlq list` (List) and `pinctl dlq replay` (Replay).
//
// A read assigns the topic's partitions one after the other and reads each
// from its start (or the filter's first offset) to its high watermark as it
// was when the read began: it joins no group and commits nothing. Every
// text it prints that came from a message goes through term.Printable (or
// term.PrintableJSON), so that a hostile message cannot write a control
// character to the operator's terminal nor a line of its own.
package dlq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/internal/kafkaenv"
)

// Headers a replay adds (and replaces): how many times the message went
// back to its source topic from a DLQ, and when it last did.
const (
	HeaderReplayCount = "x-replay-count"
	HeaderReplayedAt  = "x-replayed-at"
)

// readTimeout bounds how long a read waits for the next message of a
// partition that has not reached its high watermark yet.
const readTimeout = 15 * time.Second

// record is one DLQ message.
type record struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []kafka.Header
}

// header returns the value of the last header named key ("" when absent).
func (r *record) header(key string) string {
	v := ""
	for _, h := range r.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}

// deadLetteredAt is x-dlq-at, or the message timestamp when the header is
// missing or does not parse.
func (r *record) deadLetteredAt() time.Time {
	if t, err := time.Parse(time.RFC3339, r.header(consumer.HeaderDLQAt)); err == nil {
		return t
	}
	return r.Timestamp
}

// replayCount is x-replay-count: 0 when absent, an error when it is not a
// non-negative number.
func (r *record) replayCount() (int, error) {
	v := r.header(HeaderReplayCount)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q is not a count", HeaderReplayCount, v)
	}
	return n, nil
}

// partitionRange is what a read covers of one partition: [start, end).
type partitionRange struct {
	partition  int32
	start, end int64
}

// ranges returns, per selected partition of topic in partition order, the
// offsets to read: from the low watermark (or the filter's From) up to the
// high watermark as it is now (or the filter's To + 1).
func ranges(c *kafka.Consumer, topic string, f Filter) ([]partitionRange, error) {
	ids, err := kafkaenv.Partitions(c, topic)
	if err != nil {
		return nil, err
	}
	n := int32(len(ids))
	if f.Partition >= n {
		return nil, fmt.Errorf("topic %s has no partition %d (it has %d)", topic, f.Partition, n)
	}
	var out []partitionRange
	for p := range n {
		if f.Partition >= 0 && p != f.Partition {
			continue
		}
		lo, hi, err := c.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s [%d]: %w", topic, p, err)
		}
		r := partitionRange{partition: p, start: lo, end: hi}
		if f.From > r.start {
			r.start = f.From
		}
		if f.To >= 0 && f.To+1 < r.end {
			r.end = f.To + 1
		}
		out = append(out, r)
	}
	return out, nil
}

// newReader returns an assign-only consumer: it never joins a group and
// never commits.
func newReader(brokers string) (*kafka.Consumer, error) {
	c, err := kafka.NewConsumer(kafkaenv.Client(brokers, kafka.ConfigMap{
		"group.id":                 "pinctl-dlq-reader", // required by the client; never joined
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"enable.partition.eof":     true,
		"auto.offset.reset":        "earliest",
		"fetch.wait.max.ms":        100,
		"log.connection.close":     false,
	}))
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	return c, nil
}

// read reads topic partition by partition, in offset order, from each
// partition's start to its high watermark as it was when the read began,
// and calls fn for every message the filter matches. fn returns false to
// stop.
func read(ctx context.Context, brokers, topic string, f Filter, fn func(*record) bool) error {
	c, err := newReader(brokers)
	if err != nil {
		return err
	}
	defer kafkaenv.CloseConsumer(c)
	rs, err := ranges(c, topic, f)
	if err != nil {
		return err
	}
	return readRanges(ctx, c, topic, rs, f, fn)
}

// readRanges is read over ranges rs (of ranges, for c): a second read of
// the same rs sees the same messages, none produced since. readTimeout
// bounds each wait for the next message, not the time fn takes.
func readRanges(ctx context.Context, c *kafka.Consumer, topic string, rs []partitionRange, f Filter, fn func(*record) bool) error {
	for _, r := range rs {
		if r.start >= r.end {
			continue
		}
		if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: r.partition, Offset: kafka.Offset(r.start)}}); err != nil {
			return fmt.Errorf("assign %s [%d]: %w", topic, r.partition, err)
		}
		next := r.start
		last := time.Now()
		for next < r.end {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Since(last) > readTimeout {
				return fmt.Errorf("%s [%d]: no message for %s at offset %d (high watermark %d)", topic, r.partition, readTimeout, next, r.end)
			}
			switch ev := c.Poll(100).(type) {
			case *kafka.Message:
				if ev.TopicPartition.Error != nil {
					return fmt.Errorf("read %s [%d]: %w", topic, r.partition, ev.TopicPartition.Error)
				}
				off := int64(ev.TopicPartition.Offset)
				if ev.TopicPartition.Partition != r.partition || off < next {
					continue
				}
				last = time.Now()
				if off >= r.end { // produced after the read began
					next = r.end
					continue
				}
				next = off + 1
				rec := &record{Partition: r.partition, Offset: off, Timestamp: ev.Timestamp,
					Key: ev.Key, Value: ev.Value, Headers: ev.Headers}
				if f.match(rec) {
					if !fn(rec) {
						return nil
					}
					last = time.Now() // fn's own time is not a wait for the broker
				}
			case kafka.PartitionEOF:
				// The end of the log: with gaps in the offsets (compaction,
				// transaction markers) the last offset may be below end-1.
				if ev.Partition == r.partition && int64(ev.Offset) >= r.end {
					next = r.end
				}
			case kafka.Error:
				if ev.IsFatal() {
					return fmt.Errorf("read %s: %w", topic, ev)
				}
			}
		}
	}
	if err := c.Unassign(); err != nil {
		return fmt.Errorf("unassign %s: %w", topic, err)
	}
	return nil
}
