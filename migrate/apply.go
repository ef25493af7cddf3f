package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlclient"

	"github.com/pin-platform/pin/migrate/migrations"
)

// applyLock is the advisory lock Apply holds while it runs. It is the Atlas
// CLI's lock name (hashed the same way by the atlas driver), so pinctl and
// `atlas migrate apply` exclude each other too.
const applyLock = "atlas_migrate_execute"

// Option tunes Apply, Status and Plan.
type Option func(*options)

type options struct {
	log         io.Writer
	baseline    string
	lockTimeout time.Duration
	drift       bool   // Status: check drift (WithDriftCheck)
	driftDev    string // its dev database
}

func newOptions(opts []Option) *options {
	o := &options{log: io.Discard, lockTimeout: time.Minute}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// WithLog makes Apply write one progress line per file to w.
func WithLog(w io.Writer) Option {
	return func(o *options) {
		if w != nil {
			o.log = w
		}
	}
}

// WithBaseline marks version as already applied on a database that has
// tables but no revision history (one created before migrations were
// versioned): files up to and including it are skipped.
func WithBaseline(version string) Option {
	return func(o *options) { o.baseline = version }
}

// WithLockTimeout bounds how long Apply waits for another apply (pinctl or
// the Atlas CLI) to release the migration lock. Default: one minute.
func WithLockTimeout(d time.Duration) Option {
	return func(o *options) { o.lockTimeout = d }
}

// Apply applies the pending files of dir to the database at url and returns
// the names of the files it applied; none when the database is up to date.
//
// It refuses to run when dir does not match its atlas.sum, or when a file
// already applied has changed since (its hash differs from the one
// recorded). It holds a PostgreSQL advisory lock while it runs. Each file
// runs in its own transaction, together with its revision row, unless the
// file says `-- atlas:txmode none` (needed for CREATE INDEX CONCURRENTLY);
// such a file's statements commit one by one and a failure leaves a partial
// revision that the next Apply continues from.
func Apply(ctx context.Context, url string, dir atlasmigrate.Dir, opts ...Option) (applied []string, err error) {
	o := newOptions(opts)
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	c, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	unlock, err := c.Lock(ctx, applyLock, o.lockTimeout)
	if err != nil {
		if errors.Is(err, schema.ErrLocked) {
			return nil, fmt.Errorf("another migration apply holds the lock on %s (waited %s)", Redact(url), o.lockTimeout)
		}
		return nil, fmt.Errorf("take the migration lock: %w", err)
	}
	defer func() {
		if uerr := unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("release the migration lock: %w", uerr)
		}
	}()
	rrw := newRevisions(c, c.DB)
	if err := rrw.create(ctx); err != nil {
		return nil, err
	}
	ex, err := atlasmigrate.NewExecutor(c.Driver, dir, rrw, o.executorOptions()...)
	if err != nil {
		return nil, err
	}
	pending, err := pendingFiles(ctx, ex, rrw, dir)
	if errors.Is(err, atlasmigrate.ErrNoPendingFiles) {
		fmt.Fprintln(o.log, "database is up to date: no pending migration files")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, f := range pending {
		start := time.Now()
		if err := applyFile(ctx, c, rrw, dir, f, o); err != nil {
			return applied, err
		}
		applied = append(applied, f.Name())
		fmt.Fprintf(o.log, "applied %s (%s)\n", f.Name(), time.Since(start).Round(time.Millisecond))
	}
	return applied, nil
}

func (o *options) executorOptions() []atlasmigrate.ExecutorOption {
	opts := []atlasmigrate.ExecutorOption{atlasmigrate.WithOperatorVersion(OperatorVersion())}
	if o.baseline != "" {
		opts = append(opts, atlasmigrate.WithBaselineVersion(o.baseline))
	}
	return opts
}

// applyFile executes one file: in a transaction of its own, with a driver
// and a revision writer bound to that transaction, unless the file opts out.
func applyFile(ctx context.Context, c *sqlclient.Client, rrw *revisions, dir atlasmigrate.Dir, f atlasmigrate.File, o *options) error {
	mode, err := TxMode(f)
	if err != nil {
		return err
	}
	if mode == TxModeNone {
		ex, err := atlasmigrate.NewExecutor(c.Driver, dir, rrw, o.executorOptions()...)
		if err != nil {
			return err
		}
		if err := ex.Execute(ctx, f); err != nil {
			return fileError(f, err, "statements before it stay applied (txmode none); fix the cause and run apply again to continue")
		}
		return nil
	}
	tx, err := c.Tx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: begin transaction: %w", f.Name(), err)
	}
	ex, err := atlasmigrate.NewExecutor(tx.Driver, dir, newRevisions(c, tx.Tx), o.executorOptions()...)
	if err == nil {
		err = ex.Execute(ctx, f)
	}
	if err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", rerr))
		}
		return fileError(f, err, "its transaction was rolled back: nothing of it is applied")
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", f.Name(), err)
	}
	return nil
}

