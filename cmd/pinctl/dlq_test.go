package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/dlq"
	"github.com/pin-platform/pin/internal/dlq/dlqtest"
)

// dlq list prints what internal/dlq lists, with the filters of its flags.
func TestDLQListCommandLine(t *testing.T) {
	t.Parallel()
	a := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, SrcOffset: 17, Code: "CODE_A", Attempts: 4, At: time.Now().Add(-2 * time.Hour),
		ID: uuid.New(), Key: uuid.NewString(), Extra: map[string]string{"x-test-origin": "a"}}
	b := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, SrcOffset: 18, Code: consumer.EnvelopeInvalid.Name, Attempts: 1, Key: "k-b"}
	c := dlqtest.DeadLetter{DLQPartition: 1, SrcPartition: 1, SrcOffset: 3, Code: "CODE_A", Attempts: 7, ID: uuid.New(), Key: uuid.NewString(),
		Extra: map[string]string{dlq.HeaderReplayCount: "2", dlq.HeaderReplayedAt: "2026-12-01T08:00:00Z"}}
	kc := dlqtest.NewCluster(t, a, b, c)

	headings := func(out string) []string {
		var hs []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "p") {
				hs = append(hs, strings.Fields(l)[0])
			}
		}
		return hs
	}

	var out, errOut bytes.Buffer
	err := dlqListCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", dlqtest.DLQ, "--code", "CODE_A", "--since", "3h"}, &out, &errOut)
	if err != nil {
		t.Fatalf("dlq list: %v\n%s", err, errOut.String())
	}
	if got := strings.Join(headings(out.String()), " "); got != "p0@0 p1@0" || !strings.Contains(out.String(), "2 message(s) of "+dlqtest.DLQ) {
		t.Fatalf("listed %s:\n%s", got, out.String())
	}
}

func TestDLQFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--brokers", "b"},                                    // no topic
		{"--topic", "t", "--brokers", ""},                     // no brokers
		{"--brokers", "b", "--topic", "t", "--since", "soon"}, // bad since
		{"--brokers", "b", "--topic", "t", "--max-replays", "0"},
		{"--brokers", "b", "--topic", "t", "--offset-range", "7"},
		{"--brokers", "b", "--topic", "t"}, // no --yes, stdin not a terminal
	} {
		err := dlqReplayCmd(context.Background(), args, strings.NewReader("y\n"), new(bytes.Buffer), new(bytes.Buffer))
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("dlq replay %q: error %v, want a usage error", args, err)
		}
	}
}

