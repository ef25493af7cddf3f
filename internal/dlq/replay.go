package dlq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/internal/kafkaenv"
	"github.com/pin-platform/pin/internal/term"
)

// ReplayOptions are the arguments of Replay: `dlq replay`'s.
type ReplayOptions struct {
	Brokers, Topic string // the DLQ topic and where it is
	Filter         Filter
	DryRun         bool             // print what would be replayed; produce nothing
	MaxReplays     int              // refuse a message whose x-replay-count is already ≥ this (≥ 1)
	Timeout        time.Duration    // for each delivery to be confirmed; 0: a minute
	Now            func() time.Time // the clock of x-replayed-at; nil: time.Now
	// Confirm is asked once the selection is known and the plan printed
	// (not in a dry run); nil: no question.
	Confirm func() (bool, error)
	// Progress, when not nil, is called as deliveries are confirmed, with
	// how many of the total are done and the counts so far.
	Progress func(done, total int, so Counts)
	// InFlight bounds the messages produced and awaiting their delivery
	// report, the only ones a replay holds (0: DefaultInFlight).
	InFlight int

	held func(n int) // tests: called with the number held whenever it changes
}

// Counts is what a replay did; String is the line `dlq replay` ends with.
type Counts struct {
	Selected int // matched the filter
	Replayed int // delivered to the source topic (would be, in a dry run)
	Refused  int // replayed MaxReplays times already, or without its value or whole key (see valueMissing, keyCut)
	Failed   int // not delivered, or not replayable (no source topic)
}

func (c Counts) String() string {
	return fmt.Sprintf("selected %d, replayed %d, refused %d, failed %d", c.Selected, c.Replayed, c.Refused, c.Failed)
}

// replayJob is a selected DLQ message and the message it becomes.
type replayJob struct {
	from *record
	msg  *kafka.Message
}

// dropOnReplay reports whether a DLQ message's header is left out of the
// replayed message: the DLQ's own headers (the consumer writes fresh ones
// if the message fails again) and the replay headers being replaced.
func dropOnReplay(key string) bool {
	switch key {
	case consumer.HeaderSourceTopic, consumer.HeaderConsumerGroup, consumer.HeaderAttempts,
		HeaderReplayCount, HeaderReplayedAt:
		return true
	}
	return strings.HasPrefix(key, "x-dlq-") || strings.HasPrefix(key, "x-original-")
}

// replayMessage builds the message a DLQ record is replayed as: its source
// topic and original partition, the original key and value, the original
// headers, x-replay-count = count and x-replayed-at = now.
func replayMessage(r *record, count int, now time.Time) (*kafka.Message, error) {
	topic := r.header(consumer.HeaderSourceTopic)
	if topic == "" {
		return nil, fmt.Errorf("no %s header", consumer.HeaderSourceTopic)
	}
	p, err := strconv.ParseInt(r.header(consumer.HeaderOriginalPartition), 10, 32)
	if err != nil || p < 0 {
		return nil, fmt.Errorf("%s %q is not a partition", consumer.HeaderOriginalPartition, r.header(consumer.HeaderOriginalPartition))
	}
	hs := make([]kafka.Header, 0, len(r.Headers)+2)
	for _, h := range r.Headers {
		if !dropOnReplay(h.Key) {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		kafka.Header{Key: HeaderReplayCount, Value: []byte(strconv.Itoa(count))},
		kafka.Header{Key: HeaderReplayedAt, Value: []byte(now.UTC().Format(time.RFC3339))})
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: int32(p)},
		Key:            r.Key,
		Value:          r.Value,
		Headers:        hs,
	}, nil
}

// valueMissing says why a DLQ message cannot be replayed for want of its
// value, "" when it has one. A dead letter too large for the DLQ is
// published without its value (consumer.HeaderValueOmitted): produced as
// it is, it would land on the source topic as a tombstone (a null value),
// and so would any message without a value.
func valueMissing(r *record) string {
	for _, h := range r.Headers {
		if h.Key == consumer.HeaderValueOmitted {
			return fmt.Sprintf("its value was too large for the DLQ and left out of it (%s: %s bytes)",
				consumer.HeaderValueOmitted, term.Printable(string(h.Value)))
		}
	}
	if len(r.Value) == 0 {
		return "it has no value"
	}
	return ""
}

