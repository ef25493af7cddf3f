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
)

// Drift is how a database's live schema differs from the schema its applied
// migration files produce: a column added by hand, an index dropped in an
// incident and never restored, a constraint renamed in psql.
//
// The expected schema is the directory's applied part (the files the
// revisions say were applied, a partially applied file's applied
// statements) replayed on an empty dev database; both databases are
// inspected in the schemas the migrations manage (those the replay leaves:
// public today), without the revision table, and diffed by Atlas: tables
// (columns, indexes, primary and foreign keys, checks) and enum types. What
// the open-source Atlas library does not inspect (views, functions,
// triggers, grants, row-level-security policies) is not compared.
type Drift struct {
	// Replayed names the files replayed on the dev database, in order.
	Replayed []string
	// Partial is the partially applied file, of which only its applied
	// statements were replayed ("" when there is none).
	Partial string
	// Schemas are the schemas compared.
	Schemas []string
	// Changes turn the migrations' schema into the live one: empty when
	// there is no drift.
	Changes schema.Changes
	// Statements are Changes as SQL, each preceded by its comment line
	// ("-- Modify "leads" table"); a change Atlas cannot render as SQL is
	// described in a comment instead.
	Statements []string
	// Ahead is set when the database's current version is newer than the
	// directory's newest file: it was migrated by a newer directory, whose
	// files may be the difference.
	Ahead string
}

// Drifted reports whether the live schema differs from the migrations'.
func (d *Drift) Drifted() bool { return d != nil && len(d.Changes) > 0 }

// WithDriftCheck makes Status also compare the live schema with what the
// applied migration files produce, replaying them on the empty dev
// database at devURL (State.Drift). The dev database is left empty.
func WithDriftCheck(devURL string) Option {
	return func(o *options) { o.driftDev, o.drift = devURL, true }
}

// DriftNeedsDev reports whether checking st's database for drift replays
// files on a dev database: not when no file was applied, where the
// expected schema is an empty one.
func (s *State) DriftNeedsDev() bool {
	return len(s.Applied) > 0 || s.partial() > 0
}

// partial is the number of applied statements of the partially applied
// file (Pending[0]), or 0.
func (s *State) partial() int {
	cur := s.Current()
	if cur == nil || cur.Applied >= cur.Total || len(s.Pending) == 0 || s.Pending[0].Version() != cur.Version {
		return 0
	}
	return cur.Applied
}

