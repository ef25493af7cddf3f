package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/internal/term"
)

// `pinctl dlq list|replay`: the dead-letter topics of docs/contract.md §5, read
// from the beginning to their high watermarks by an assign-only consumer
// (no group membership, nothing committed).

func init() {
	register(command{
		name:    "dlq",
		summary: "dead-letter topics: list, replay",
		run: func(ctx context.Context, args []string) error {
			return subcommands(ctx, "dlq", dlqCommands, args)
		},
	})
}

var dlqCommands = []command{
	{name: "list", summary: "print the messages of a DLQ topic with their headers and envelope", run: func(ctx context.Context, args []string) error {
		return dlqListCmd(ctx, args, os.Stdout, os.Stderr)
	}},
	{name: "replay", summary: "re-produce DLQ messages to their source topic and partition", run: func(ctx context.Context, args []string) error {
		return dlqReplayCmd(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	}},
}

// Headers a replay adds (and replaces): how many times the message went
// back to its source topic from a DLQ, and when it last did.
const (
	headerReplayCount = "x-replay-count"
	headerReplayedAt  = "x-replayed-at"
)

// dlqReadTimeout bounds how long a read waits for the next message of a
// partition that has not reached its high watermark yet.
const dlqReadTimeout = 15 * time.Second

// dlqRecord is one DLQ message.
type dlqRecord struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	Headers   []kafka.Header
}

// header returns the value of the last header named key ("" when absent).
func (r *dlqRecord) header(key string) string {
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
func (r *dlqRecord) deadLetteredAt() time.Time {
	if t, err := time.Parse(time.RFC3339, r.header(consumer.HeaderDLQAt)); err == nil {
		return t
	}
	return r.Timestamp
}

// replayCount is x-replay-count: 0 when absent, an error when it is not a
// non-negative number.
func (r *dlqRecord) replayCount() (int, error) {
	v := r.header(headerReplayCount)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q is not a count", headerReplayCount, v)
	}
	return n, nil
}

// dlqFilter selects DLQ messages. Zero values select everything.
type dlqFilter struct {
	Code      string    // x-dlq-error-code equal to this
	Since     time.Time // dead-lettered at or after this
	Partition int32     // this DLQ partition only; -1: all
	From, To  int64     // DLQ offsets within [From, To]; -1: unbounded
}

func allDLQ() dlqFilter { return dlqFilter{Partition: -1, From: -1, To: -1} }

func (f dlqFilter) match(r *dlqRecord) bool {
	if f.Code != "" && r.header(consumer.HeaderErrorCode) != f.Code {
		return false
	}
	if !f.Since.IsZero() && r.deadLetteredAt().Before(f.Since) {
		return false
	}
	return true
}

// dlqFilterFlags registers the selection flags shared by list and replay.
type dlqFilterFlags struct {
	code, since, offsets *string
	partition            *int
}

func addDLQFilterFlags(fs *flag.FlagSet) dlqFilterFlags {
	return dlqFilterFlags{
		code:      fs.String("code", "", "only messages with this x-dlq-error-code (e.g. CRM_SELECTION_LEAD_NOT_FOUND)"),
		since:     fs.String("since", "", "only messages dead-lettered at or after this time: RFC 3339, or a duration back from now (2h, 30m)"),
		offsets:   fs.String("offset-range", "", "only DLQ offsets a-b (inclusive; a- or -b leave one end open)"),
		partition: fs.Int("partition", -1, "only this DLQ partition (default: all)"),
	}
}

func (ff dlqFilterFlags) filter(now time.Time) (dlqFilter, error) {
	f := allDLQ()
	f.Code = strings.TrimSpace(*ff.code)
	if *ff.partition < -1 {
		return f, usageError(fmt.Sprintf("--partition %d: not a partition", *ff.partition))
	}
	f.Partition = int32(*ff.partition)
	if s := strings.TrimSpace(*ff.since); s != "" {
		t, err := parseSince(s, now)
		if err != nil {
			return f, usageError("--since: " + err.Error())
		}
		f.Since = t
	}
	if s := strings.TrimSpace(*ff.offsets); s != "" {
		from, to, err := parseOffsetRange(s)
		if err != nil {
			return f, usageError("--offset-range: " + err.Error())
		}
		f.From, f.To = from, to
	}
	return f, nil
}

// parseSince reads an RFC 3339 time or a positive duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a positive duration", s)
	}
	return now.Add(-d), nil
}