// keyCut says why a DLQ message cannot be replayed for want of its whole
// key, "" when it has it: a dead letter too large for the DLQ even
// without its headers and value is published with its key cut
// (consumer.HeaderKeyTruncated).
func keyCut(r *record) string {
	for _, h := range r.Headers {
		if h.Key == consumer.HeaderKeyTruncated {
			return fmt.Sprintf("its key was too large for the DLQ and cut (%s: %s bytes)",
				consumer.HeaderKeyTruncated, term.Printable(string(h.Value)))
		}
	}
	return ""
}

// recoveryHint says where the original of a dead letter is (its source
// topic, partition and offset) and how to read it from there. A command
// line is given only when the headers hold a legal topic name and numbers,
// so that it can be pasted as it is.
func recoveryHint(r *record, brokers string) string {
	topic := r.header(consumer.HeaderSourceTopic)
	p, perr := strconv.ParseInt(r.header(consumer.HeaderOriginalPartition), 10, 32)
	off, oerr := strconv.ParseInt(r.header(consumer.HeaderOriginalOffset), 10, 64)
	if !kafkaTopicName(topic) || perr != nil || p < 0 || oerr != nil || off < 0 {
		return fmt.Sprintf("its headers do not say where the original is (%s %s, %s %s, %s %s)",
			consumer.HeaderSourceTopic, strconv.Quote(topic),
			consumer.HeaderOriginalPartition, strconv.Quote(r.header(consumer.HeaderOriginalPartition)),
			consumer.HeaderOriginalOffset, strconv.Quote(r.header(consumer.HeaderOriginalOffset)))
	}
	return fmt.Sprintf("recover the original from %s partition %d offset %d while the topic's retention keeps it: kcat -C -b %s -t %s -p %d -o %d -c 1",
		topic, p, off, shellWord(brokers), topic, p, off)
}

// kafkaTopicName reports whether s is a legal Kafka topic name: 1 to 249
// of [a-zA-Z0-9._-].
func kafkaTopicName(s string) bool {
	if s == "" || len(s) > 249 {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return !asciiWordChar(r, "._-") })
}

// asciiWordChar reports whether r is an ASCII letter or digit or one of
// others.
func asciiWordChar(r rune, others string) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(others, r)
}

// shellWord is s as one word of a POSIX shell command line: as it is when
// it holds no character the shell would interpret, single-quoted otherwise.
func shellWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !asciiWordChar(r, "._-:,/@+=%") }) {
		return s
	}
	return term.Printable("'" + strings.ReplaceAll(s, "'", `'\''`) + "'")
}

// describeJob is one line about a DLQ message and where it goes, its
// fields printable.
func describeJob(r *record, m *kafka.Message) string {
	id := "unreadable envelope"
	if len(r.Value) == 0 {
		id = "no value"
	} else if env, err := summarizeEnvelope(r.Value); err == nil {
		id = "MessageId " + env.MessageID
	}
	s := fmt.Sprintf("p%d@%d %s (%s, key %s)", r.Partition, r.Offset, orDash(term.Printable(r.header(consumer.HeaderErrorCode))), id, printableKey(r.Key))
	if m != nil {
		s += fmt.Sprintf(" → %s p%d", term.Printable(*m.TopicPartition.Topic), m.TopicPartition.Partition)
	}
	return s
}

// verdict is what a replay does with a selected DLQ message.
type verdict int

const (
	replayIt verdict = iota
	refuseIt
	failIt
)

// judge decides on a selected DLQ message: the message it is replayed as,
// or why it is refused or fails (the line to print).
func judge(r *record, o ReplayOptions, now time.Time) (*kafka.Message, verdict, string) {
	if why := valueMissing(r); why != "" {
		return nil, refuseIt, fmt.Sprintf("refused  %s: %s, and replayed it would be a tombstone on its source topic; %s",
			describeJob(r, nil), why, recoveryHint(r, o.Brokers))
	}
	if why := keyCut(r); why != "" {
		return nil, refuseIt, fmt.Sprintf("refused  %s: %s, and replayed it would carry another key; %s",
			describeJob(r, nil), why, recoveryHint(r, o.Brokers))
	}
	n, err := r.replayCount()
	if err != nil {
		return nil, failIt, fmt.Sprintf("failed   %s: %s", describeJob(r, nil), term.Printable(err.Error()))
	}
	if n >= o.MaxReplays {
		return nil, refuseIt, fmt.Sprintf("refused  %s: replayed %d time(s) already (--max-replays %d)", describeJob(r, nil), n, o.MaxReplays)
	}
	m, err := replayMessage(r, n+1, now)
	if err == nil && *m.TopicPartition.Topic == o.Topic {
		err = errors.New("its source topic is the DLQ topic itself")
	}
	if err != nil {
		return nil, failIt, fmt.Sprintf("failed   %s: cannot replay: %s", describeJob(r, nil), term.Printable(err.Error()))
	}
	return m, replayIt, fmt.Sprintf("would replay %s (%s %d)", describeJob(r, m), HeaderReplayCount, n+1)
}

