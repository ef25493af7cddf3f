package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/internal/chaos"
	"github.com/pin-platform/pin/internal/devenv"
)

func init() {
	register(command{name: "chaos", summary: "the fault run: consumers under kills, a PostgreSQL crash, a read-only window and broker faults, checked against a model (make chaos)", run: runChaos})
}

func runChaos(ctx context.Context, args []string) error {
	fs := newFlags("chaos", "chaos [--seed N] [--events N] [--only SERVICE[,SERVICE]] [--short] [--keep]",
		"Starts a private PostgreSQL, kfake (an in-process Kafka-protocol broker) and two\n"+
			"instances of each consumer (bin/*-consumers, the real binaries), produces N events\n"+
			"per consumer made from the seed — duplicates, older versions after newer ones, poison\n"+
			"of every kind the specs know — while the faults play: kill -9 of consumers, a\n"+
			"PostgreSQL crash and restart, a read-only window (writes refused with 25006), and\n"+
			"kfake's: offset commits and fetches failing, dead letters refused, a slow\n"+
			"coordinator, partition leaders and coordinators moving, connections dropped. Once\n"+
			"the groups committed every offset and nothing waits parked, it compares the database\n"+
			"and the DLQs with a model of the events and prints one line per consumer:\n"+
			"  rewards   events=20000 lost=0 doubled=0 wrong=0 poison_in_dlq=515/515\n"+
			"Exit 1 when any line is off (the work directory is then kept).")
	o := chaos.Defaults()
	short := false
	only := ""
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the events and of the faults' times and targets")
	fs.IntVar(&o.Events, "events", 0, "events per consumer (default 20000; 3000 with --short)")
	fs.StringVar(&only, "only", "", "comma-separated services to run (rewards, messenger, crm); default all")
	fs.Float64Var(&o.Rate, "rate", 0, "events produced per second and consumer (default 500; 150 with --short)")
	kills := -1
	fs.Func("kills", "consumer processes killed with SIGKILL (default 4; 1 with --short)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a whole number ≥ 0", s)
		}
		kills = n
		return nil
	})
	fs.BoolVar(&short, "short", false, "the CI-sized run: 3000 events, one kill, one read-only window, the broker's faults")
	fs.BoolVar(&o.Keep, "keep", false, "keep the work directory (PostgreSQL's data, the consumers' logs)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "how long the consumers may take to finish after the last event and fault")
	fs.Func("env", "KEY=VALUE for the consumers (repeatable), e.g. CONSUMER_TRANSACTIONS=1", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		o.Env = append(o.Env, s)
		return nil
	})
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	d := chaos.Defaults()
	if short {
		d = chaos.Short()
	}
	o.Faults = d.Faults
	if o.Events == 0 {
		o.Events = d.Events
	}
	if o.Rate == 0 {
		o.Rate = d.Rate
	}
	if kills >= 0 {
		o.Faults.Kills = kills
	}
	o.RetryWindow = d.RetryWindow
	if o.Events < 1 || o.Rate <= 0 {
		return usageError("chaos: --events and --rate must be > 0")
	}
	if only != "" {
		for _, name := range strings.Split(only, ",") {
			name = strings.TrimSpace(name)
			if !slices.ContainsFunc(demo.Topics, func(t demo.Topic) bool { return t.Service == name }) {
				return usageError(fmt.Sprintf("chaos: unknown service %q (rewards, messenger, crm)", name))
			}
			o.Services = append(o.Services, name)
		}
	}
	var err error
	if o.BinDir, err = devenv.BinDir(); err != nil {
		return err
	}
	o.Out = os.Stdout
	res, err := chaos.Run(ctx, o)
	if res != nil {
		fmt.Println()
		for _, t := range res.Services {
			fmt.Println(t.Line())
			if !t.OK() {
				for _, n := range t.Notes() {
					fmt.Println("    " + n)
				}
			}
		}
		for _, p := range res.Problems {
			fmt.Println("! " + p)
		}
		fmt.Printf("(%s", res.Took.Round(time.Second))
		if res.WorkDir != "" {
			fmt.Printf("; work directory kept: %s", res.WorkDir)
		}
		fmt.Println(")")
	}
	if err != nil {
		return err
	}
	if !res.OK() {
		return &exitError{code: 1}
	}
	return nil
}