// fileError turns an executor error into one line naming the file and, for
// a failed statement, its line number.
func fileError(f atlasmigrate.File, err error, consequence string) error {
	var se *atlasmigrate.StmtExecError
	if errors.As(err, &se) {
		return fmt.Errorf("migration %s failed at line %d (%s): %v; %s",
			f.Name(), lineOf(f, se.Stmt.Pos), abbreviate(se.Stmt.Text, 60), oneLine(se.Err), consequence)
	}
	return fmt.Errorf("migration %s failed: %v", f.Name(), oneLine(err))
}

// pendingFiles returns the files to apply after checking that every file
// already applied is unchanged.
func pendingFiles(ctx context.Context, ex *atlasmigrate.Executor, rrw *revisions, dir atlasmigrate.Dir) ([]atlasmigrate.File, error) {
	revs, err := rrw.ReadRevisions(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkApplied(revs, dir); err != nil {
		return nil, err
	}
	pending, err := ex.Pending(ctx)
	var nc *atlasmigrate.NotCleanError
	switch {
	case errors.As(err, &nc):
		return nil, fmt.Errorf("the database has objects but no migration history (%s): apply needs an empty database, or a baseline version for one created before migrations", nc.Reason)
	case errors.As(err, new(*atlasmigrate.HistoryNonLinearError)):
		return nil, fmt.Errorf("%v: files must be added after the last applied version", oneLine(err))
	}
	return pending, err
}

// checkApplied refuses a directory whose already-applied files changed
// after they were applied (and whose atlas.sum was re-hashed to match).
func checkApplied(revs []*atlasmigrate.Revision, dir atlasmigrate.Dir) error {
	sum, err := dir.Checksum()
	if err != nil {
		return err
	}
	files, err := dir.Files()
	if err != nil {
		return err
	}
	for _, r := range revs {
		if !r.Type.Has(atlasmigrate.RevisionTypeExecute) || r.Hash == "" {
			continue
		}
		for _, f := range files {
			if f.Version() != r.Version {
				continue
			}
			if h, err := sum.SumByName(f.Name()); err == nil && h != r.Hash {
				return fmt.Errorf("migration file %s was changed after it was applied (version %s, applied %s): restore it and put the change in a new file",
					f.Name(), r.Version, r.ExecutedAt.Format(time.RFC3339))
			}
		}
	}
	return nil
}

func newRevisions(c *sqlclient.Client, eq schema.ExecQuerier) *revisions {
	return &revisions{eq: eq, schema: migrations.RevisionSchemaOf(c.URL.URL)}
}

// Transaction modes of a migration file (`-- atlas:txmode <mode>`).
const (
	TxModeFile = "file" // the whole file in one transaction (the default)
	TxModeNone = "none" // no transaction: each statement commits alone
)

// TxMode returns the transaction mode of file f.
func TxMode(f atlasmigrate.File) (string, error) {
	lf, ok := f.(*atlasmigrate.LocalFile)
	if !ok {
		return TxModeFile, nil
	}
	switch ds := lf.Directive("txmode"); {
	case len(ds) == 0:
		return TxModeFile, nil
	case len(ds) > 1:
		return "", fmt.Errorf("migration %s: more than one atlas:txmode directive: %q", f.Name(), ds)
	case ds[0] == TxModeFile, ds[0] == TxModeNone:
		return ds[0], nil
	default:
		return "", fmt.Errorf("migration %s: unknown atlas:txmode %q (want %q or %q)", f.Name(), ds[0], TxModeFile, TxModeNone)
	}
}

// CheckDir verifies that dir matches its atlas.sum and that every file's
// directives are valid. Its errors name the offending file.
func CheckDir(dir atlasmigrate.Dir) error {
	err := atlasmigrate.Validate(dir)
	var ce *atlasmigrate.ChecksumError
	switch {
	case errors.As(err, &ce):
		switch ce.Reason {
		case atlasmigrate.ReasonAdded:
			return fmt.Errorf("migration directory does not match atlas.sum: %s was added without updating atlas.sum (files come from `pinctl migrate diff`; `pinctl migrate hash` re-hashes a reviewed directory)", ce.File)
		case atlasmigrate.ReasonRemoved:
			return fmt.Errorf("migration directory does not match atlas.sum: %s was removed (atlas.sum line %d)", ce.File, ce.Line)
		default:
			return fmt.Errorf("migration directory does not match atlas.sum: %s was edited (atlas.sum line %d); an applied file must never change: restore it and put the change in a new file (only for a file applied nowhere yet, `pinctl migrate hash` accepts the edit)", ce.File, ce.Line)
		}
	case errors.Is(err, atlasmigrate.ErrChecksumNotFound):
		return errors.New("migration directory has no atlas.sum: refusing unverified files")
	case errors.Is(err, atlasmigrate.ErrChecksumFormat):
		return errors.New("atlas.sum is malformed: refusing unverified files")
	case errors.Is(err, atlasmigrate.ErrChecksumMismatch):
		return errors.New("atlas.sum is corrupt: its total hash (first line) does not match its file lines")
	case err != nil:
		return fmt.Errorf("migration directory: %w", err)
	}
	files, err := dir.Files()
	if err != nil {
		return fmt.Errorf("migration directory: %w", err)
	}
	for _, f := range files {
		if _, err := TxMode(f); err != nil {
			return err
		}
	}
	return nil
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func abbreviate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
