package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pin-platform/pin/internal/devenv"
	"github.com/pin-platform/pin/internal/term"
	"github.com/pin-platform/pin/migrate"
)

func init() {
	register(command{name: "dev", summary: "the whole system on an embedded default, with a demo scenario (make run)", run: runDev})
}

func runDev(ctx context.Context, args []string) error {
	return devCmd(ctx, args, os.Getenv, os.Stdin, os.Stdout)
}

func devCmd(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlags("dev", "dev [--once] [--events N] [--data DIR] [--yes]",
		"Starts a local PostgreSQL (data under DIR/postgres, kept between runs) or uses\n"+
			"$DATABASE_URL, an in-process Kafka-protocol broker (librdkafka's mock cluster)\n"+
			"or $KAFKA_BOOTSTRAP_SERVERS, applies the migrations, starts the three consumers\n"+
			"(bin/*-consumers, the real binaries), provisions demo chats and leads, produces a\n"+
			"scenario that touches every path, prints each processed event, then a summary.\n"+
			"Ctrl-C stops everything. With --once it exits after the summary: 0 when the\n"+
			"scenario reached its expected outcome. Demo rows and poison messages go into a\n"+
			"$DATABASE_URL or $KAFKA_BOOTSTRAP_SERVERS only when confirmed: on a terminal\n"+
			"it asks, elsewhere --yes is required.")
	o := devenv.Options{Out: stdout, TTY: term.IsTerminal(stdout)}
	fs.BoolVar(&o.Once, "once", false, "exit after the summary (non-interactive; exit 1 if the outcome is not the expected one)")
	fs.IntVar(&o.Events, "events", 0, "also produce N events of realistic load, with a progress bar")
	fs.StringVar(&o.DataDir, "data", ".data", "directory of the local PostgreSQL's data")
	fs.StringVar(&o.RetryTimeScale, "retry-time-scale", "0.1", "RETRY_TIME_SCALE of the consumers (0.1: a 30 s wait takes 3 s)")
	stopDB := fs.Bool("stop-db", false, "only stop the local PostgreSQL of --data, if it runs")
	fs.BoolVar(&o.Quiet, "quiet", false, "do not print a line per processed event")
	fs.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "how long to wait for the consumers to catch up")
	yes := fs.Bool("yes", false, "write the demo into $DATABASE_URL / $KAFKA_BOOTSTRAP_SERVERS without asking")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if *stopDB {
		return devenv.StopDB(o.DataDir)
	}
	if err := confirmExternal(getenv, *yes, stdin, stdout); err != nil {
		return err
	}
	return devenv.Run(ctx, o)
}

// confirmExternal gets the operator's go-ahead before the demo writes into
// a database or brokers of the shell's environment rather than the
// embedded ones: migrations, demo rows and poison messages (which land in
// the DLQs and their alerts). Nothing set: no question.
func confirmExternal(getenv func(string) string, yes bool, stdin io.Reader, stdout io.Writer) error {
	var where, vars []string
	if u := getenv("DATABASE_URL"); u != "" {
		where = append(where, "the database of $DATABASE_URL ("+migrate.Redact(u)+")")
		vars = append(vars, "DATABASE_URL")
	}
	if b := getenv("KAFKA_BOOTSTRAP_SERVERS"); b != "" {
		where = append(where, "the brokers of $KAFKA_BOOTSTRAP_SERVERS ("+term.Printable(b)+")")
		vars = append(vars, "KAFKA_BOOTSTRAP_SERVERS")
	}
	if len(where) == 0 {
		return nil
	}
	fmt.Fprintf(stdout, "pinctl dev writes migrations, demo rows and poison messages into %s, not into the embedded ones.\n", strings.Join(where, " and "))
	if yes {
		return nil
	}
	if !term.IsTerminal(stdin) {
		return usageError(fmt.Sprintf("dev: %s set and stdin is not a terminal: pass --yes to write the demo there, or unset %s for the embedded default",
			strings.Join(vars, " and "), strings.Join(vars, " and ")))
	}
	ask, err := confirmation("dev", false, stdin, stdout)
	if err != nil {
		return err
	}
	ok, err := ask("write the demo there?")
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("dev: not confirmed: nothing written")
	}
	return nil
}
