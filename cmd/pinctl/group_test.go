package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/group/grouptest"
)

func TestGroupReset(t *testing.T) {
	t.Parallel()

	t.Run("commits the low watermark of every partition and prints before and after", func(t *testing.T) {
		t.Parallel()
		kc := grouptest.NewTopic(t, kafkatest.NewCluster, 4)
		grouptest.WantCommitted(t, kc, 4)
		var out bytes.Buffer
		err := groupResetCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--group", grouptest.Group, "--topic", grouptest.Topic, "--to-earliest", "--yes"},
			strings.NewReader(""), &out, &out)
		if err != nil {
			t.Fatalf("group reset: %v\n%s", err, out.String())
		}
		grouptest.WantCommitted(t, kc, 0)
		for _, want := range []string{
			"group " + grouptest.Group + ", topic " + grouptest.Topic + " (3 partitions)",
			"committed before", "to commit", "committed",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		// Every partition's row of the last table: before 4, after 0, lag 4.
		tables := strings.Split(out.String(), "committed before")
		last := tables[len(tables)-1]
		for p := range 3 {
			if !strings.Contains(strings.Join(strings.Fields(last), " "), fmt.Sprintf("%d 0 4 4 0 4", p)) {
				t.Errorf("partition %d: no row \"%d 0 4 4 0 4\" in\n%s", p, p, last)
			}
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"--brokers", "b", "--group", "g", "--topic", "t"},                  // no --to-earliest
			{"--brokers", "b", "--group", "g", "--to-earliest", "--yes"},        // no topic
			{"--brokers", "b", "--topic", "t", "--to-earliest", "--yes"},        // no group
			{"--brokers", "b", "--group", "g", "--topic", "t", "--to-earliest"}, // no --yes, stdin not a terminal
		} {
			err := groupResetCmd(context.Background(), args, strings.NewReader("y\n"), new(bytes.Buffer), new(bytes.Buffer))
			var ue usageError
			if !errors.As(err, &ue) {
				t.Errorf("group reset %q: error %v, want a usage error", args, err)
			}
		}
	})
}
