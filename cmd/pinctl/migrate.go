package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"

	"github.com/pin-platform/pin/internal/secret"
	"github.com/pin-platform/pin/migrate"
)

func init() {
	register(command{
		name:    "migrate",
		summary: "versioned migrations: apply, status, plan, diff, lint, hash",
		run: func(ctx context.Context, args []string) error {
			return subcommands(ctx, "migrate", migrateCommands, args)
		},
	})
}

var migrateCommands = []command{
	{name: "apply", summary: "apply pending migration files to a database", run: migrateApply},
	{name: "status", summary: "current revision, pending files and drift of a database", run: migrateStatus},
	{name: "plan", summary: "the SQL apply would run, with lint findings", run: migratePlan},
	{name: "diff", summary: "write a new migration file from the ent schema", run: migrateDiff},
	{name: "lint", summary: "lint the newest migration files", run: migrateLint},
	{name: "hash", summary: "re-hash atlas.sum after a reviewed edit of an unapplied file", run: migrateHash},
}

// dirFlag registers --dir. Commands that read a database default to the
// directory compiled into pinctl; diff and lint work on the source tree.
func dirFlag(fs *flag.FlagSet, def, doc string) *string {
	return fs.String("dir", def, doc)
}

const embeddedDirDoc = "migration directory (default: the one compiled into pinctl, i.e. " + migrate.SourceDir + " at build time)"

// databaseURL registers --url and --url-file. The database URL is --url's
// (visible to every user of the machine in `ps` and kept in the shell's
// history), else the first line of --url-file's file, else
// $DATABASE_URL; its password joins what pinctl never prints.
type databaseURL struct{ flag, file *string }

func databaseURLFlags(fs *flag.FlagSet) databaseURL {
	return databaseURL{
		flag: fs.String("url", "", "database URL, postgres://user:password@host:port/db?sslmode=verify-full; visible to other users in ps and kept in your shell's history: prefer $DATABASE_URL or --url-file"),
		file: fs.String("url-file", "", "a file whose first line is the database URL (a mounted secret)"),
	}
}

// requireURL resolves the database URL of the command, or fails as a
// usage error when none is given.
func requireURL(fs *flag.FlagSet, d databaseURL) (string, error) {
	u := *d.flag
	if u == "" && *d.file != "" {
		b, err := os.ReadFile(*d.file)
		if err != nil {
			return "", fmt.Errorf("--url-file: %w", err)
		}
		u, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
		u = strings.TrimSpace(u)
	}
	if u == "" {
		u = os.Getenv("DATABASE_URL")
	}
	if u == "" {
		fs.Usage()
		return "", usageError(fs.Name() + ": a database URL is required: --url, --url-file or $DATABASE_URL")
	}
	secrets.Add(secret.Passwords(u)...)
	return u, nil
}

func migrateApply(ctx context.Context, args []string) error {
	fs := newFlags("migrate apply", "migrate apply (--url URL | --url-file FILE | $DATABASE_URL) [--dir DIR] [--baseline VERSION]",
		"Applies the pending migration files, each in its own transaction unless the file\n"+
			"says `-- atlas:txmode none`, under an advisory lock, recording revisions in\n"+
			"atlas_schema_revisions as the Atlas CLI does. Exit 0 when nothing is pending.")
	db := databaseURLFlags(fs)
	dirPath := dirFlag(fs, "", embeddedDirDoc)
	baseline := fs.String("baseline", "", "on a non-empty database without migration history, treat files up to this version as applied")
	lockTimeout := fs.Duration("lock-timeout", time.Minute, "how long to wait for another apply to finish")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	url, err := requireURL(fs, db)
	if err != nil {
		return err
	}
	dir, err := migrate.OpenDir(*dirPath)
	if err != nil {
		return err
	}
	applied, err := migrate.Apply(ctx, url, dir, migrate.WithLog(os.Stdout),
		migrate.WithBaseline(*baseline), migrate.WithLockTimeout(*lockTimeout))
	if err != nil {
		return fmt.Errorf("migrate apply: %w", err)
	}
	if len(applied) > 0 {
		fmt.Printf("applied %d migration file(s)\n", len(applied))
	}
	return nil
}