// DefaultInFlight is ReplayOptions.InFlight's default.
const DefaultInFlight = 1000

// Replay re-produces the selected messages of a DLQ topic to their source
// topic (x-source-topic) and original partition (x-original-partition),
// with the original key, value and headers less the DLQ's own and with
// x-replay-count (previous + 1) and x-replayed-at, through an idempotent
// producer (acks=all), and waits for every delivery report. A message
// replayed MaxReplays times already, or without its value (it would be a
// tombstone), is refused and counted, and its line says why (and where the
// original is). Lines about refused, failed and (in a dry run) every
// message go to out. The error is nil when the read succeeded and every
// delivery was confirmed; a refused or failed message is not an error, the
// counts say it.
//
// It reads the DLQ twice, over the same offsets (the high watermarks of
// when it began): once to select, count and print the plan before o.Confirm
// is asked, once to produce each message as it is read. It holds no more
// than o.InFlight messages at a time (those awaiting their delivery
// report), whatever the DLQ's size, and each wait — for the next message of
// the DLQ, for a delivery report — has a deadline of its own (readTimeout,
// o.Timeout), none the whole replay: a large DLQ replays fully. A DLQ read
// by no group has no progress to commit: a replay cut short is run again
// (a message replayed twice is a duplicate the consumers skip).
func Replay(ctx context.Context, o ReplayOptions, out io.Writer) (Counts, error) {
	var c Counts
	if o.MaxReplays < 1 {
		return c, errors.New("dlq replay: max replays must be ≥ 1")
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	reader, err := newReader(o.Brokers)
	if err != nil {
		return c, fmt.Errorf("dlq replay: %w", err)
	}
	defer kafkaenv.CloseConsumer(reader)
	rs, err := ranges(reader, o.Topic, o.Filter)
	if err != nil {
		return c, fmt.Errorf("dlq replay: %w", err)
	}

	// Select first: the counts and targets are known before anything is
	// produced, and the second read stops at the same offsets, so that a
	// message replayed into a topic that is also read here cannot be
	// picked up twice.
	targets := map[string]map[int32]bool{}
	jobs := 0
	err = readRanges(ctx, reader, o.Topic, rs, o.Filter, func(r *record) bool {
		c.Selected++
		m, v, line := judge(r, o, now())
		switch v {
		case refuseIt:
			c.Refused++
		case failIt:
			c.Failed++
		case replayIt:
			jobs++
			t := *m.TopicPartition.Topic
			if targets[t] == nil {
				targets[t] = map[int32]bool{}
			}
			targets[t][m.TopicPartition.Partition] = true
			if !o.DryRun {
				return true
			}
		}
		fmt.Fprintln(out, line)
		return true
	})
	if err != nil {
		return c, fmt.Errorf("dlq replay: %w", err)
	}
	if o.DryRun {
		c.Replayed = jobs
		return c, nil
	}
	if jobs == 0 {
		return c, nil
	}
	plan := fmt.Sprintf("replay %d message(s) from %s to %s", jobs, o.Topic, replayTargets(targets))
	if c.Refused+c.Failed > 0 {
		plan += fmt.Sprintf(" (not the %d refused and %d failed above)", c.Refused, c.Failed)
	}
	fmt.Fprintln(out, plan)
	if o.Confirm != nil {
		yes, err := o.Confirm()
		if err != nil {
			return c, fmt.Errorf("dlq replay: %w", err)
		}
		if !yes {
			return c, errors.New("dlq replay: not confirmed: nothing produced")
		}
	}

	p, err := newReplayProducer(o, out, func(ok, bad int) {
		if o.Progress != nil {
			so := c
			so.Replayed, so.Failed = c.Replayed+ok, c.Failed+bad
			o.Progress(ok+bad, jobs, so)
		}
	})
	if err != nil {
		return c, fmt.Errorf("dlq replay: %w", err)
	}
	defer p.close()
	var sendErr error
	err = readRanges(ctx, reader, o.Topic, rs, o.Filter, func(r *record) bool {
		m, v, _ := judge(r, o, now())
		if v != replayIt {
			return true // counted and printed by the selection
		}
		sendErr = p.send(ctx, &replayJob{from: r, msg: m})
		return sendErr == nil
	})
	err = errors.Join(err, sendErr)
	if err == nil {
		err = p.drain(ctx)
	}
	c.Replayed += p.ok
	c.Failed += p.bad + p.pending // a delivery not confirmed is not delivered
	if err != nil {
		return c, fmt.Errorf("dlq replay: %w", err)
	}
	return c, nil
}

// replayTargets names the topics and partitions messages go to:
// "pin.a.v1 partitions 0, 2", several topics joined by "; ".
func replayTargets(parts map[string]map[int32]bool) string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(parts)) {
		var ps []string
		for _, p := range slices.Sorted(maps.Keys(parts[t])) {
			ps = append(ps, strconv.Itoa(int(p)))
		}
		word := "partitions"
		if len(ps) == 1 {
			word = "partition"
		}
		out = append(out, fmt.Sprintf("%s %s %s", term.Printable(t), word, strings.Join(ps, ", ")))
	}
	return strings.Join(out, "; ")
}

