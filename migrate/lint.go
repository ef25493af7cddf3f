package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlcheck"
	"ariga.io/atlas/sql/sqlcheck/condrop"
	"ariga.io/atlas/sql/sqlcheck/datadepend"
	"ariga.io/atlas/sql/sqlcheck/destructive"
	"ariga.io/atlas/sql/sqlcheck/incompatible"
	"ariga.io/atlas/sql/sqlclient"
)

// ErrLintFindings is wrapped by the error Lint and Plan return when a
// finding is an error under the lint policy.
var ErrLintFindings = errors.New("lint found errors")

// Finding is one diagnostic of a lint check on a statement.
type Finding struct {
	Line  int    // line of the statement in its file (1-based; 0: the whole file)
	Stmt  string // the statement, as written
	Check string // the check: destructive, data_depend, incompatible, condrop, concurrent_index
	Code  string // the diagnostic's code, e.g. DS103 (Atlas's codes; PG1xx for concurrent_index)
	Text  string
	Error bool // an error under the policy (else a warning)
}

// FileReport holds the findings of one migration file, by statement order.
type FileReport struct {
	File     atlasmigrate.File
	Findings []Finding
}

// Errors counts the findings that are errors.
func (r *FileReport) Errors() int {
	n := 0
	for _, f := range r.Findings {
		if f.Error {
			n++
		}
	}
	return n
}

// LintReport is the result of a lint run: one report per linted file.
type LintReport struct {
	Files []*FileReport
}

// Errors counts the error findings of every file.
func (r *LintReport) Errors() int {
	n := 0
	for _, f := range r.Files {
		n += f.Errors()
	}
	return n
}

// Write prints the report: each file, then its findings grouped by
// statement.
func (r *LintReport) Write(w io.Writer) {
	for _, f := range r.Files {
		f.Write(w)
	}
}

// Write prints the file's findings grouped by statement.
func (r *FileReport) Write(w io.Writer) {
	errs := r.Errors()
	if len(r.Findings) == 0 {
		fmt.Fprintf(w, "%s: no findings\n", r.File.Name())
		return
	}
	fmt.Fprintf(w, "%s: %d error(s), %d warning(s)\n", r.File.Name(), errs, len(r.Findings)-errs)
	last := -1
	for _, f := range r.Findings {
		if f.Line != last {
			if f.Line > 0 {
				fmt.Fprintf(w, "  line %d: %s\n", f.Line, abbreviate(f.Stmt, 100))
			} else {
				fmt.Fprintf(w, "  whole file:\n")
			}
			last = f.Line
		}
		sev := "warning"
		if f.Error {
			sev = "error"
		}
		fmt.Fprintf(w, "    %-7s %s %s: %s\n", sev, f.Check, f.Code, f.Text)
	}
}