func migrateStatus(ctx context.Context, args []string) error {
	fs := newFlags("migrate status", "migrate status (--url URL | --url-file FILE | $DATABASE_URL) [--dev-url URL] [--dir DIR] [--exit-code] [--drift=false]",
		"Prints the database's current revision, the files apply would run, and drift:\n"+
			"whether the live schema differs from what the applied files produce (a column\n"+
			"added by hand, an index dropped), with the SQL that turns the migrations'\n"+
			"schema into the live one. The applied files are replayed on an empty dev\n"+
			"database: --dev-url, or a throwaway local PostgreSQL (none is needed when no\n"+
			"file was applied); use a dev server of the live one's major version. Compared:\n"+
			"the tables (columns, indexes, keys, checks) and enums of the schemas the\n"+
			"migrations create (public), without the revision table; not compared: what the\n"+
			"open-source Atlas library does not inspect (views, functions, triggers, grants,\n"+
			"policies). Changes nothing on --url. Exit 0 when the database could be read,\n"+
			"drift or not, and when no dev database could be had (no local PostgreSQL\n"+
			"server binaries, say): it then prints `drift: not checked: REASON`. Exit 1 on\n"+
			"drift with --exit-code, when a check asked for by --exit-code, --dev-url or\n"+
			"--drift could not run, when the check failed on the dev database, and with one\n"+
			"line on stderr when the database cannot be reached.")
	db := databaseURLFlags(fs)
	devURL := fs.String("dev-url", "", "empty database to replay the applied files on (default: a throwaway local PostgreSQL); exit 1 when the drift check cannot run on it")
	dirPath := dirFlag(fs, "", embeddedDirDoc)
	exitOnDrift := fs.Bool("exit-code", false, "exit 1 when the live schema has drifted from the migrations, or when drift could not be checked")
	drift := fs.Bool("drift", true, "check for drift (false: no dev database, no drift line; given explicitly: exit 1 when the check cannot run)")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	url, err := requireURL(fs, db)
	if err != nil {
		return err
	}
	secrets.Add(secret.Passwords(*devURL)...)
	dir, err := migrate.OpenDir(*dirPath)
	if err != nil {
		return err
	}
	// Read the target first: an unreachable database fails before a dev
	// server is started.
	st, err := migrate.Status(ctx, url, dir)
	if err != nil {
		return fmt.Errorf("migrate status: %w", err)
	}
	if !*drift {
		migrate.WriteStatus(os.Stdout, st)
		return nil
	}
	st.Drift, err = checkDrift(ctx, url, *devURL, dir, st)
	migrate.WriteStatus(os.Stdout, st)
	if err != nil && !errors.As(err, new(noDevDatabase)) {
		return fmt.Errorf("migrate status: drift check: %w", err) // the check ran and failed: say so, exit 1
	}
	if err != nil {
		// The database was read and no dev database could be had: the
		// check that could not run is said, and fails the command only
		// when the command line asked for it (docs/contract.md §1).
		fmt.Printf("drift: not checked: %s\n", oneLine(err))
		switch {
		case ctx.Err() != nil, *devURL != "", flagGiven(fs, "drift"):
			return fmt.Errorf("migrate status: drift check: %w", err)
		case *exitOnDrift:
			return fmt.Errorf("migrate status: drift not checked, so --exit-code cannot tell there is none: %w", err)
		}
		return nil
	}
	if *exitOnDrift && st.Drift.Drifted() {
		return fmt.Errorf("migrate status: the live schema of %s has drifted from the migrations (--exit-code)", migrate.Redact(url))
	}
	return nil
}

// checkDrift checks st's database for drift, on devURL's dev database or
// a throwaway local one when the check needs one.
func checkDrift(ctx context.Context, url, devURL string, dir atlasmigrate.Dir, st *migrate.State) (*migrate.Drift, error) {
	dev := devURL
	if st.DriftNeedsDev() {
		var stop func()
		var err error
		if dev, stop, err = checkDev(ctx, devURL); err != nil {
			return nil, err
		}
		defer stop()
	}
	return migrate.CheckDrift(ctx, url, dev, dir, st)
}

