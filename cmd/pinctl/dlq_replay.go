package main

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
	"github.com/pin-platform/pin/internal/term"
)

// dlqReplayOptions are the arguments of `dlq replay`.
type dlqReplayOptions struct {
	Brokers, Topic string
	Filter         dlqFilter
	DryRun         bool
	MaxReplays     int           // refuse a message whose x-replay-count is already ≥ this
	Timeout        time.Duration // for every delivery to be confirmed
	Now            func() time.Time
	// Confirm is asked once the selection is known and the plan printed
	// (not in a dry run); nil: no question.
	Confirm func() (bool, error)
}

// replayCounts is what a replay did.
type replayCounts struct {
	Selected int // matched the filter
	Replayed int // delivered to the source topic (would be, in a dry run)
	Refused  int // replayed MaxReplays times already, or without its value (see valueMissing)
	Failed   int // not delivered, or not replayable (no source topic)
}

func (c replayCounts) String() string {
	return fmt.Sprintf("selected %d, replayed %d, refused %d, failed %d", c.Selected, c.Replayed, c.Refused, c.Failed)
}

// replayJob is a selected DLQ message and the message it becomes.
type replayJob struct {
	from *dlqRecord
	msg  *kafka.Message
}

// dropOnReplay reports whether a DLQ message's header is left out of the
// replayed message: the DLQ's own headers (the consumer writes fresh ones
// if the message fails again) and the replay headers being replaced.
func dropOnReplay(key string) bool {
	switch key {
	case consumer.HeaderSourceTopic, consumer.HeaderConsumerGroup, consumer.HeaderAttempts,
		headerReplayCount, headerReplayedAt:
		return true
	}
	return strings.HasPrefix(key, "x-dlq-") || strings.HasPrefix(key, "x-original-")
}