// err summarises the error findings, or is nil.
func (r *LintReport) err() error {
	var names []string
	for _, f := range r.Files {
		if n := f.Errors(); n > 0 {
			names = append(names, fmt.Sprintf("%s (%d)", f.File.Name(), n))
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%w in %s", ErrLintFindings, strings.Join(names, ", "))
}

// policy says which checks are errors (the others report warnings). It
// matches the lint block of atlas.hcl.
var policy = map[string]bool{
	"destructive":      true,  // dropped schema, table or column: data loss
	"data_depend":      true,  // may fail on existing data (new unique index, NOT NULL)
	"incompatible":     true,  // renamed table or column: breaks running code
	"condrop":          false, // dropped foreign key
	"concurrent_index": true,  // CREATE INDEX on an existing table without CONCURRENTLY
}

// Lint checks the newest latest files of dir (all of them when latest <= 0)
// on the dev database at devURL, which must be empty: the files before them
// are replayed there, then each checked file statement by statement, and the
// dev database is restored to empty afterwards.
//
// Checks: atlas's destructive, data_depend, incompatible and condrop
// analyzers, and concurrent_index (a CREATE INDEX without CONCURRENTLY on a
// table that existed before the file; a CONCURRENTLY statement in a file
// without `-- atlas:txmode none`). A statement preceded by
// `-- atlas:nolint [check|code ...]` (or a file with that directive in its
// header) is exempt from the named checks, or from all.
//
// Errors: destructive, data_depend, incompatible and concurrent_index
// findings; warnings: condrop, and PG102 (DROP INDEX without CONCURRENTLY).
// The error wraps ErrLintFindings when a finding is an error; the report is
// returned with it.
func Lint(ctx context.Context, devURL string, dir atlasmigrate.Dir, latest int) (*LintReport, error) {
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	files, err := dir.Files()
	if err != nil {
		return nil, err
	}
	if latest <= 0 || latest > len(files) {
		latest = len(files)
	}
	return lintFiles(ctx, devURL, files[:len(files)-latest], files[len(files)-latest:])
}

// lintFiles replays base on the dev database, then lints files.
func lintFiles(ctx context.Context, devURL string, base, files []atlasmigrate.File) (*LintReport, error) {
	dev, err := open(ctx, devURL)
	if err != nil {
		return nil, fmt.Errorf("dev database: %w", err)
	}
	defer dev.Close()
	l := &loader{dev: dev}
	checked, err := l.load(ctx, base, files)
	if err != nil {
		return nil, err
	}
	report := &LintReport{}
	for _, f := range checked {
		fr, err := analyze(ctx, dev, f)
		if err != nil {
			return nil, err
		}
		report.Files = append(report.Files, fr)
	}
	return report, report.err()
}

// loader computes the schema changes of migration files by running them on
// a dev database and inspecting it after every statement: the CLI's
// DevLoader, which the atlas library does not export.
type loader struct {
	dev *sqlclient.Client
}

func (l *loader) load(ctx context.Context, base, files []atlasmigrate.File) (out []*sqlcheck.File, err error) {
	err = onEmptyDev(ctx, l.dev, func() error {
		out, err = l.loadOnEmpty(ctx, base, files)
		return err
	})
	return out, err
}

func (l *loader) loadOnEmpty(ctx context.Context, base, files []atlasmigrate.File) ([]*sqlcheck.File, error) {
	for _, f := range base {
		if err := replay(ctx, l.dev, f, -1); err != nil {
			return nil, err
		}
	}
	current, err := l.inspect(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*sqlcheck.File, len(files))
	for i, f := range files {
		out[i] = &sqlcheck.File{File: f, From: current}
		if current, err = l.next(ctx, out[i], current); err != nil {
			return nil, err
		}
		out[i].To = current
	}
	return out, nil
}

// next runs f's statements one by one, attaching to f the changes each
// made, and returns the state after the file.
func (l *loader) next(ctx context.Context, f *sqlcheck.File, start *schema.Realm) (*schema.Realm, error) {
	stmts, err := atlasmigrate.FileStmtDecls(l.dev.Driver, f.File)
	if err != nil {
		return nil, fmt.Errorf("migration %s: %w", f.Name(), err)
	}
	current := start
	for _, s := range stmts {
		if _, err := l.dev.ExecContext(ctx, s.Text); err != nil {
			return nil, fmt.Errorf("migration %s fails on the dev database at line %d: %v", f.Name(), lineOf(f.File, s.Pos), oneLine(err))
		}
		next, err := l.inspect(ctx)
		if err != nil {
			return nil, err
		}
		changes, err := l.dev.RealmDiff(current, next)
		if err != nil {
			return nil, fmt.Errorf("migration %s: line %d: diff: %w", f.Name(), lineOf(f.File, s.Pos), err)
		}
		f.Changes = append(f.Changes, &sqlcheck.Change{Stmt: s, Changes: fixRenames(s.Text, changes)})
		current = next
	}
	if f.Sum, err = l.dev.RealmDiff(start, current); err != nil {
		return nil, err
	}
	return current, nil
}

func (l *loader) inspect(ctx context.Context) (*schema.Realm, error) {
	r, err := l.dev.InspectRealm(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("dev database: inspect: %w", err)
	}
	return r, nil
}

// A rename reads to a diff as a drop and an add; turn them back into the
// rename the statement made, so that the incompatible check sees it (the
// CLI does this with its SQL parser).
var (
	reRenameColumn = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?(\S+)\s+RENAME\s+(?:COLUMN\s+)?(\S+)\s+TO\s+(\S+?)\s*;?\s*$`)
	reRenameTable  = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\S+)\s+RENAME\s+TO\s+(\S+?)\s*;?\s*$`)
)

func fixRenames(stmt string, changes schema.Changes) schema.Changes {
	if m := reRenameTable.FindStringSubmatch(stmt); m != nil {
		from, to := unqualify(m[1]), unqualify(m[2])
		d := slices.IndexFunc(changes, func(c schema.Change) bool {
			dt, ok := c.(*schema.DropTable)
			return ok && dt.T.Name == from
		})
		a := slices.IndexFunc(changes, func(c schema.Change) bool {
			at, ok := c.(*schema.AddTable)
			return ok && at.T.Name == to
		})
		if d >= 0 && a >= 0 {
			rt := &schema.RenameTable{From: changes[d].(*schema.DropTable).T, To: changes[a].(*schema.AddTable).T}
			changes[d] = rt
			return slices.Delete(changes, a, a+1)
		}
		return changes
	}
	m := reRenameColumn.FindStringSubmatch(stmt)
	if m == nil || strings.EqualFold(m[2], "CONSTRAINT") {
		return changes
	}
	table, from, to := unqualify(m[1]), unqualify(m[2]), unqualify(m[3])
	for _, c := range changes {
		mt, ok := c.(*schema.ModifyTable)
		if !ok || mt.T.Name != table {
			continue
		}
		d := schema.Changes(mt.Changes).IndexDropColumn(from)
		a := schema.Changes(mt.Changes).IndexAddColumn(to)
		if d >= 0 && a >= 0 {
			mt.Changes[d] = &schema.RenameColumn{From: mt.Changes[d].(*schema.DropColumn).C, To: mt.Changes[a].(*schema.AddColumn).C}
			mt.Changes = slices.Delete(mt.Changes, a, a+1)
		}
	}
	return changes
}

// unqualify strips the schema qualifier and the quotes of an identifier.
func unqualify(ident string) string {
	switch {
	case strings.Contains(ident, `"."`):
		ident = ident[strings.LastIndex(ident, `"."`)+2:]
	case strings.HasPrefix(ident, `"`):
	case strings.Contains(ident, "."):
		ident = ident[strings.LastIndex(ident, ".")+1:]
	}
	return strings.ReplaceAll(strings.Trim(ident, `"`), `""`, `"`)
}

// analyze runs every check on one loaded file.
func analyze(ctx context.Context, dev *sqlclient.Client, f *sqlcheck.File) (*FileReport, error) {
	ds, err := destructive.New(nil)
	if err != nil {
		return nil, err
	}
	dd, err := datadepend.New(nil, datadepend.Handler{AddNotNull: addNotNull})
	if err != nil {
		return nil, err
	}
	bc, err := incompatible.New(nil)
	if err != nil {
		return nil, err
	}
	cd, err := condrop.New(nil)
	if err != nil {
		return nil, err
	}
	checks := []sqlcheck.NamedAnalyzer{ds, dd, bc, cd, concurrentIndex{}}
	stmts := map[int]*atlasmigrate.Stmt{}
	for _, c := range f.Changes {
		stmts[c.Stmt.Pos] = c.Stmt
	}
	fileNolint := fileDirective(f.File, "nolint")
	fr := &FileReport{File: f.File}
	for _, a := range checks {
		name := a.Name()
		pass := &sqlcheck.Pass{
			File: f,
			Dev:  dev,
			Reporter: sqlcheck.ReportWriterFunc(func(r sqlcheck.Report) {
				for _, d := range r.Diagnostics {
					s := stmts[d.Pos]
					if exempt(fileNolint, name, d.Code) || (s != nil && exempt(s.Directive("nolint"), name, d.Code)) {
						continue
					}
					fd := Finding{Check: name, Code: d.Code, Text: d.Text, Error: policy[name] && !advisory[d.Code]}
					if s != nil {
						fd.Line, fd.Stmt = lineOf(f.File, s.Pos), s.Text
					}
					fr.Findings = append(fr.Findings, fd)
				}
			}),
		}
		// The analyzers return an error for a report they consider fatal;
		// severity here is policy's, and the report was already written.
		_ = a.Analyze(ctx, pass)
	}
	slices.SortStableFunc(fr.Findings, func(a, b Finding) int { return a.Line - b.Line })
	return fr, nil
}

// exempt reports whether a nolint directive with args covers check/code.
// A directive without arguments covers every check.
func exempt(directives []string, check, code string) bool {
	for _, d := range directives {
		args := strings.Fields(d)
		if len(args) == 0 || slices.Contains(args, check) || slices.Contains(args, code) {
			return true
		}
	}
	return false
}

// fileDirective returns the arguments of f's header directives called
// name ("" for one without arguments).
func fileDirective(f atlasmigrate.File, name string) []string {
	if lf, ok := f.(*atlasmigrate.LocalFile); ok {
		return lf.Directive(name)
	}
	return nil
}

// addNotNull is data_depend's PostgreSQL handler (as in atlas's
// postgrescheck): a NOT NULL column without default added to an existing
// table fails when the table has rows.
func addNotNull(p *datadepend.ColumnPass) ([]sqlcheck.Diagnostic, error) {
	t, err := postgres.FormatType(p.Column.Type.Type)
	if err != nil {
		return nil, err
	}
	return []sqlcheck.Diagnostic{{
		Pos:  p.Change.Stmt.Pos,
		Text: fmt.Sprintf("Adding a non-nullable %q column %q will fail in case table %q is not empty", t, p.Column.Name, p.Table.Name),
	}}, nil
}

// concurrentIndex is the project's PostgreSQL index check (Atlas Pro's
// concurrent_index, which the open-source library lacks):
//
//	PG101  CREATE INDEX without CONCURRENTLY on a table that existed before
//	       the file: the build blocks writes to the table until it ends.
//	PG102  DROP INDEX without CONCURRENTLY on such a table (a warning).
//	PG103  CONCURRENTLY in a file that runs in a transaction: PostgreSQL
//	       refuses it ("cannot run inside a transaction block").
type concurrentIndex struct{}

var (
	reCreateIndex = regexp.MustCompile(`(?is)^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s`)
	reDropIndex   = regexp.MustCompile(`(?is)^\s*DROP\s+INDEX\s`)
	reConcurrent  = regexp.MustCompile(`(?is)^\s*(?:CREATE\s+(?:UNIQUE\s+)?INDEX|DROP\s+INDEX|REINDEX(?:\s+\(.*?\))?\s+\w+)\s+CONCURRENTLY\s`)
)

// Name implements sqlcheck.NamedAnalyzer.
func (concurrentIndex) Name() string { return "concurrent_index" }

// Analyze implements sqlcheck.Analyzer.
func (concurrentIndex) Analyze(_ context.Context, p *sqlcheck.Pass) error {
	var diags []sqlcheck.Diagnostic
	mode, _ := TxMode(p.File.File)
	for _, sc := range p.File.Changes {
		text := sc.Stmt.Text
		concurrent := reConcurrent.MatchString(text)
		if concurrent && mode != TxModeNone {
			diags = append(diags, sqlcheck.Diagnostic{Code: "PG103", Pos: sc.Stmt.Pos,
				Text: "CONCURRENTLY cannot run inside a transaction: add `-- atlas:txmode none` to the file's header"})
		}
		if concurrent {
			continue
		}
		for _, c := range sc.Changes {
			mt, ok := c.(*schema.ModifyTable)
			if !ok || p.File.TableSpan(mt.T)&sqlcheck.SpanAdded != 0 {
				continue
			}
			for _, mc := range mt.Changes {
				switch mc := mc.(type) {
				case *schema.AddIndex:
					if reCreateIndex.MatchString(text) {
						diags = append(diags, sqlcheck.Diagnostic{Code: "PG101", Pos: sc.Stmt.Pos,
							Text: fmt.Sprintf("Creating index %q on existing table %q without CONCURRENTLY blocks writes to the table while it builds: use CREATE INDEX CONCURRENTLY in a file with `-- atlas:txmode none`", mc.I.Name, mt.T.Name)})
					}
				case *schema.DropIndex:
					if reDropIndex.MatchString(text) {
						diags = append(diags, sqlcheck.Diagnostic{Code: "PG102", Pos: sc.Stmt.Pos,
							Text: fmt.Sprintf("Dropping index %q of table %q without CONCURRENTLY takes an exclusive lock on the table", mc.I.Name, mt.T.Name)})
					}
				}
			}
		}
	}
	if len(diags) > 0 {
		p.Reporter.WriteReport(sqlcheck.Report{Text: "non-concurrent index changes detected", Diagnostics: diags})
	}
	return nil
}

// advisory lists the codes that are warnings whatever policy says of their
// check.
var advisory = map[string]bool{"PG102": true}

func lineOf(f atlasmigrate.File, pos int) int {
	b := f.Bytes()
	return 1 + strings.Count(string(b[:min(max(pos, 0), len(b))]), "\n")
}