// checkDev is devDatabase for the checks status and plan go on without:
// when no throwaway local PostgreSQL starts, its error (a noDevDatabase)
// says how to get a dev database.
func checkDev(ctx context.Context, devURL string) (url string, stop func(), err error) {
	if devURL != "" {
		return devURL, func() {}, nil
	}
	srv, stop, err := startLocal(ctx, "pinctl-dev-*")
	if err != nil {
		return "", nil, noDevDatabase{err}
	}
	return srv.URL("postgres"), stop, nil
}

// noDevDatabase is checkDev's failure to start a throwaway PostgreSQL: the
// one failure status and plan go on without. A check that ran and failed
// (a pending file that fails on the dev database, a replay that does) is
// not one.
type noDevDatabase struct{ err error }

func (e noDevDatabase) Error() string {
	return fmt.Sprintf("no dev database: a throwaway local PostgreSQL did not start (%v); pass --dev-url URL or install PostgreSQL's server binaries", e.err)
}

func (e noDevDatabase) Unwrap() error { return e.err }

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// oneLine is err's text on one line, without the passwords pinctl knows:
// for a reason printed on stdout.
func oneLine(err error) string {
	return secrets.Redact(strings.Join(strings.Fields(err.Error()), " "))
}

func migratePlan(ctx context.Context, args []string) error {
	fs := newFlags("migrate plan", "migrate plan (--url URL | --url-file FILE | $DATABASE_URL) [--dev-url URL] [--dir DIR]",
		"Prints the SQL of every pending file with its lint findings, for review before\n"+
			"apply. Changes nothing on --url. Lint runs on an empty dev database: --dev-url,\n"+
			"or a throwaway local PostgreSQL; when it cannot run (no local PostgreSQL server\n"+
			"binaries, say), the SQL is printed with `lint: not run: REASON`. Exit 0 when\n"+
			"the database could be read, whatever the findings, linted or not; 1 when lint\n"+
			"cannot run on --dev-url's database, when a pending file fails on the dev\n"+
			"database, and with one line on stderr when the database cannot be reached.")
	db := databaseURLFlags(fs)
	devURL := fs.String("dev-url", "", "empty database to lint on (default: a throwaway local PostgreSQL); exit 1 when lint cannot run on it")
	dirPath := dirFlag(fs, "", embeddedDirDoc)
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	url, err := requireURL(fs, db)
	if err != nil {
		return err
	}
	secrets.Add(secret.Passwords(*devURL)...)
	dir, err := migrate.OpenDir(*dirPath)
	if err != nil {
		return err
	}
	// Read the target first: an unreachable database fails before a dev
	// server is started.
	st, err := migrate.Status(ctx, url, dir)
	if err != nil {
		return fmt.Errorf("migrate plan: %w", err)
	}
	if len(st.Pending) == 0 {
		migrate.WriteStatus(os.Stdout, st)
		return nil
	}
	p, err := lintPlan(ctx, *devURL, dir, st)
	if err != nil && !errors.As(err, new(noDevDatabase)) {
		return fmt.Errorf("migrate plan: %w", err) // lint ran and failed (a pending file fails on the dev database): exit 1
	}
	if err != nil {
		// The database was read: the SQL is printed unlinted, saying
		// why; it fails the command only on --dev-url's database.
		(&migrate.PlanReport{State: st, NotLinted: oneLine(err)}).Write(os.Stdout)
		if ctx.Err() != nil || *devURL != "" {
			return fmt.Errorf("migrate plan: lint: %w", err)
		}
		return nil
	}
	p.Write(os.Stdout)
	return nil
}

// lintPlan lints st's pending files on devURL's dev database or a
// throwaway local one.
func lintPlan(ctx context.Context, devURL string, dir atlasmigrate.Dir, st *migrate.State) (*migrate.PlanReport, error) {
	dev, stop, err := checkDev(ctx, devURL)
	if err != nil {
		return nil, err
	}
	defer stop()
	return migrate.PlanOf(ctx, st, dev, dir)
}

var reMigrationName = regexp.MustCompile(`^[a-z0-9][a-z0-9_]*$`)