// parseOffsetRange reads "a-b", "a-" or "-b" (inclusive); an open end is -1.
func parseOffsetRange(s string) (from, to int64, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want a-b", s)
	}
	from, to = -1, -1
	if a != "" {
		if from, err = strconv.ParseInt(a, 10, 64); err != nil || from < 0 {
			return 0, 0, fmt.Errorf("%q: %q is not an offset", s, a)
		}
	}
	if b != "" {
		if to, err = strconv.ParseInt(b, 10, 64); err != nil || to < 0 {
			return 0, 0, fmt.Errorf("%q: %q is not an offset", s, b)
		}
	}
	if a == "" && b == "" {
		return 0, 0, fmt.Errorf("%q: want a-b", s)
	}
	if from >= 0 && to >= 0 && to < from {
		return 0, 0, fmt.Errorf("%q: the range is empty", s)
	}
	return from, to, nil
}

// opBrokersFlag registers --brokers, defaulting to $KAFKA_BOOTSTRAP_SERVERS.
func opBrokersFlag(fs *flag.FlagSet) *string {
	return fs.String("brokers", os.Getenv("KAFKA_BOOTSTRAP_SERVERS"), "Kafka bootstrap servers (default $KAFKA_BOOTSTRAP_SERVERS)")
}

func opRequireFlag(fs *flag.FlagSet, name, value string) error {
	if strings.TrimSpace(value) == "" {
		fs.Usage()
		return usageError(fmt.Sprintf("%s: --%s is required", fs.Name(), name))
	}
	return nil
}

// dlqPartitionRange is what a read covers of one partition: [start, end).
type dlqPartitionRange struct {
	partition  int32
	start, end int64
}

