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
	Timeout        time.Duration    // for every delivery to be confirmed; 0: a minute
	Now            func() time.Time // the clock of x-replayed-at; nil: time.Now
	// Confirm is asked once the selection is known and the plan printed
	// (not in a dry run); nil: no question.
	Confirm func() (bool, error)
	// Progress, when not nil, is called as deliveries are confirmed, with
	// how many of the total are done and the counts so far.
	Progress func(done, total int, so Counts)
}

// Counts is what a replay did; String is the line `dlq replay` ends with.
type Counts struct {
	Selected int // matched the filter
	Replayed int // delivered to the source topic (would be, in a dry run)
	Refused  int // replayed MaxReplays times already, or without its value (see valueMissing)
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

// Replay re-produces the selected messages of a DLQ topic to their source
// topic (x-source-topic) and original partition (x-original-partition),
// with the original key, value and headers less the DLQ's own and with
// x-replay-count (previous + 1) and x-replayed-at, through an idempotent
// producer (acks=all), and waits for every delivery report. It selects
// first, prints the plan and asks o.Confirm, then produces. A message
// replayed MaxReplays times already, or without its value (it would be a
// tombstone), is refused and counted, and its line says why (and where the
// original is). Lines about refused, failed and (in a dry run) every
// message go to out. The error is nil when the read succeeded and every
// delivery was confirmed; a refused or failed message is not an error, the
// counts say it.
func Replay(ctx context.Context, o ReplayOptions, out io.Writer) (Counts, error) {
	var c Counts
	if o.MaxReplays < 1 {
		return c, errors.New("dlq replay: max replays must be ≥ 1")
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}

	// Select first: the counts are known before anything is produced, and
	// a message replayed into a topic that is also read here (a DLQ whose
	// source is itself) cannot be picked up twice.
	var jobs []replayJob
	err := read(ctx, o.Brokers, o.Topic, o.Filter, func(r *record) bool {
		c.Selected++
		if why := valueMissing(r); why != "" {
			c.Refused++
			fmt.Fprintf(out, "refused  %s: %s, and replayed it would be a tombstone on its source topic; %s\n",
				describeJob(r, nil), why, recoveryHint(r, o.Brokers))
			return true
		}
		n, err := r.replayCount()
		if err != nil {
			c.Failed++
			fmt.Fprintf(out, "failed   %s: %s\n", describeJob(r, nil), term.Printable(err.Error()))
			return true
		}
		if n >= o.MaxReplays {
			c.Refused++
			fmt.Fprintf(out, "refused  %s: replayed %d time(s) already (--max-replays %d)\n", describeJob(r, nil), n, o.MaxReplays)
			return true
		}
		m, err := replayMessage(r, n+1, now())
		if err == nil && *m.TopicPartition.Topic == o.Topic {
			err = errors.New("its source topic is the DLQ topic itself")
		}
		if err != nil {
			c.Failed++
			fmt.Fprintf(out, "failed   %s: cannot replay: %s\n", describeJob(r, nil), term.Printable(err.Error()))
			return true
		}
		if o.DryRun {
			fmt.Fprintf(out, "would replay %s (%s %d)\n", describeJob(r, m), HeaderReplayCount, n+1)
		}
		jobs = append(jobs, replayJob{from: r, msg: m})
		return true
	})
	if err != nil {
		return c, fmt.Errorf("dlq replay: %w", err)
	}
	if o.DryRun {
		c.Replayed = len(jobs)
		return c, nil
	}
	if len(jobs) == 0 {
		return c, nil
	}
	plan := fmt.Sprintf("replay %d message(s) from %s to %s", len(jobs), o.Topic, replayTargets(jobs))
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
	delivered, failed, err := produceReplays(ctx, o.Brokers, jobs, o.Timeout, out, func(ok, bad int) {
		if o.Progress != nil {
			so := c
			so.Replayed, so.Failed = c.Replayed+ok, c.Failed+bad
			o.Progress(ok+bad, len(jobs), so)
		}
	})
	c.Replayed += delivered
	c.Failed += failed
	if err != nil {
		return c, fmt.Errorf("dlq replay: %w", err)
	}
	return c, nil
}

// replayTargets names the topics and partitions jobs go to:
// "pin.a.v1 partitions 0, 2", several topics joined by "; ".
func replayTargets(jobs []replayJob) string {
	parts := map[string]map[int32]bool{}
	for _, j := range jobs {
		t := *j.msg.TopicPartition.Topic
		if parts[t] == nil {
			parts[t] = map[int32]bool{}
		}
		parts[t][j.msg.TopicPartition.Partition] = true
	}
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

// produceReplays produces jobs in order and waits for each delivery report
// (within timeout). It returns how many were delivered and how many failed;
// the error says the wait was cut short (ctx, timeout) or the producer
// could not be created.
func produceReplays(ctx context.Context, brokers string, jobs []replayJob, timeout time.Duration, out io.Writer, progress func(ok, bad int)) (ok, bad int, err error) {
	p, err := kafka.NewProducer(kafkaenv.Client(brokers, kafka.ConfigMap{
		"enable.idempotence":   true,
		"acks":                 "all",
		"linger.ms":            5,
		"message.timeout.ms":   int(timeout / time.Millisecond),
		"log.connection.close": false,
	}))
	if err != nil {
		return 0, 0, fmt.Errorf("kafka producer: %w", err)
	}
	defer p.Close()
	go func() { // events not tied to a delivery channel: errors, logs
		for ev := range p.Events() {
			if e, isErr := ev.(kafka.Error); isErr && e.IsFatal() {
				fmt.Fprintf(out, "producer: %v\n", e)
			}
		}
	}()

	reports := make(chan kafka.Event, len(jobs))
	deadline := time.NewTimer(timeout + 5*time.Second) // librdkafka reports a timeout itself first
	defer deadline.Stop()
	pending := 0
	report := func(ev kafka.Event) {
		pending--
		m, isMsg := ev.(*kafka.Message)
		if !isMsg {
			bad++
			fmt.Fprintf(out, "failed   unexpected delivery event %v\n", ev)
		} else if m.TopicPartition.Error != nil {
			bad++
			j, _ := m.Opaque.(*replayJob)
			what := "a message"
			if j != nil {
				what = describeJob(j.from, j.msg)
			}
			fmt.Fprintf(out, "failed   %s: %s\n", what, term.Printable(m.TopicPartition.Error.Error()))
		} else {
			ok++
		}
		progress(ok, bad)
	}
	wait := func() error {
		select {
		case ev := <-reports:
			report(ev)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%d deliveries not confirmed within %s", pending, timeout)
		}
	}
	for i := range jobs {
		jobs[i].msg.Opaque = &jobs[i]
		for {
			perr := p.Produce(jobs[i].msg, reports)
			if perr == nil {
				pending++
				break
			}
			var ke kafka.Error
			if errors.As(perr, &ke) && ke.Code() == kafka.ErrQueueFull && pending > 0 {
				if err := wait(); err != nil {
					return ok, bad + pending, err
				}
				continue
			}
			bad++
			fmt.Fprintf(out, "failed   %s: %s\n", describeJob(jobs[i].from, jobs[i].msg), term.Printable(perr.Error()))
			progress(ok, bad)
			break
		}
	}
	for pending > 0 {
		if err := wait(); err != nil {
			return ok, bad + pending, err
		}
	}
	return ok, bad, nil
}
