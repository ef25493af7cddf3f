// Package migrate is the project's versioned-migration toolchain, built on
// the ariga.io/atlas library because the Atlas CLI is not available here:
// it writes new migration files from the ent schema (Diff), lints them
// (Lint), shows what an apply would do (Plan, Status) and applies them
// (Apply), keeping revisions in the Atlas CLI's table and format so that
// either tool can be used on the same database.
//
// The migration directory is embedded in every binary (Embedded, from
// package migrations), so `pinctl migrate apply` needs no source tree.
package migrate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	atlasmigrate "ariga.io/atlas/sql/migrate"

	"github.com/pin-platform/pin/migrate/migrations"
)

// SourceDir is the migration directory's path relative to the repository
// root: where Diff writes new files and what atlas.hcl describes.
const SourceDir = "migrate/migrations"

// Embedded returns the migration directory compiled into the binary, as an
// in-memory atlas directory. Each call returns a fresh copy: writing to it
// changes nothing else.
func Embedded() (atlasmigrate.Dir, error) {
	return memDirFromFS(migrations.FS, "embedded:"+SourceDir)
}

// OpenDir opens the migration directory at path, or the embedded one when
// path is empty.
func OpenDir(path string) (atlasmigrate.Dir, error) {
	if path == "" {
		return Embedded()
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("migration directory %s does not exist", path)
	case err != nil:
		return nil, fmt.Errorf("migration directory: %w", err)
	case !st.IsDir():
		return nil, fmt.Errorf("migration directory %s is not a directory", path)
	}
	return atlasmigrate.NewLocalDir(path)
}

// memDirFromFS copies the regular files at the top of fsys into a new
// in-memory directory.
func memDirFromFS(fsys fs.FS, path string) (*atlasmigrate.MemDir, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migration directory: %w", err)
	}
	// A MemDir used directly (not through OpenMemDir) is private to its
	// owner: no process-wide registry, nothing to close.
	dir := &atlasmigrate.MemDir{}
	dir.SetPath(path)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration file %s: %w", e.Name(), err)
		}
		if err := dir.WriteFile(e.Name(), b); err != nil {
			return nil, err
		}
	}
	return dir, nil
}

// Latest is the version of the newest migration compiled into the binary
// (migrations.Latest, which the consumers read without this package).
func Latest() (string, error) { return migrations.Latest() }

// Upto returns a copy of dir that holds its files up to and including
// version, with a matching atlas.sum: the directory as it was when version
// was its newest file (an old binary's, in upgrade and schema-gate tests).
func Upto(dir atlasmigrate.Dir, version string) (atlasmigrate.Dir, error) {
	files, err := dir.Files()
	if err != nil {
		return nil, err
	}
	out := &atlasmigrate.MemDir{}
	out.SetPath("upto:" + version)
	found := false
	for _, f := range files {
		if f.Version() > version {
			break
		}
		if err := out.WriteFile(f.Name(), f.Bytes()); err != nil {
			return nil, err
		}
		found = found || f.Version() == version
	}
	if !found {
		return nil, fmt.Errorf("no migration file of version %s", version)
	}
	sum, err := out.Checksum()
	if err != nil {
		return nil, err
	}
	if err := atlasmigrate.WriteSumFile(out, sum); err != nil {
		return nil, err
	}
	return out, nil
}
