package main

import (
	"context"
	"os"
	"time"

	"github.com/pin-platform/pin/internal/devenv"
	"github.com/pin-platform/pin/internal/term"
)

func init() {
	register(command{name: "dev", summary: "the whole system on an embedded default, with a demo scenario (make run)", run: runDev})
}

func runDev(ctx context.Context, args []string) error {
	fs := newFlags("dev", "dev [--once] [--events N] [--data DIR]",
		"Starts a local PostgreSQL (data under DIR/postgres, kept between runs) or uses\n"+
			"$DATABASE_URL, an in-process Kafka-protocol broker (librdkafka's mock cluster)\n"+
			"or $KAFKA_BOOTSTRAP_SERVERS, applies the migrations, starts the three consumers\n"+
			"(bin/*-consumers, the real binaries), provisions demo chats and leads, produces a\n"+
			"scenario that touches every path, prints each processed event, then a summary.\n"+
			"Ctrl-C stops everything. With --once it exits after the summary: 0 when the\n"+
			"scenario reached its expected outcome.")
	o := devenv.Options{Out: os.Stdout, TTY: term.IsTerminal(os.Stdout)}
	fs.BoolVar(&o.Once, "once", false, "exit after the summary (non-interactive; exit 1 if the outcome is not the expected one)")
	fs.IntVar(&o.Events, "events", 0, "also produce N events of realistic load, with a progress bar")
	fs.StringVar(&o.DataDir, "data", ".data", "directory of the local PostgreSQL's data")
	fs.StringVar(&o.RetryTimeScale, "retry-time-scale", "0.1", "RETRY_TIME_SCALE of the consumers (0.1: a 30 s wait takes 3 s)")
	stopDB := fs.Bool("stop-db", false, "only stop the local PostgreSQL of --data, if it runs")
	fs.BoolVar(&o.Quiet, "quiet", false, "do not print a line per processed event")
	fs.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "how long to wait for the consumers to catch up")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if *stopDB {
		return devenv.StopDB(o.DataDir)
	}
	return devenv.Run(ctx, o)
}