// CheckDrift compares the live schema of the database at url with what the
// applied part of dir produces on the empty dev database at devURL (unused,
// and may be empty, when !st.DriftNeedsDev()). st is the database's State
// (Status). It changes nothing on url; the dev database is left empty.
func CheckDrift(ctx context.Context, url, devURL string, dir atlasmigrate.Dir, st *State) (*Drift, error) {
	d := &Drift{}
	for _, f := range st.Applied {
		d.Replayed = append(d.Replayed, f.Name())
	}
	n := st.partial()
	if n > 0 {
		d.Partial = st.Pending[0].Name()
	}
	if cur := st.Current(); cur != nil {
		files, err := dir.Files()
		if err != nil {
			return nil, err
		}
		if len(files) > 0 && cur.Version > files[len(files)-1].Version() {
			d.Ahead = cur.Version
		}
	}
	live, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer live.Close()

	// The migrations' schema.
	want := schema.NewRealm(schema.New("public"))
	if st.DriftNeedsDev() {
		dev, err := open(ctx, devURL)
		if err != nil {
			return nil, fmt.Errorf("dev database: %w", err)
		}
		defer dev.Close()
		err = onEmptyDev(ctx, dev, func() error {
			for _, f := range st.Applied {
				if err := replay(ctx, dev, f, -1); err != nil {
					return err
				}
			}
			if n > 0 {
				if err := replay(ctx, dev, st.Pending[0], n); err != nil {
					return err
				}
			}
			r, err := dev.InspectRealm(ctx, nil)
			if err != nil {
				return fmt.Errorf("dev database: inspect: %w", err)
			}
			want = r
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, s := range want.Schemas {
		d.Schemas = append(d.Schemas, s.Name)
	}
	if len(d.Schemas) == 0 {
		return d, nil
	}

	// The live schema, in the same schemas: not the revision table's own
	// schema (atlas_schema_revisions), and without the revision table when
	// a schema-bound URL keeps it among the managed tables.
	rev := newRevisions(live, live.DB)
	got, err := live.InspectRealm(ctx, &schema.InspectRealmOption{
		Schemas: d.Schemas,
		Exclude: []string{rev.schema + "." + RevisionTable},
	})
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", Redact(url), err)
	}
	if d.Changes, err = live.RealmDiff(want, got); err != nil {
		return nil, fmt.Errorf("diff the live schema with the migrations': %w", err)
	}
	if len(d.Changes) == 0 {
		return d, nil
	}
	d.Statements = render(ctx, live, d.Changes, len(d.Schemas) == 1)
	return d, nil
}

// render turns changes into SQL statements with their comments, or, when
// Atlas cannot plan them, into a description of each change.
func render(ctx context.Context, c *sqlclient.Client, changes schema.Changes, unqualified bool) []string {
	var opts []atlasmigrate.PlanOption
	if unqualified {
		opts = append(opts, func(o *atlasmigrate.PlanOptions) { o.SchemaQualifier = new(string) })
	}
	plan, err := c.PlanChanges(ctx, "drift", changes, opts...)
	if err != nil && unqualified {
		plan, err = c.PlanChanges(ctx, "drift", changes)
	}
	var out []string
	if err != nil {
		for _, ch := range changes {
			out = append(out, "-- "+describe(ch))
		}
		return out
	}
	for _, ch := range plan.Changes {
		s := ch.Cmd + ";"
		if ch.Comment != "" {
			s = "-- " + ch.Comment + "\n" + s
		}
		out = append(out, s)
	}
	return out
}

// describe names a change for people, when it cannot be rendered as SQL.
func describe(c schema.Change) string {
	switch c := c.(type) {
	case *schema.AddSchema:
		return fmt.Sprintf("schema %q exists only in the live database", c.S.Name)
	case *schema.DropSchema:
		return fmt.Sprintf("schema %q is missing from the live database", c.S.Name)
	case *schema.AddTable:
		return fmt.Sprintf("table %q exists only in the live database", c.T.Name)
	case *schema.DropTable:
		return fmt.Sprintf("table %q is missing from the live database", c.T.Name)
	case *schema.ModifyTable:
		var parts []string
		for _, mc := range c.Changes {
			parts = append(parts, describe(mc))
		}
		return fmt.Sprintf("table %q differs: %s", c.T.Name, strings.Join(parts, "; "))
	case *schema.AddColumn:
		return fmt.Sprintf("column %q exists only in the live database", c.C.Name)
	case *schema.DropColumn:
		return fmt.Sprintf("column %q is missing from the live database", c.C.Name)
	case *schema.ModifyColumn:
		return fmt.Sprintf("column %q differs", c.To.Name)
	case *schema.AddIndex:
		return fmt.Sprintf("index %q exists only in the live database", c.I.Name)
	case *schema.DropIndex:
		return fmt.Sprintf("index %q is missing from the live database", c.I.Name)
	case *schema.ModifyIndex:
		return fmt.Sprintf("index %q differs", c.To.Name)
	case *schema.AddForeignKey:
		return fmt.Sprintf("foreign key %q exists only in the live database", c.F.Symbol)
	case *schema.DropForeignKey:
		return fmt.Sprintf("foreign key %q is missing from the live database", c.F.Symbol)
	case *schema.AddCheck:
		return fmt.Sprintf("check %q exists only in the live database", c.C.Name)
	case *schema.DropCheck:
		return fmt.Sprintf("check %q is missing from the live database", c.C.Name)
	default:
		return fmt.Sprintf("%T", c)
	}
}

// writeDrift prints a drift report for people.
func writeDrift(w io.Writer, d *Drift) {
	if d == nil {
		return
	}
	if d.Ahead != "" {
		fmt.Fprintf(w, "note: the database is at version %s, newer than this directory's newest file: a difference may come from the migrations this directory lacks\n", d.Ahead)
	}
	if !d.Drifted() {
		fmt.Fprintf(w, "no drift: the live schema (%s) is what the applied migrations produce\n", strings.Join(d.Schemas, ", "))
		return
	}
	fmt.Fprintf(w, "drift: the live schema differs from the migrations (%s); what turns their schema into the live one:\n", replayedText(d))
	for _, s := range d.Statements {
		for _, line := range strings.Split(s, "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
}

func replayedText(d *Drift) string {
	var s string
	switch n := len(d.Replayed); n {
	case 0:
		s = "no file applied"
	case 1:
		s = "replayed " + d.Replayed[0]
	default:
		s = fmt.Sprintf("replayed %d files, %s … %s", n, d.Replayed[0], d.Replayed[n-1])
	}
	if d.Partial != "" {
		s += ", and the applied statements of " + d.Partial
	}
	return s
}

// devLock is the advisory lock a dev database is used under, by lint and
// the drift check: the Atlas CLI's lint lock name.
const devLock = "atlas_lint"

// onEmptyDev runs fn on the dev database under the dev lock, refusing a
// dev database that is not empty and restoring it to empty afterwards.
func onEmptyDev(ctx context.Context, dev *sqlclient.Client, fn func() error) (err error) {
	unlock, err := dev.Lock(ctx, devLock, 30*time.Second)
	if err != nil {
		return fmt.Errorf("dev database: take the lock %s: %w", devLock, err)
	}
	defer func() {
		if uerr := unlock(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("dev database: release the lock %s: %w", devLock, uerr))
		}
	}()
	restore, err := dev.Snapshot(ctx)
	var nc *atlasmigrate.NotCleanError
	if errors.As(err, &nc) {
		return fmt.Errorf("dev database %s is not empty (%s): migrations are replayed on an empty database", Redact(dev.URL.String()), nc.Reason)
	}
	if err != nil {
		return fmt.Errorf("dev database: snapshot: %w", err)
	}
	defer func() {
		if rerr := restore(ctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("dev database: restore to empty: %w", rerr))
		}
	}()
	return fn()
}

// replay runs the first n statements of f (all of them when n < 0) on the
// dev database.
func replay(ctx context.Context, dev *sqlclient.Client, f atlasmigrate.File, n int) error {
	stmts, err := atlasmigrate.FileStmtDecls(dev.Driver, f)
	if err != nil {
		return fmt.Errorf("migration %s: %w", f.Name(), err)
	}
	if n >= 0 && n < len(stmts) {
		stmts = stmts[:n]
	}
	for _, s := range stmts {
		if _, err := dev.ExecContext(ctx, s.Text); err != nil {
			return fmt.Errorf("replay %s on the dev database: line %d: %v", f.Name(), lineOf(f, s.Pos), oneLine(err))
		}
	}
	return nil
}