// replayMessage builds the message a DLQ record is replayed as: its source
// topic and original partition, the original key and value, the original
// headers, x-replay-count = count and x-replayed-at = now.
func replayMessage(r *dlqRecord, count int, now time.Time) (*kafka.Message, error) {
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
		kafka.Header{Key: headerReplayCount, Value: []byte(strconv.Itoa(count))},
		kafka.Header{Key: headerReplayedAt, Value: []byte(now.UTC().Format(time.RFC3339))})
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
func valueMissing(r *dlqRecord) string {
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
func recoveryHint(r *dlqRecord, brokers string) string {
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
func describeJob(r *dlqRecord, m *kafka.Message) string {
	id := "unreadable envelope"
	if len(r.Value) == 0 {
		id = "no value"
	} else if env, err := summarizeEnvelope(r.Value); err == nil {
		id = "MessageId " + env.MessageID
	}
	s := fmt.Sprintf("p%d@%d %s (%s, key %s)", r.Partition, r.Offset, dlqOrDash(term.Printable(r.header(consumer.HeaderErrorCode))), id, dlqPrintable(r.Key))
	if m != nil {
		s += fmt.Sprintf(" → %s p%d", term.Printable(*m.TopicPartition.Topic), m.TopicPartition.Partition)
	}
	return s
}

// replayDLQ re-produces the selected messages of a DLQ topic to their
// source topics (see replayMessage) with an idempotent producer (acks=all)
// and waits for every delivery report. Lines about refused, failed and (in
// a dry run) every message go to out; progress, when not nil, is called as
// deliveries are confirmed with how many of the total are done and the
// counts so far.
// The error is nil when the read succeeded and every delivery was
// confirmed; a refused message is not an error.
func replayDLQ(ctx context.Context, o dlqReplayOptions, out io.Writer, progress func(done, total int, so replayCounts)) (replayCounts, error) {
	var c replayCounts
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
	err := readDLQ(ctx, o.Brokers, o.Topic, o.Filter, func(r *dlqRecord) bool {
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
			fmt.Fprintf(out, "would replay %s (%s %d)\n", describeJob(r, m), headerReplayCount, n+1)
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
		if progress != nil {
			so := c
			so.Replayed, so.Failed = c.Replayed+ok, c.Failed+bad
			progress(ok+bad, len(jobs), so)
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
	p, err := kafka.NewProducer(kafkaConfig(brokers, kafka.ConfigMap{
		"enable.idempotence":   true,
		"acks":                 "all",
		"linger.ms":            5,
		"message.timeout.ms":   int(timeout / time.Millisecond),
		"log.connection.close": false,
	}))
	if err != nil {
		return 0, 0, err
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

func dlqReplayCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("dlq replay", "dlq replay --topic T [--brokers B] [--code C] [--since T|D] [--offset-range a-b] [--partition P] [--max-replays N] [--yes] [--dry-run]",
		"Re-produces the selected messages of a DLQ topic to their source topic\n"+
			"(x-source-topic) and original partition (x-original-partition), with the\n"+
			"original key, value and headers minus the x-dlq-*, x-original-*,\n"+
			"x-source-topic, x-consumer-group and x-attempts headers, plus x-replay-count\n"+
			"(previous + 1) and x-replayed-at. Idempotent producer, acks=all, every delivery\n"+
			"confirmed. A message already replayed --max-replays times is refused (counted,\n"+
			"not an error), and so is one without its value (x-dlq-value-omitted: too large\n"+
			"for the DLQ), which would be a tombstone: its line says where the original is.\n"+
			"Prints how many messages go from the DLQ to which topic and asks for\n"+
			"confirmation on a terminal unless --yes is given; elsewhere --yes is required\n"+
			"(not with --dry-run). Exit 1 when any delivery failed or the replay was not\n"+
			"confirmed. Safe to repeat: the consumers are idempotent by MessageId.")
	fs.SetOutput(stderr)
	brokers := opBrokersFlag(fs)
	topic := fs.String("topic", "", "DLQ topic (required), e.g. pin.crm.selections-dlq.v1")
	ff := addDLQFilterFlags(fs)
	dryRun := fs.Bool("dry-run", false, "print what would be replayed; produce nothing")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	maxReplays := fs.Int("max-replays", 3, "refuse a message whose x-replay-count is already this or more")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for every delivery to be confirmed")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if err := opRequireFlag(fs, "brokers", *brokers); err != nil {
		return err
	}
	if err := opRequireFlag(fs, "topic", *topic); err != nil {
		return err
	}
	if *maxReplays < 1 {
		return usageError("--max-replays: must be ≥ 1")
	}
	if *timeout <= 0 {
		return usageError("--timeout: must be positive")
	}
	f, err := ff.filter(time.Now())
	if err != nil {
		return err
	}
	o := dlqReplayOptions{Brokers: *brokers, Topic: *topic, Filter: f, DryRun: *dryRun, MaxReplays: *maxReplays, Timeout: *timeout}
	if !*dryRun {
		ask, err := confirmation("dlq replay", *yes, stdin, stdout)
		if err != nil {
			return err
		}
		if ask != nil {
			o.Confirm = func() (bool, error) { return ask("produce these messages to their source topic?") }
		}
	}
	if err := checkKafka(ctx, *brokers); err != nil {
		return err
	}
	var bar *term.Progress
	var progress func(done, total int, so replayCounts)
	if !*dryRun && term.IsTerminal(stderr) {
		progress = func(done, total int, so replayCounts) {
			if bar == nil {
				bar = term.NewProgress(stderr, true, "replay", total)
			}
			bar.SetNote(done, fmt.Sprintf("replayed %d  refused %d  failed %d", so.Replayed, so.Refused, so.Failed))
		}
	}
	c, err := replayDLQ(ctx, o, stdout, progress)
	if bar != nil {
		bar.Stop()
	}
	if *dryRun {
		fmt.Fprintf(stdout, "dry run: selected %d, would replay %d, refused %d, failed %d\n", c.Selected, c.Replayed, c.Refused, c.Failed)
	} else {
		fmt.Fprintln(stdout, c)
	}
	if err != nil {
		return err
	}
	if c.Failed > 0 {
		return fmt.Errorf("dlq replay: %d message(s) failed", c.Failed)
	}
	return nil
}