// dlqRanges returns, per selected partition of topic in partition order,
// the offsets to read: from the low watermark (or the filter's From) up to
// the high watermark as it is now (or the filter's To + 1).
func dlqRanges(c *kafka.Consumer, topic string, f dlqFilter) ([]dlqPartitionRange, error) {
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	t, ok := md.Topics[topic]
	if !ok || t.Error.Code() != kafka.ErrNoError || len(t.Partitions) == 0 {
		return nil, fmt.Errorf("topic %s does not exist", topic)
	}
	n := int32(len(t.Partitions))
	if f.Partition >= n {
		return nil, fmt.Errorf("topic %s has no partition %d (it has %d)", topic, f.Partition, n)
	}
	var out []dlqPartitionRange
	for p := range n {
		if f.Partition >= 0 && p != f.Partition {
			continue
		}
		lo, hi, err := c.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s [%d]: %w", topic, p, err)
		}
		r := dlqPartitionRange{partition: p, start: lo, end: hi}
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

// newDLQReader returns an assign-only consumer: it never joins a group and
// never commits.
func newDLQReader(brokers string) (*kafka.Consumer, error) {
	return kafka.NewConsumer(kafkaConfig(brokers, kafka.ConfigMap{
		"group.id":                 "pinctl-dlq-reader", // required by the client; never joined
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"enable.partition.eof":     true,
		"auto.offset.reset":        "earliest",
		"fetch.wait.max.ms":        100,
		"log.connection.close":     false,
	}))
}

// opCloseConsumer closes c, giving up after 10 s (Close can hang when
// the broker is gone).
func opCloseConsumer(c *kafka.Consumer) {
	done := make(chan struct{})
	go func() { _ = c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// readDLQ reads topic partition by partition, in offset order, from each
// partition's start to its high watermark as it was when the read began,
// and calls fn for every message the filter matches. fn returns false to
// stop.
func readDLQ(ctx context.Context, brokers, topic string, f dlqFilter, fn func(*dlqRecord) bool) error {
	c, err := newDLQReader(brokers)
	if err != nil {
		return err
	}
	defer opCloseConsumer(c)
	ranges, err := dlqRanges(c, topic, f)
	if err != nil {
		return err
	}
	for _, r := range ranges {
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
			if time.Since(last) > dlqReadTimeout {
				return fmt.Errorf("%s [%d]: no message for %s at offset %d (high watermark %d)", topic, r.partition, dlqReadTimeout, next, r.end)
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
				rec := &dlqRecord{Partition: r.partition, Offset: off, Timestamp: ev.Timestamp,
					Key: ev.Key, Value: ev.Value, Headers: ev.Headers}
				if f.match(rec) && !fn(rec) {
					return nil
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
	return c.Unassign()
}

// envelopeSummary is the part of a message's envelope list and replay
// print.
type envelopeSummary struct {
	MessageID string    `json:"message_id"`
	EventType string    `json:"event_type"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

func summarizeEnvelope(value []byte) (envelopeSummary, error) {
	e, err := consumer.DecodeEnvelope(value)
	if err != nil {
		return envelopeSummary{}, err
	}
	return envelopeSummary{MessageID: e.MessageID.String(), EventType: e.EventType, CreatedAt: e.CreatedAt}, nil
}

// dlqPrintable shows a key as it may be printed (see term.Printable), and a
// null key as (null).
func dlqPrintable(b []byte) string {
	if b == nil {
		return "(null)"
	}
	return term.Printable(string(b))
}

// dlqEntry is one message as `dlq list --json` prints it (one JSON object
// per line).
type dlqEntry struct {
	Partition       int32             `json:"partition"`
	Offset          int64             `json:"offset"`
	Timestamp       time.Time         `json:"timestamp"`
	Code            string            `json:"code"`
	Attempts        *int              `json:"attempts,omitempty"`
	DLQAt           string            `json:"dlq_at,omitempty"`
	SourceTopic     string            `json:"source_topic,omitempty"`
	SourcePartition *int              `json:"source_partition,omitempty"`
	SourceOffset    *int64            `json:"source_offset,omitempty"`
	ConsumerGroup   string            `json:"consumer_group,omitempty"`
	Reason          string            `json:"reason,omitempty"`
	ReplayCount     int               `json:"replay_count,omitempty"`
	Key             string            `json:"key"`
	Envelope        *envelopeSummary  `json:"envelope,omitempty"`
	EnvelopeError   string            `json:"envelope_error,omitempty"`
	Headers         map[string]string `json:"headers"`
}

func newDLQEntry(r *dlqRecord) dlqEntry {
	e := dlqEntry{
		Partition:     r.Partition,
		Offset:        r.Offset,
		Timestamp:     r.Timestamp.UTC(),
		Code:          r.header(consumer.HeaderErrorCode),
		DLQAt:         r.header(consumer.HeaderDLQAt),
		SourceTopic:   r.header(consumer.HeaderSourceTopic),
		ConsumerGroup: r.header(consumer.HeaderConsumerGroup),
		Reason:        r.header(consumer.HeaderReason),
		Key:           string(r.Key),
		Headers:       map[string]string{},
	}
	if n, err := strconv.Atoi(r.header(consumer.HeaderAttempts)); err == nil {
		e.Attempts = &n
	}
	if n, err := strconv.Atoi(r.header(consumer.HeaderOriginalPartition)); err == nil {
		e.SourcePartition = &n
	}
	if n, err := strconv.ParseInt(r.header(consumer.HeaderOriginalOffset), 10, 64); err == nil {
		e.SourceOffset = &n
	}
	e.ReplayCount, _ = r.replayCount()
	if env, err := summarizeEnvelope(r.Value); err == nil {
		e.Envelope = &env
	} else {
		e.EnvelopeError = err.Error()
	}
	for _, h := range r.Headers {
		e.Headers[h.Key] = string(h.Value)
	}
	return e
}

// dlqOrDash is s, or "-" when s is empty.
func dlqOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeDLQEntry prints e for a person: a heading line and indented details.
// Every field from the message (key, headers, envelope) goes through
// term.Printable: the message cannot write a control character to the terminal
// nor a line of its own.
func writeDLQEntry(w io.Writer, e dlqEntry) {
	attempts := "-"
	if e.Attempts != nil {
		attempts = strconv.Itoa(*e.Attempts)
	}
	fmt.Fprintf(w, "p%d@%d  %s  attempts %s  dead-lettered %s\n", e.Partition, e.Offset, dlqOrDash(term.Printable(e.Code)), attempts, dlqOrDash(term.Printable(e.DLQAt)))
	src := dlqOrDash(term.Printable(e.SourceTopic))
	if e.SourcePartition != nil {
		src += fmt.Sprintf(" p%d", *e.SourcePartition)
	}
	if e.SourceOffset != nil {
		src += fmt.Sprintf("@%d", *e.SourceOffset)
	}
	if e.ConsumerGroup != "" {
		src += " (group " + term.Printable(e.ConsumerGroup) + ")"
	}
	fmt.Fprintf(w, "    source    %s\n", src)
	fmt.Fprintf(w, "    reason    %s\n", dlqOrDash(term.Printable(strings.Join(strings.Fields(e.Reason), " "))))
	key := dlqPrintable([]byte(e.Key))
	if size, omitted := e.Headers[consumer.HeaderValueOmitted]; omitted {
		fmt.Fprintf(w, "    envelope  value left out of the DLQ (%s: %s bytes): the original is at the source offset while its retention keeps it  key %s\n",
			consumer.HeaderValueOmitted, term.Printable(size), key)
	} else if e.Envelope != nil {
		fmt.Fprintf(w, "    envelope  MessageId %s  EventType %s  key %s\n", e.Envelope.MessageID, dlqOrDash(term.Printable(e.Envelope.EventType)), key)
	} else {
		fmt.Fprintf(w, "    envelope  unreadable envelope (%s)  key %s\n", term.Printable(e.EnvelopeError), key)
	}
	if e.ReplayCount > 0 {
		fmt.Fprintf(w, "    replayed  %d time(s), last at %s\n", e.ReplayCount, dlqOrDash(term.Printable(e.Headers[headerReplayedAt])))
	}
}

// dlqListOptions are the arguments of `dlq list`.
type dlqListOptions struct {
	Brokers, Topic string
	Filter         dlqFilter
	Limit          int // 0: no limit
	JSON           bool
}

// listDLQ prints the selected messages of a DLQ topic on out, and a
// one-line count on summary. It returns how many it printed.
func listDLQ(ctx context.Context, o dlqListOptions, out, summary io.Writer) (int, error) {
	n := 0
	var encErr error
	err := readDLQ(ctx, o.Brokers, o.Topic, o.Filter, func(r *dlqRecord) bool {
		e := newDLQEntry(r)
		if o.JSON {
			// One line per message: encoding/json escapes the C0 controls
			// (newlines included) and replaces invalid UTF-8; term.PrintableJSON
			// the other unprintable characters.
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if encErr = enc.Encode(e); encErr != nil {
				return false
			}
			if _, encErr = out.Write(term.PrintableJSON(b.Bytes())); encErr != nil {
				return false
			}
		} else {
			if n > 0 {
				fmt.Fprintln(out)
			}
			writeDLQEntry(out, e)
		}
		n++
		return o.Limit <= 0 || n < o.Limit
	})
	if err = errors.Join(err, encErr); err != nil {
		return n, fmt.Errorf("dlq list: %w", err)
	}
	what := "message(s)"
	if o.Limit > 0 && n == o.Limit {
		what += fmt.Sprintf(" (--limit %d reached)", o.Limit)
	}
	fmt.Fprintf(summary, "%d %s of %s\n", n, what, o.Topic)
	return n, nil
}

func dlqListCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dlq list", "dlq list --topic T [--brokers B] [--code C] [--since T|D] [--offset-range a-b] [--partition P] [--limit N] [--json]",
		"Reads a DLQ topic from the beginning to its high watermarks (assigning every\n"+
			"partition, joining no group, committing nothing) and prints each selected\n"+
			"message: partition@offset, x-dlq-error-code, x-attempts, x-dlq-at, the source\n"+
			"topic/partition/offset, the reason and the envelope (MessageId, EventType, key)\n"+
			"or \"unreadable envelope\". --json prints one JSON object per line instead.")
	fs.SetOutput(stderr)
	brokers := opBrokersFlag(fs)
	topic := fs.String("topic", "", "DLQ topic (required), e.g. pin.crm.selections-dlq.v1")
	ff := addDLQFilterFlags(fs)
	limit := fs.Int("limit", 0, "print at most N messages (0: all)")
	asJSON := fs.Bool("json", false, "one JSON object per message and line")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if err := opRequireFlag(fs, "brokers", *brokers); err != nil {
		return err
	}
	if err := opRequireFlag(fs, "topic", *topic); err != nil {
		return err
	}
	if *limit < 0 {
		return usageError("--limit: must be ≥ 0")
	}
	f, err := ff.filter(time.Now())
	if err != nil {
		return err
	}
	summary := stdout // after the listing; on stderr with --json, so stdout stays JSON lines
	if *asJSON {
		summary = stderr
	}
	if err := checkKafka(ctx, *brokers); err != nil {
		return err
	}
	_, err = listDLQ(ctx, dlqListOptions{Brokers: *brokers, Topic: *topic, Filter: f, Limit: *limit, JSON: *asJSON}, stdout, summary)
	return err
}
