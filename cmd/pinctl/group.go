package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/pin-platform/pin/internal/group"
)

// `pinctl group reset`: the specs' "replay the topic from offset 0" runbook.
// The reset is internal/group's; here are the flags.

func init() {
	register(command{
		name:    "group",
		summary: "consumer groups: reset (replay a topic from offset 0)",
		run: func(ctx context.Context, args []string) error {
			return subcommands(ctx, "group", groupCommands, args)
		},
	})
}

var groupCommands = []command{
	{name: "reset", summary: "commit the low watermark of every partition for a stopped group", run: func(ctx context.Context, args []string) error {
		return groupResetCmd(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	}},
}

func groupResetCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("group reset", "group reset --group G --topic T --to-earliest [--brokers B] [--yes] [--dry-run] [--join]",
		"Commits offset = low watermark on every partition of T for group G, so that the\n"+
			"group's consumers read the topic from offset 0 when they start again (the\n"+
			"specs' re-sync runbook). Stop the group's consumers first: the reset is refused\n"+
			"while the group has members. Prints the offsets before and after. Asks for\n"+
			"confirmation on a terminal unless --yes is given; elsewhere --yes is required.")
	fs.SetOutput(stderr)
	brokers := opBrokersFlag(fs)
	groupID := fs.String("group", "", "consumer group (required), e.g. crm-selections")
	topic := fs.String("topic", "", "topic (required), e.g. pin.selections.selection-shared.v1")
	earliest := fs.Bool("to-earliest", false, "reset to the low watermark (required: the only reset there is)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	dryRun := fs.Bool("dry-run", false, "print the plan; commit nothing")
	join := fs.Bool("join", false, "commit as the group's only member (join, check every partition is ours, commit, leave):\n"+
		"for brokers that refuse commits from outside a group that ever had members (librdkafka's mock cluster)")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	for _, req := range []struct{ name, value string }{{"brokers", *brokers}, {"group", *groupID}, {"topic", *topic}} {
		if err := opRequireFlag(fs, req.name, req.value); err != nil {
			return err
		}
	}
	if !*earliest {
		fs.Usage()
		return usageError("group reset: --to-earliest is required")
	}
	o := group.ResetOptions{Brokers: *brokers, Group: *groupID, Topic: *topic, DryRun: *dryRun, Join: *join}
	if !*dryRun {
		ask, err := confirmation("group reset", *yes, stdin, stdout)
		if err != nil {
			return err
		}
		if ask != nil {
			o.Confirm = func() (bool, error) { return ask(fmt.Sprintf("commit these offsets for group %s?", *groupID)) }
		}
	}
	if err := checkKafka(ctx, *brokers); err != nil {
		return err
	}
	if _, err := group.Reset(ctx, o, stdout); err != nil {
		return fmt.Errorf("group reset: %w", err)
	}
	return nil
}
