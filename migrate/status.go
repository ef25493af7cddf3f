package migrate

import (
	"context"
	"errors"
	"slices"

	atlasmigrate "ariga.io/atlas/sql/migrate"
)

// State is a database's migration state against a directory.
type State struct {
	// Revisions are the revisions recorded in the database, oldest first.
	Revisions []*atlasmigrate.Revision
	// Pending are the directory's files not (fully) applied, in order.
	Pending []atlasmigrate.File
	// NotClean is set when the database has objects but no revision
	// history: apply would refuse to run on it without a baseline.
	NotClean string
	// Applied are the directory's files the revisions say were applied (a
	// baseline's files included), in order. A partially applied file is
	// the first of Pending, not one of these.
	Applied []atlasmigrate.File
	// Drift compares the live schema with the one Applied produces; nil
	// unless Status was asked to check it (WithDriftCheck).
	Drift *Drift
}

// Current is the last revision, or nil when none was applied.
func (s *State) Current() *atlasmigrate.Revision {
	if len(s.Revisions) == 0 {
		return nil
	}
	return s.Revisions[len(s.Revisions)-1]
}

// Status reads the migration state of the database at url against dir. It
// writes nothing: a database without a revision table has no revisions.
// Like Apply, it refuses a directory that does not match its atlas.sum or
// whose applied files were changed. WithDriftCheck adds State.Drift.
func Status(ctx context.Context, url string, dir atlasmigrate.Dir, opts ...Option) (*State, error) {
	o := newOptions(opts)
	st, err := status(ctx, url, dir)
	if err != nil || !o.drift {
		return st, err
	}
	if st.Drift, err = CheckDrift(ctx, url, o.driftDev, dir, st); err != nil {
		return nil, err
	}
	return st, nil
}

func status(ctx context.Context, url string, dir atlasmigrate.Dir) (*State, error) {
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	c, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rrw := newRevisions(c, c.DB)
	revs, err := rrw.ReadRevisions(ctx)
	if err != nil {
		return nil, err
	}
	st := &State{Revisions: revs}
	if err := checkApplied(revs, dir); err != nil {
		return nil, err
	}
	ex, err := atlasmigrate.NewExecutor(c.Driver, dir, rrw, atlasmigrate.WithOperatorVersion(OperatorVersion()))
	if err != nil {
		return nil, err
	}
	pending, err := ex.Pending(ctx)
	var nc *atlasmigrate.NotCleanError
	switch {
	case errors.Is(err, atlasmigrate.ErrNoPendingFiles):
	case errors.As(err, &nc):
		st.NotClean = nc.Reason
		if st.Pending, err = dir.Files(); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		st.Pending = pending
	}
	if st.NotClean == "" && len(revs) > 0 {
		files, err := dir.Files()
		if err != nil {
			return nil, err
		}
		last := revs[len(revs)-1].Version
		for _, f := range files {
			if f.Version() <= last && !slices.ContainsFunc(st.Pending, func(p atlasmigrate.File) bool { return p.Version() == f.Version() }) {
				st.Applied = append(st.Applied, f)
			}
		}
	}
	return st, nil
}
