// Package group resets a consumer group's committed offsets to the low
// watermark of every partition of a topic, once the group has no members:
// the specs' "replay the topic from offset 0" runbook and what `pinctl
// group reset` does (Reset). The offsets are committed by a client that
// uses the group's id without joining it (CommitOffsets without
// Subscribe), or, for brokers that refuse that, as the group's only member
// (ResetOptions.Join).
package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pin-platform/pin/internal/kafkaenv"
	"github.com/pin-platform/pin/internal/term"
)

// ErrActive is a reset refused because the group has members.
var ErrActive = errors.New("the group has active members: stop its consumers first")

// ResetOptions are the arguments of Reset: `group reset`'s.
type ResetOptions struct {
	Brokers, Group, Topic string
	DryRun                bool // print the plan; commit nothing
	// Join commits as a member of the group (Subscribe, check that every
	// partition was assigned to it alone, CommitOffsets, leave) instead of
	// from outside it. For brokers that refuse an outside commit to a group
	// that ever had members, such as librdkafka's mock cluster.
	Join bool
	// Confirm is asked once the plan is printed; nil: no question.
	Confirm func() (bool, error)
}

// Partition is one partition's offsets around a reset.
type Partition struct {
	Partition int32
	Low, High int64
	Before    kafka.Offset // committed before (OffsetInvalid: none)
	After     kafka.Offset // committed after (OffsetInvalid: none, or not reset)
}

// membersOf returns the members of a group as the broker describes it
// and whether the description is usable: ok is false when the broker does
// not implement DescribeGroups (librdkafka's mock cluster) or the
// description failed.
func membersOf(d kafka.ConsumerGroupDescription) (members []string, ok bool) {
	if d.Error.Code() != kafka.ErrNoError {
		return nil, false
	}
	for _, m := range d.Members {
		members = append(members, fmt.Sprintf("%s (client %s, host %s)", term.Printable(m.ConsumerID), term.Printable(m.ClientID), term.Printable(m.Host)))
	}
	switch d.State {
	case kafka.ConsumerGroupStatePreparingRebalance, kafka.ConsumerGroupStateCompletingRebalance, kafka.ConsumerGroupStateStable:
		if len(members) == 0 { // a group between generations: not safe either
			members = append(members, "(a rebalance is in progress: state "+d.State.String()+")")
		}
	}
	return members, true
}

// activeCommitError reports whether a commit failed because the group
// has a live generation: the broker refuses an offset commit from outside
// a non-empty group.
func activeCommitError(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke.Code() {
	case kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration, kafka.ErrRebalanceInProgress, kafka.ErrFencedInstanceID:
		return true
	}
	return false
}