func replay(t *testing.T, kc *kafkatest.Cluster, o dlq.ReplayOptions) (dlq.Counts, string, error) {
	t.Helper()
	o.Brokers, o.Topic = kc.Bootstrap, dlqtest.DLQ
	if o.MaxReplays == 0 {
		o.MaxReplays = 3
	}
	if o.Filter == (dlq.Filter{}) {
		o.Filter = dlq.All()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var out bytes.Buffer
	c, err := dlq.Replay(ctx, o, &out)
	return c, out.String(), err
}

func TestDLQReplay(t *testing.T) {
	t.Parallel()

	t.Run("a dead letter whose key was cut is refused, never produced", func(t *testing.T) {
		t.Parallel()
		// As the runtime publishes a dead letter too large for the DLQ
		// even without its value: the key cut, x-dlq-key-truncated
		// holding its size.
		cut := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 2, SrcOffset: 40, Code: "CODE_A", Attempts: 1, ID: uuid.New(), Key: "cut",
			Extra: map[string]string{consumer.HeaderKeyTruncated: "1126400"}}
		fine := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 1, SrcOffset: 41, Code: "CODE_A", Attempts: 1, ID: uuid.New(), Key: "fine"}
		kc := dlqtest.NewCluster(t, cut, fine)
		c, out, err := replay(t, kc, dlq.ReplayOptions{})
		if err != nil || c != (dlq.Counts{Selected: 2, Replayed: 1, Refused: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		if !strings.Contains(out, consumer.HeaderKeyTruncated+": 1126400 bytes") || !strings.Contains(out, "another key") {
			t.Fatalf("the refusal does not say the key was cut:\n%s", out)
		}
		if m := dlqtest.ReadSource(t, kc, 1)[0]; string(m.Key) != "fine" {
			t.Fatalf("replayed %q, want fine only", m.Key)
		}
	})

	t.Run("a dead letter without its value is refused, never produced, and the others go on", func(t *testing.T) {
		t.Parallel()
		// As the runtime publishes a dead letter too large for the DLQ: no
		// value, x-dlq-value-omitted holding the original size.
		omitted := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 2, SrcOffset: 40, Code: "CODE_A", Attempts: 7, ID: uuid.New(), Key: "too large",
			NoValue: true, Extra: map[string]string{consumer.HeaderValueOmitted: "2097152"}}
		fine := dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 1, SrcOffset: 41, Code: "CODE_A", Attempts: 7, ID: uuid.New(), Key: "fine"}
		kc := dlqtest.NewCluster(t, omitted, fine)
		c, out, err := replay(t, kc, dlq.ReplayOptions{})
		if err != nil || c != (dlq.Counts{Selected: 2, Replayed: 1, Refused: 1}) {
			t.Fatalf("replay: %v, %v\n%s", c, err, out)
		}
		var refused []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "refused") {
				refused = append(refused, l)
			}
		}
		if len(refused) != 1 {
			t.Fatalf("%d refused lines, want 1:\n%s", len(refused), out)
		}
		for _, want := range []string{
			"refused  p0@0 CODE_A", "key too large",
			consumer.HeaderValueOmitted + ": 2097152 bytes", "tombstone",
			dlqtest.Source + " partition 2 offset 40",
			"kcat -C -b " + kc.Bootstrap + " -t " + dlqtest.Source + " -p 2 -o 40 -c 1",
		} {
			if !strings.Contains(refused[0], want) {
				t.Errorf("the refused line lacks %q:\n%s", want, refused[0])
			}
		}
		// The source topic got the other one only: nothing on partition 2.
		m := dlqtest.ReadSource(t, kc, 1)[0]
		if string(m.Key) != "fine" || m.TopicPartition.Partition != 1 || !bytes.Equal(m.Value, fine.Value()) {
			t.Fatalf("replayed %q to partition %d, want fine to partition 1", m.Key, m.TopicPartition.Partition)
		}

		// A dry run refuses it too; the command line counts it and exits 0
		// (a refusal is not a failure).
		c, out, err = replay(t, kc, dlq.ReplayOptions{DryRun: true})
		if err != nil || c != (dlq.Counts{Selected: 2, Replayed: 1, Refused: 1}) || !strings.Contains(out, "refused  p0@0") {
			t.Fatalf("dry run: %v, %v\n%s", c, err, out)
		}
		var cmdOut bytes.Buffer
		if err := dlqReplayCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", dlqtest.DLQ, "--offset-range", "0-0", "--yes"},
			strings.NewReader(""), &cmdOut, &cmdOut); err != nil {
			t.Fatalf("dlq replay: %v\n%s", err, cmdOut.String())
		}
		if !strings.Contains(cmdOut.String(), "selected 1, replayed 0, refused 1, failed 0") {
			t.Errorf("counts:\n%s", cmdOut.String())
		}
		dlqtest.ReadSource(t, kc, 1)
	})

	t.Run("confirmation: --yes produces without a question; without a terminal and --yes nothing is produced; a dry run needs none", func(t *testing.T) {
		t.Parallel()
		d := dlqtest.DeadLetter{DLQPartition: 1, SrcPartition: 0, SrcOffset: 3, Code: "CODE_A", ID: uuid.New(), Key: "k"}
		kc := dlqtest.NewCluster(t, d, d)
		cmd := func(stdin string, args ...string) (string, error) {
			var out bytes.Buffer
			err := dlqReplayCmd(context.Background(), append([]string{"--brokers", kc.Bootstrap, "--topic", dlqtest.DLQ}, args...),
				strings.NewReader(stdin), &out, &out)
			return out.String(), err
		}

		// A script (stdin not a terminal) that does not say --yes: refused
		// before anything is read or produced, even with "y" on stdin.
		out, err := cmd("y\n")
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--yes") {
			t.Fatalf("dlq replay without --yes, stdin not a terminal: error %v, want a usage error naming --yes\n%s", err, out)
		}
		dlqtest.ReadSource(t, kc, 0)

		out, err = cmd("", "--dry-run")
		if err != nil || strings.Contains(out, "[y/N]") || !strings.Contains(out, "would replay 2") {
			t.Fatalf("dlq replay --dry-run: %v\n%s", err, out)
		}
		dlqtest.ReadSource(t, kc, 0)

		// A Confirm that says no: nothing produced.
		no := func() (bool, error) { return false, nil }
		c, out, err := replay(t, kc, dlq.ReplayOptions{Confirm: no})
		if err == nil || !strings.Contains(err.Error(), "not confirmed") || c.Replayed != 0 ||
			!strings.Contains(out, "replay 2 message(s) from "+dlqtest.DLQ+" to "+dlqtest.Source+" partition 0\n") {
			t.Fatalf("replay not confirmed: %v, %v\n%s", c, err, out)
		}
		dlqtest.ReadSource(t, kc, 0)

		out, err = cmd("", "--yes")
		if err != nil || strings.Contains(out, "[y/N]") || !strings.Contains(out, "replay 2 message(s) from "+dlqtest.DLQ+" to "+dlqtest.Source+" partition 0") ||
			!strings.Contains(out, "selected 2, replayed 2, refused 0, failed 0") {
			t.Fatalf("dlq replay --yes: %v\n%s", err, out)
		}
		dlqtest.ReadSource(t, kc, 2)
	})

	t.Run("a failed delivery or a message without its source is counted and the command fails", func(t *testing.T) {
		t.Parallel()
		kc := dlqtest.NewCluster(t,
			dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, Code: "CODE_A", ID: uuid.New(), Key: "fine"},
			dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 7, Code: "CODE_A", ID: uuid.New(), Key: "no such partition"},
			dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 0, Code: "CODE_A", ID: uuid.New(), Key: "no source", NoSource: true})
		var out, errOut bytes.Buffer
		err := dlqReplayCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", dlqtest.DLQ, "--timeout", "5s", "--yes"},
			strings.NewReader(""), &out, &errOut)
		if err == nil || exitCode(new(bytes.Buffer), err) != 1 {
			t.Fatalf("dlq replay: error %v, want exit 1\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "selected 3, replayed 1, refused 0, failed 2") {
			t.Errorf("counts missing:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "no x-source-topic header") {
			t.Errorf("the message without a source is not named:\n%s", out.String())
		}
		if m := dlqtest.ReadSource(t, kc, 1)[0]; string(m.Key) != "fine" {
			t.Errorf("replayed %q, want fine", m.Key)
		}
	})
}
