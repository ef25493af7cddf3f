package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pin-platform/pin/internal/dlq"
	"github.com/pin-platform/pin/internal/term"
)

// `pinctl dlq list|replay`: the dead-letter topics of docs/contract.md §5.
// The reading and the replaying are internal/dlq's; here are the flags.

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

func (ff dlqFilterFlags) filter(now time.Time) (dlq.Filter, error) {
	f := dlq.All()
	f.Code = strings.TrimSpace(*ff.code)
	if *ff.partition < -1 {
		return f, usageError(fmt.Sprintf("--partition %d: not a partition", *ff.partition))
	}
	f.Partition = int32(*ff.partition)
	if s := strings.TrimSpace(*ff.since); s != "" {
		t, err := dlq.ParseSince(s, now)
		if err != nil {
			return f, usageError("--since: " + err.Error())
		}
		f.Since = t
	}
	if s := strings.TrimSpace(*ff.offsets); s != "" {
		from, to, err := dlq.ParseOffsetRange(s)
		if err != nil {
			return f, usageError("--offset-range: " + err.Error())
		}
		f.From, f.To = from, to
	}
	return f, nil
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
	_, err = dlq.List(ctx, dlq.ListOptions{Brokers: *brokers, Topic: *topic, Filter: f, Limit: *limit, JSON: *asJSON}, stdout, summary)
	return err
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
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for each delivery to be confirmed")
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
	o := dlq.ReplayOptions{Brokers: *brokers, Topic: *topic, Filter: f, DryRun: *dryRun, MaxReplays: *maxReplays, Timeout: *timeout}
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
	if !*dryRun && term.IsTerminal(stderr) {
		o.Progress = func(done, total int, so dlq.Counts) {
			if bar == nil {
				bar = term.NewProgress(stderr, true, "replay", total)
			}
			bar.SetNote(done, fmt.Sprintf("replayed %d  refused %d  failed %d", so.Replayed, so.Refused, so.Failed))
		}
	}
	c, err := dlq.Replay(ctx, o, stdout)
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