// Reset commits offset = low watermark on every partition of the topic
// for the group, unless the group has members: members named by the
// broker's description of the group (where it can describe groups), or a
// commit the broker refuses because the group has a live generation. The
// offsets before, the plan and, after the commit, the offsets read back are
// printed on out as tables. It returns the partitions' offsets, and an
// error wrapping ErrActive when the group has members.
func Reset(ctx context.Context, o ResetOptions, out io.Writer) ([]Partition, error) {
	c, err := kafka.NewConsumer(kafkaenv.Client(o.Brokers, kafka.ConfigMap{
		"group.id":             o.Group, // used for OffsetFetch/OffsetCommit only: never subscribed
		"enable.auto.commit":   false,
		"log.connection.close": false,
	}))
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	defer kafkaenv.CloseConsumer(c)

	parts, err := offsets(c, o.Topic)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "group %s, topic %s (%d partitions)\n", o.Group, o.Topic, len(parts))

	// Members: DescribeConsumerGroups where the broker implements it.
	// Either way the broker refuses an OffsetCommit from outside a group
	// that has a live generation, which is checked again below.
	admin, err := kafka.NewAdminClientFromConsumer(c)
	if err != nil {
		return nil, fmt.Errorf("kafka admin client: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	res, derr := admin.DescribeConsumerGroups(dctx, []string{o.Group}, kafka.SetAdminRequestTimeout(10*time.Second))
	cancel()
	admin.Close()
	described := false
	if derr == nil && len(res.ConsumerGroupDescriptions) == 1 {
		d := res.ConsumerGroupDescriptions[0]
		members, ok := membersOf(d)
		if ok {
			described = true
			fmt.Fprintf(out, "state %s, %d member(s)\n", d.State, len(members))
			if len(members) > 0 {
				for _, m := range members {
					fmt.Fprintf(out, "  member %s\n", m)
				}
				return parts, ErrActive
			}
		} else {
			derr = d.Error
		}
	}
	if !described {
		fmt.Fprintf(out, "note: the broker could not describe the group (%v); relying on it refusing the commit while the group has members\n", derr)
	}

	plan := make([]Partition, len(parts))
	copy(plan, parts)
	for i := range plan {
		plan[i].After = kafka.Offset(plan[i].Low)
	}
	printOffsets(out, plan, "to commit")
	if o.DryRun {
		fmt.Fprintln(out, "dry run: nothing committed")
		return parts, nil
	}
	if o.Confirm != nil {
		yes, err := o.Confirm()
		if err != nil {
			return parts, fmt.Errorf("confirmation: %w", err)
		}
		if !yes {
			return parts, errors.New("not confirmed: nothing committed")
		}
	}

	tps := make([]kafka.TopicPartition, len(parts))
	for i, p := range parts {
		tps[i] = kafka.TopicPartition{Topic: &o.Topic, Partition: p.Partition, Offset: kafka.Offset(p.Low)}
	}
	commit := c.CommitOffsets
	if o.Join {
		commit = func(tps []kafka.TopicPartition) ([]kafka.TopicPartition, error) {
			return commitAsMember(ctx, o, tps, out)
		}
	}
	committed, err := commit(tps)
	if err != nil {
		if errors.Is(err, ErrActive) {
			return parts, err
		}
		if activeCommitError(err) {
			if !described && !o.Join {
				return parts, fmt.Errorf("%w (the broker refused the commit: %v; if the consumers are stopped and the broker is "+
					"librdkafka's mock cluster, which refuses commits from outside a group that ever had members, add --join)", ErrActive, err)
			}
			return parts, fmt.Errorf("%w (the broker refused the commit: %v)", ErrActive, err)
		}
		return parts, fmt.Errorf("commit offsets of %s: %w", o.Group, err)
	}
	var errs []error
	for _, tp := range committed {
		if tp.Error != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", tp.Partition, tp.Error))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return parts, fmt.Errorf("commit offsets of %s: %w", o.Group, err)
	}

	after, err := offsets(c, o.Topic)
	if err != nil {
		return parts, fmt.Errorf("read the offsets back: %w", err)
	}
	for i := range parts {
		parts[i].After = after[i].Before
	}
	printOffsets(out, parts, "committed")
	for _, p := range parts {
		if p.After != kafka.Offset(p.Low) {
			return parts, fmt.Errorf("partition %d: committed offset is %v after the reset, want %d", p.Partition, p.After, p.Low)
		}
	}
	fmt.Fprintf(out, "done: group %s reads %s from the low watermarks when its consumers start\n", o.Group, o.Topic)
	return parts, nil
}

// commitAsMember joins the group, subscribed to the topic alone, waits for
// its assignment, refuses (ErrActive) unless every partition of the
// topic was assigned to it, commits tps as a member and leaves the group.
func commitAsMember(ctx context.Context, o ResetOptions, tps []kafka.TopicPartition, out io.Writer) ([]kafka.TopicPartition, error) {
	c, err := kafka.NewConsumer(kafkaenv.Client(o.Brokers, kafka.ConfigMap{
		"group.id":           o.Group,
		"enable.auto.commit": false,
		"auto.offset.reset":  "earliest",
		// The classic protocol's: kafkaenv.Client leaves them out under
		// KAFKA_GROUP_PROTOCOL=consumer, where librdkafka refuses them.
		"session.timeout.ms":    6000,
		"heartbeat.interval.ms": 500,
		"log.connection.close":  false,
	}))
	if err != nil {
		return nil, fmt.Errorf("join group %s: kafka consumer: %w", o.Group, err)
	}
	defer kafkaenv.CloseConsumer(c) // leaves the group
	if err := c.Subscribe(o.Topic, nil); err != nil {
		return nil, fmt.Errorf("join group %s: subscribe to %s: %w", o.Group, o.Topic, err)
	}
	fmt.Fprintf(out, "joining group %s to commit as its only member…\n", o.Group)
	deadline := time.Now().Add(45 * time.Second)
	var assigned []kafka.TopicPartition
	for len(assigned) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no assignment from group %s within 45s", o.Group)
		}
		if ev, isErr := c.Poll(100).(kafka.Error); isErr && ev.IsFatal() {
			return nil, fmt.Errorf("join group %s: %w", o.Group, ev)
		}
		if assigned, err = c.Assignment(); err != nil {
			return nil, fmt.Errorf("join group %s: assignment: %w", o.Group, err)
		}
	}
	if len(assigned) != len(tps) {
		return nil, fmt.Errorf("%w (joining it got %d of the %d partitions: another member holds the rest)", ErrActive, len(assigned), len(tps))
	}
	return c.CommitOffsets(tps)
}

// offsets reads, per partition of topic in order, the watermarks and
// the group's committed offset (in Before).
func offsets(c *kafka.Consumer, topic string) ([]Partition, error) {
	ids, err := kafkaenv.Partitions(c, topic)
	if err != nil {
		return nil, err
	}
	out := make([]Partition, len(ids))
	tps := make([]kafka.TopicPartition, len(ids))
	for i, id := range ids {
		lo, hi, err := c.QueryWatermarkOffsets(topic, id, 10000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s [%d]: %w", topic, id, err)
		}
		out[i] = Partition{Partition: id, Low: lo, High: hi, Before: kafka.OffsetInvalid, After: kafka.OffsetInvalid}
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: id}
	}
	got, err := c.Committed(tps, 10000)
	if err != nil {
		return nil, fmt.Errorf("committed offsets: %w", err)
	}
	for _, tp := range got {
		for i := range out {
			if out[i].Partition == tp.Partition && tp.Error == nil {
				out[i].Before = tp.Offset
			}
		}
	}
	return out, nil
}

func fmtOffset(o kafka.Offset) string {
	if o < 0 {
		return "none"
	}
	return fmt.Sprint(int64(o))
}

// printOffsets prints a table: partition, low, high, committed before,
// the new offset (heading after) and the lag it leaves.
func printOffsets(w io.Writer, ps []Partition, after string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "partition\tlow\thigh\tcommitted before\t%s\tlag after\t\n", after)
	for _, p := range ps {
		lag := "-"
		if p.After >= 0 {
			lag = fmt.Sprint(p.High - int64(p.After))
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t\n", p.Partition, p.Low, p.High, fmtOffset(p.Before), fmtOffset(p.After), lag)
	}
	_ = tw.Flush()
}
