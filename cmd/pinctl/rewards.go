package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/pin-platform/pin/internal/reconcile"
)

// `pinctl rewards reconcile`: the replica's half of the reconciliation
// with the referral service. The comparison is internal/reconcile's; here
// are the flags and the exit codes (0 match, 1 mismatch, 2 error).

func init() {
	register(command{
		name:    "rewards",
		summary: "the rewards replica: reconcile (compare with the referral service)",
		run: func(ctx context.Context, args []string) error {
			return subcommands(ctx, "rewards", rewardsCommands, args)
		},
	})
}

var rewardsCommands = []command{
	{name: "reconcile", summary: "compare the replica's Active bonds with the referral service's", run: func(ctx context.Context, args []string) error {
		return rewardsReconcileCmd(ctx, args, os.Stdout, os.Stderr)
	}},
}

func rewardsReconcileCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rewards reconcile", "rewards reconcile (--expect-active N | --expect-active-from URL | --list-missing FILE) [--url-file FILE | $DATABASE_URL]",
		"Counts the Active bonds of referral_bond_replicas and compares the count with\n"+
			"the referral service's: a number, or the answer of a URL (a bare number, or a\n"+
			"Prometheus /api/v1/query answer of one sample). With --list-missing FILE (the\n"+
			"referral side's Active bond ids, one a line) it prints each id the replica\n"+
			"lacks (\"absent\") or holds in another status; without a count, the number of\n"+
			"ids is the referral count. Prints both counts and the difference and, on a\n"+
			"mismatch, the replay from offset 0. Exit 0 on a match, 1 on a mismatch, 2 on\n"+
			"an error.")
	fs.SetOutput(stderr)
	db := databaseURLFlags(fs)
	expect := fs.Int64("expect-active", -1, "the referral service's count of Active bonds")
	from := fs.String("expect-active-from", "", "a URL whose answer is that count (a referral endpoint, or a Prometheus query URL)")
	missing := fs.String("list-missing", "", "a file of the referral side's Active bond ids, one a line (- : stdin)")
	timeout := fs.Duration("timeout", 30*time.Second, "for each database statement and for the URL's answer")
	fail := func(err error) error { // every error exits 2; a mismatch alone exits 1
		if err == nil {
			return nil
		}
		fmt.Fprintf(stderr, "pinctl: %s\n", secrets.Redact(strings.Join(strings.Fields(err.Error()), " ")))
		return &exitError{code: 2}
	}
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if isSet(fs, "expect-active") && isSet(fs, "expect-active-from") {
		return usageError("rewards reconcile: give one of --expect-active and --expect-active-from")
	}
	if !isSet(fs, "expect-active") && !isSet(fs, "expect-active-from") && *missing == "" {
		fs.Usage()
		return usageError("rewards reconcile: --expect-active, --expect-active-from or --list-missing is required")
	}
	if isSet(fs, "expect-active") && *expect < 0 {
		return usageError("rewards reconcile: --expect-active must be ≥ 0")
	}
	if *timeout <= 0 {
		return usageError("rewards reconcile: --timeout must be positive")
	}
	u, err := requireURL(fs, db)
	if err != nil {
		return err
	}
	o := reconcile.Options{Expect: *expect, ExpectSet: isSet(fs, "expect-active"), ExpectFrom: *from,
		HTTP: &http.Client{Timeout: *timeout}, Timeout: *timeout}
	if *missing != "" {
		f := os.Stdin
		if *missing != "-" {
			if f, err = os.Open(*missing); err != nil {
				return fail(fmt.Errorf("--list-missing: %w", err))
			}
			defer f.Close()
		}
		o.Listed = f
	}
	if o.DB, err = sql.Open("postgres", u); err != nil {
		return fail(errors.New("the database URL: lib/pq refuses it"))
	}
	defer o.DB.Close()
	r, err := reconcile.Run(ctx, o, stdout)
	if err != nil {
		return fail(err)
	}
	if r.Mismatch() {
		return &exitError{code: 1}
	}
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