func migrateDiff(ctx context.Context, args []string) error {
	fs := newFlags("migrate diff", "migrate diff NAME [--dev-url URL] [--dir DIR]",
		"Writes a new migration file NAME (lower-case words joined by _) holding what\n"+
			"the ent schema changed since the directory's last file, and updates atlas.sum.\n"+
			"Replays the directory on an empty dev database: --dev-url, or a throwaway\n"+
			"local PostgreSQL. Exit 0, saying so, when there is no change to write.")
	devURL := fs.String("dev-url", "", "empty database to replay the directory on (default: a throwaway local PostgreSQL)")
	dirPath := dirFlag(fs, migrate.SourceDir, "migration directory of the source tree")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if !reMigrationName.MatchString(name) {
		return usageError(fmt.Sprintf("migrate diff: invalid name %q: use lower-case letters, digits and _", name))
	}
	dir, err := migrate.OpenDir(*dirPath)
	if err != nil {
		return err
	}
	if err := migrate.CheckDir(dir); err != nil {
		return fmt.Errorf("migrate diff: %w", err)
	}
	before, err := fileNames(dir)
	if err != nil {
		return err
	}
	dev, stop, err := devDatabase(ctx, *devURL)
	if err != nil {
		return fmt.Errorf("migrate diff: %w", err)
	}
	defer stop()
	wrote, err := migrate.Diff(ctx, dev, *dirPath, name)
	if err != nil {
		return fmt.Errorf("migrate diff: %w", err)
	}
	if !wrote {
		fmt.Println("no schema change: the migration directory is up to date, nothing written")
		return nil
	}
	after, err := fileNames(dir)
	if err != nil {
		return err
	}
	for n := range after {
		if !before[n] {
			fmt.Printf("wrote %s/%s and updated atlas.sum: review it, then run `pinctl migrate lint`\n", *dirPath, n)
		}
	}
	return nil
}

func fileNames(dir atlasmigrate.Dir) (map[string]bool, error) {
	files, err := dir.Files()
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(files))
	for _, f := range files {
		names[f.Name()] = true
	}
	return names, nil
}

func migrateLint(ctx context.Context, args []string) error {
	fs := newFlags("migrate lint", "migrate lint [--dev-url URL] [--latest N] [--dir DIR]",
		"Lints the newest N migration files on an empty dev database (--dev-url, or a\n"+
			"throwaway local PostgreSQL): destructive, data_depend, incompatible and\n"+
			"concurrent_index findings are errors (exit 1), condrop ones warnings.\n"+
			"`-- atlas:nolint [check|code ...]` before a statement exempts it.")
	devURL := fs.String("dev-url", "", "empty database to lint on (default: a throwaway local PostgreSQL)")
	latest := fs.Int("latest", 1, "number of newest files to lint (0: all)")
	dirPath := dirFlag(fs, migrate.SourceDir, "migration directory")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if *latest < 0 {
		return usageError("migrate lint: --latest must be >= 0")
	}
	dir, err := migrate.OpenDir(*dirPath)
	if err != nil {
		return err
	}
	if err := migrate.CheckDir(dir); err != nil {
		return fmt.Errorf("migrate lint: %w", err)
	}
	dev, stop, err := devDatabase(ctx, *devURL)
	if err != nil {
		return fmt.Errorf("migrate lint: %w", err)
	}
	defer stop()
	report, err := migrate.Lint(ctx, dev, dir, *latest)
	if report != nil {
		report.Write(os.Stdout)
	}
	if errors.Is(err, migrate.ErrLintFindings) {
		return fmt.Errorf("migrate lint: %w (exempt a reviewed statement with `-- atlas:nolint CHECK`)", err)
	}
	if err != nil {
		return fmt.Errorf("migrate lint: %w", err)
	}
	return nil
}

func migrateHash(_ context.Context, args []string) error {
	fs := newFlags("migrate hash", "migrate hash [--dir DIR]",
		"Rewrites atlas.sum to match the directory's files, after a reviewed edit of a\n"+
			"file that no database has applied yet (e.g. adding `-- atlas:txmode none` or\n"+
			"`-- atlas:nolint`). apply still refuses a file changed after it was applied.")
	dirPath := dirFlag(fs, migrate.SourceDir, "migration directory of the source tree")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if err := migrate.Hash(*dirPath); err != nil {
		return fmt.Errorf("migrate hash: %w", err)
	}
	fmt.Printf("wrote %s/atlas.sum\n", *dirPath)
	return nil
}