// replayProducer produces replayed messages and counts their delivery
// reports, with at most inFlight of them awaiting one.
type replayProducer struct {
	p        *kafka.Producer
	reports  chan kafka.Event
	out      io.Writer
	timeout  time.Duration // one wait for a delivery report
	inFlight int
	progress func(ok, bad int)
	held     func(n int) // ReplayOptions.held

	pending, ok, bad int
}

func newReplayProducer(o ReplayOptions, out io.Writer, progress func(ok, bad int)) (*replayProducer, error) {
	p, err := kafka.NewProducer(kafkaenv.Client(o.Brokers, kafka.ConfigMap{
		"enable.idempotence":   true,
		"acks":                 "all",
		"linger.ms":            5,
		"message.timeout.ms":   int(o.Timeout / time.Millisecond),
		"log.connection.close": false,
	}))
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	go func() { // events not tied to a delivery channel: errors, logs
		for ev := range p.Events() {
			if e, isErr := ev.(kafka.Error); isErr && e.IsFatal() {
				fmt.Fprintf(out, "producer: %v\n", e)
			}
		}
	}()
	held := o.held
	if held == nil {
		held = func(int) {}
	}
	return &replayProducer{p: p, reports: make(chan kafka.Event, o.InFlight), out: out, timeout: o.Timeout,
		inFlight: o.InFlight, progress: progress, held: held}, nil
}

func (rp *replayProducer) close() { rp.p.Close() }

// send produces j once fewer than inFlight messages await their report
// (waiting for one, within its own deadline, when as many do).
func (rp *replayProducer) send(ctx context.Context, j *replayJob) error {
	for rp.pending >= rp.inFlight {
		if err := rp.wait(ctx); err != nil {
			return err
		}
	}
	j.msg.Opaque = j
	for {
		err := rp.p.Produce(j.msg, rp.reports)
		if err == nil {
			rp.pending++
			rp.held(rp.pending)
			return nil
		}
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull && rp.pending > 0 {
			if err := rp.wait(ctx); err != nil {
				return err
			}
			continue
		}
		rp.bad++
		fmt.Fprintf(rp.out, "failed   %s: %s\n", describeJob(j.from, j.msg), term.Printable(err.Error()))
		rp.progress(rp.ok, rp.bad)
		return nil
	}
}

// drain waits for every outstanding report, each within its own deadline.
func (rp *replayProducer) drain(ctx context.Context) error {
	for rp.pending > 0 {
		if err := rp.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// wait takes one delivery report. librdkafka reports a message it could
// not deliver within message.timeout.ms itself; the deadline here is for a
// producer that reports nothing at all.
func (rp *replayProducer) wait(ctx context.Context) error {
	deadline := time.NewTimer(rp.timeout + 5*time.Second)
	defer deadline.Stop()
	select {
	case ev := <-rp.reports:
		rp.pending--
		rp.held(rp.pending)
		m, isMsg := ev.(*kafka.Message)
		switch {
		case !isMsg:
			rp.bad++
			fmt.Fprintf(rp.out, "failed   unexpected delivery event %v\n", ev)
		case m.TopicPartition.Error != nil:
			rp.bad++
			what := "a message"
			if j, _ := m.Opaque.(*replayJob); j != nil {
				what = describeJob(j.from, j.msg)
			}
			fmt.Fprintf(rp.out, "failed   %s: %s\n", what, term.Printable(m.TopicPartition.Error.Error()))
		default:
			rp.ok++
		}
		rp.progress(rp.ok, rp.bad)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-deadline.C:
		return fmt.Errorf("no delivery report within %s, %d deliveries not confirmed", rp.timeout+5*time.Second, rp.pending)
	}
}
