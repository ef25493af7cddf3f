package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	atlasmigrate "ariga.io/atlas/sql/migrate"
)

// PlanReport is what Apply would do to a database: its state and the
// pending files with their lint findings.
type PlanReport struct {
	State *State
	Files []*FileReport // the pending files, in the order Apply runs them
	// NotLinted says why the pending files were not linted (no dev
	// database, say); Files is then empty and Write prints the pending
	// files of State without findings.
	NotLinted string
}

// Plan reads the state of the database at url and lints the files Apply
// would run, replaying the applied ones and then the pending ones on the
// empty dev database at devURL. It changes nothing on url. Lint findings,
// errors included, are part of the report, not an error.
func Plan(ctx context.Context, url, devURL string, dir atlasmigrate.Dir) (*PlanReport, error) {
	st, err := Status(ctx, url, dir)
	if err != nil {
		return nil, err
	}
	return PlanOf(ctx, st, devURL, dir)
}

// PlanOf is Plan for a database whose State (Status against dir) was
// read: it lints st's pending files on the empty dev database at devURL
// (unused when nothing is pending). It does not read the database again:
// its errors are the directory's, the dev database's and the lint's.
func PlanOf(ctx context.Context, st *State, devURL string, dir atlasmigrate.Dir) (*PlanReport, error) {
	p := &PlanReport{State: st}
	if len(st.Pending) == 0 {
		return p, nil
	}
	all, err := dir.Files()
	if err != nil {
		return nil, err
	}
	var base []atlasmigrate.File
	for _, f := range all {
		if f.Version() < st.Pending[0].Version() {
			base = append(base, f)
		}
	}
	if st.NotClean != "" {
		base = nil
	}
	lr, err := lintFiles(ctx, devURL, base, st.Pending)
	if err != nil && !errors.Is(err, ErrLintFindings) {
		return nil, err
	}
	p.Files = lr.Files
	return p, nil
}

// Errors counts the lint findings that are errors.
func (p *PlanReport) Errors() int {
	return (&LintReport{Files: p.Files}).Errors()
}

// Write prints the plan for review: the current revision, then each
// pending file's SQL followed by its findings, or, when the files were
// not linted, why.
func (p *PlanReport) Write(w io.Writer) {
	writeState(w, p.State)
	if p.NotLinted != "" {
		fmt.Fprintf(w, "lint: not run: %s\n", p.NotLinted)
		for _, f := range p.State.Pending {
			writeFileSQL(w, f)
			fmt.Fprintln(w, "-- lint: not run")
		}
		return
	}
	for _, f := range p.Files {
		writeFileSQL(w, f.File)
		fmt.Fprintf(w, "-- lint: ")
		f.Write(w)
	}
	if n := p.Errors(); n > 0 {
		fmt.Fprintf(w, "\n%d lint error(s): review them before applying\n", n)
	}
}

func writeFileSQL(w io.Writer, f atlasmigrate.File) {
	mode, _ := TxMode(f)
	fmt.Fprintf(w, "\n-- file %s (txmode %s)\n", f.Name(), mode)
	fmt.Fprintln(w, strings.TrimRight(string(f.Bytes()), "\n"))
}

// WriteStatus prints a State for people: current revision, pending files,
// and drift when it was checked.
func WriteStatus(w io.Writer, st *State) {
	writeState(w, st)
	for _, f := range st.Pending {
		fmt.Fprintf(w, "  pending: %s\n", f.Name())
	}
	writeDrift(w, st.Drift)
}

func writeState(w io.Writer, st *State) {
	switch cur := st.Current(); {
	case cur == nil && st.NotClean != "":
		fmt.Fprintf(w, "current version: none (no revision history, but the database is not empty: %s)\n", st.NotClean)
	case cur == nil:
		fmt.Fprintln(w, "current version: none (empty database)")
	case cur.Applied < cur.Total:
		fmt.Fprintf(w, "current version: %s (%s), PARTIALLY applied: %d of %d statements; last error: %s\n",
			cur.Version, cur.Description, cur.Applied, cur.Total, cur.Error)
	default:
		fmt.Fprintf(w, "current version: %s (%s), applied %s\n", cur.Version, cur.Description, cur.ExecutedAt.Format("2006-01-02 15:04:05 MST"))
	}
	if len(st.Pending) == 0 {
		fmt.Fprintln(w, "pending: none (up to date)")
	} else {
		fmt.Fprintf(w, "pending: %d file(s)\n", len(st.Pending))
	}
}
