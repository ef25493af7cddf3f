package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/internal/bench"
	"github.com/pin-platform/pin/internal/term"
)

func init() {
	register(command{name: "bench", summary: "throughput and latency of each consumer, with its broker limit and CPU per event (make bench)", run: runBench})
}

func runBench(ctx context.Context, args []string) error {
	fs := newFlags("bench", "bench [--events N] [--only SERVICE[,SERVICE]] [--env KEY=VALUE]… [--pg KEY=VALUE]…",
		"For each consumer (rewards, messenger, crm), on a local PostgreSQL with fsync and\n"+
			"synchronous_commit on and on the in-process broker:\n"+
			"  1. broker limit: N pre-produced messages consumed with the consumer's Kafka\n"+
			"     configuration (group, auto commit of stored offsets), no database work;\n"+
			"  2. the consumer: N realistic events (demo.Load) pre-produced, the real binary\n"+
			"     started and timed to the last offset committed, with the consumer's and\n"+
			"     PostgreSQL's CPU per event, the ceiling that cost allows on the machine's\n"+
			"     cores and the machine's idle share; then a paced run at half that rate\n"+
			"     with p50/p99 produce→commit latency;\n"+
			"  3. the consumer process's peak RSS.\n"+
			"Prints one table per consumer and adds the run to RESULTS/<date>.json.\n"+
			"--db-latency D puts PostgreSQL D away (a delaying proxy) for the consumer and\n"+
			"the bench's own connections alike; --profile keeps the consumer's CPU and heap\n"+
			"profiles and PostgreSQL's statements (pg_stat_statements) of each max run.\n"+
			"Consumer knobs (CONSUMER_BATCH_SIZE, DATABASE_MAX_CONNS, LOG_LEVEL, KAFKA_*…)\n"+
			"come from the environment or --env; KAFKA_* apply to the broker-only loop too.\n"+
			"See bench/README.md.")
	o := bench.Options{Out: os.Stdout, TTY: term.IsTerminal(os.Stdout)}
	only := ""
	fs.IntVar(&o.Events, "events", 100000, "events per consumer (N)")
	fs.StringVar(&only, "only", "", "comma-separated services to run (rewards, messenger, crm); default all")
	fs.DurationVar(&o.Paced, "paced", 15*time.Second, "duration of the paced run at half the measured rate")
	fs.Float64Var(&o.Rate, "paced-rate", 0, "events/s of the paced run instead of half the measured rate: the same load for every binary of an A/B comparison")
	fs.IntVar(&o.Chats, "chats", 0, "lead chats of the messenger load (0: max(100, N/20), about 20 snapshots per chat)")
	fs.IntVar(&o.Leads, "leads", 1000, "Active CRM leads the crm load shares over")
	sqlTime := fs.Duration("sql-time", 0, "ignored: the bound of the pgbench SQL limit, which was removed (accepted so that existing command lines still run)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "how long a consumer may take to commit the last offset")
	fs.StringVar(&o.Results, "results", filepath.Join("bench", "results"), "directory of the JSON results (<date>.json)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the load generator")
	fs.Func("ids", "the ids born with an event (MessageIds, a new bond's BondId and referred user, the bond replacing a closed one): v4 (random, the default) or v7 (time-ordered UUIDv7s)", func(s string) error {
		switch s {
		case "v4":
			o.TimeOrderedIDs = false
		case "v7":
			o.TimeOrderedIDs = true
		default:
			return fmt.Errorf("%q is neither v4 nor v7", s)
		}
		return nil
	})
	fs.BoolVar(&o.Keep, "keep", false, "keep the work directory (consumer logs, paced-run CSVs, PostgreSQL data)")
	fs.DurationVar(&o.DBLatency, "db-latency", 0, "round trip added to PostgreSQL, for the consumer and the benchmark's own connections alike (a delaying proxy in pinctl), e.g. 1ms; 0: none")
	fs.BoolVar(&o.Profile, "profile", false, "profiles of each max run, kept in the work directory (implies --keep): the consumer's CPU (from the partitions' assignment, top 15 printed) and heap allocations, and PostgreSQL's statements by pg_stat_statements (top 8 printed)")
	fs.IntVar(&o.ProfileSeconds, "profile-seconds", 10, "length of the consumer's CPU profile with --profile, at most 30: the max run should last as long")
	fs.StringVar(&o.DBParams, "db-params", "", "extra query parameters of the consumer's DATABASE_URL, e.g. binary_parameters=yes")
	fs.Func("pg", "KEY=VALUE server setting of the run's PostgreSQL (repeatable), e.g. shared_buffers=1GB; fsync, synchronous_commit and full_page_writes must stay on; min_wal_size is 1GB unless given", func(s string) error {
		k, _, ok := strings.Cut(s, "=")
		if !ok || k == "" || strings.ContainsAny(s, " '\"") {
			return fmt.Errorf("%q is not KEY=VALUE (without spaces or quotes)", s)
		}
		if slices.Contains(benchOwnedSettings, strings.ToLower(k)) {
			return fmt.Errorf("%s is the run's own (where the server listens and keeps its files, what --profile loads): not a --pg setting", k)
		}
		o.PGSettings = append(o.PGSettings, s)
		return nil
	})
	fs.Func("env", "KEY=VALUE for the consumer process (repeatable), e.g. CONSUMER_BATCH_SIZE=256", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		o.Env = append(o.Env, s)
		return nil
	})
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if o.Events < 1 {
		return usageError("bench: --events must be ≥ 1")
	}
	if o.Paced <= 0 {
		return usageError("bench: --paced must be > 0")
	}
	if o.Rate < 0 {
		return usageError("bench: --paced-rate must be ≥ 0")
	}
	if o.DBLatency < 0 {
		return usageError("bench: --db-latency must be ≥ 0")
	}
	if o.ProfileSeconds < 1 || o.ProfileSeconds > 30 {
		return usageError("bench: --profile-seconds must be 1 to 30")
	}
	if o.Leads < 1 {
		return usageError("bench: --leads must be ≥ 1")
	}
	var err error
	if o.Topics, err = benchTopics(only); err != nil {
		return err
	}
	if *sqlTime != 0 {
		fmt.Println("▸ --sql-time is ignored: the pgbench SQL limit was removed (bench/README.md)")
	}
	return bench.Run(ctx, o)
}

// benchTopics are the topics of the services --only names, all when it
// is empty.
func benchTopics(only string) ([]demo.Topic, error) {
	if only == "" {
		return demo.Topics, nil
	}
	var out []demo.Topic
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(demo.Topics, func(t demo.Topic) bool { return t.Service == name })
		if i < 0 {
			return nil, usageError(fmt.Sprintf("bench: unknown service %q (rewards, messenger, crm)", name))
		}
		out = append(out, demo.Topics[i])
	}
	return out, nil
}

// benchOwnedSettings are the server settings a bench run sets itself: the
// server's address and files (the run connects to them and removes them)
// and its preloaded libraries (pg_stat_statements under --profile).
var benchOwnedSettings = []string{
	"port", "listen_addresses", "unix_socket_directories", "data_directory",
	"config_file", "hba_file", "ident_file", "shared_preload_libraries",
}
