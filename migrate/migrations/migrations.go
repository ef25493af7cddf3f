// Package migrations is the versioned migration directory itself: the
// SQL files DBAs review and their atlas.sum, compiled into every binary.
// Atlas reads only the .sql files and atlas.sum of a directory, so this
// file beside them changes nothing for it or for the Atlas CLI.
//
// It imports no Atlas: the consumers read the newest version from it (the
// schema gate) without linking the migration toolchain, which lives in
// package migrate and reads the same files through FS.
package migrations

import (
	"embed"
	"errors"
	"io/fs"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/lib/pq"
)

// FS holds the directory's migration files and atlas.sum.
//
//go:embed *.sql atlas.sum
var FS embed.FS

// Latest is the version of the newest migration file: the schema the binary
// was built for. A consumer waits for it to be applied before it joins its
// group (the schema gate). Versions and their order are Atlas': a file's
// version is its name up to the first "_", and files sort by name.
func Latest() (string, error) {
	names, err := fs.Glob(FS, "*.sql")
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", errors.New("no migration files embedded")
	}
	slices.Sort(names)
	return version(names[len(names)-1]), nil
}

// version is the version of the migration file name, as Atlas reads it.
func version(name string) string {
	v, _, _ := strings.Cut(strings.TrimSuffix(path.Base(name), ".sql"), "_")
	return v
}

// The revision table: where `pinctl migrate apply` (and the Atlas CLI)
// records which of these files a database has, and what the consumers'
// schema gate reads. Package migrate keeps it; its name and place are here
// so that the gate needs no Atlas.
const (
	// RevisionSchema is the schema of the revision table for a database-wide
	// URL (one without search_path); a schema-bound URL keeps the table in
	// its own schema, as the CLI does.
	RevisionSchema = "atlas_schema_revisions"
	// RevisionTable is the revision table's name.
	RevisionTable = "atlas_schema_revisions"
)

// RevisionSchemaOf is the schema of the revision table for the database URL
// u: its search_path (a schema-bound URL, as the Atlas CLI's postgres
// driver reads it), else RevisionSchema.
func RevisionSchemaOf(u *url.URL) string {
	if u != nil {
		if s := u.Query().Get("search_path"); s != "" {
			return s
		}
	}
	return RevisionSchema
}

// RevisionTableIn is the revision table in schema, schema-qualified and
// quoted for SQL.
func RevisionTableIn(schema string) string {
	return QuoteIdent(schema) + "." + QuoteIdent(RevisionTable)
}

// RevisionTableOf is the revision table `pinctl migrate apply` keeps for
// databaseURL, schema-qualified and quoted for SQL: what the consumers'
// schema gate reads. A key=value string (which apply refuses) is read the
// same way: its search_path, as lib/pq sends it, names the schema. The
// owner's URL and the services' must name the same search_path (or none):
// it decides where the tables and their history are.
func RevisionTableOf(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Scheme == "" {
		u = nil
		if cfg, err := pq.NewConfig(databaseURL); err == nil && cfg.Runtime["search_path"] != "" {
			u = &url.URL{RawQuery: url.Values{"search_path": {cfg.Runtime["search_path"]}}.Encode()}
		}
	}
	return RevisionTableIn(RevisionSchemaOf(u))
}

// QuoteIdent quotes a PostgreSQL identifier (a schema's or a table's name).
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
