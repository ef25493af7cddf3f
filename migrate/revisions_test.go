package migrate_test

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/migrations"
)

// The schema gate reads the revision table where apply keeps it, for every
// form of DATABASE_URL: a URL's search_path, and a key=value string's as
// lib/pq sends it; else the database-wide table.
func TestRevisionTableOfEveryURLForm(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"postgres://u:p@db/pin?sslmode=disable", `"atlas_schema_revisions"."atlas_schema_revisions"`},
		{"postgres://u:p@db/pin?sslmode=disable&search_path=pin", `"pin"."atlas_schema_revisions"`},
		{"host=db dbname=pin user=u password=p", `"atlas_schema_revisions"."atlas_schema_revisions"`},
		{"host=db dbname=pin user=u password=p search_path=pin", `"pin"."atlas_schema_revisions"`},
	} {
		if got := migrate.RevisionTableOf(c.url); got != c.want {
			t.Errorf("RevisionTableOf(%q) = %s, want %s", c.url, got, c.want)
		}
	}
}

// The consumers' schema gate reads the newest migration from package
// migrations, without Atlas: it is the version Atlas reads as the newest of
// the embedded directory, and that directory holds every file of
// migrate/migrations but the package's own Go file.
func TestLatestIsAtlasNewestOfTheEmbeddedDirectory(t *testing.T) {
	latest, err := migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := migrate.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	files, err := dir.Files()
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded files: %d, %v", len(files), err)
	}
	if want := files[len(files)-1].Version(); latest != want {
		t.Errorf("migrations.Latest() = %s, Atlas reads %s", latest, want)
	}
	embedded, err := fs.Glob(migrations.FS, "*")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasSuffix(e.Name(), ".go") {
			onDisk = append(onDisk, e.Name())
		}
	}
	if !slices.Equal(embedded, onDisk) {
		t.Errorf("embedded %q, want the directory's files %q", embedded, onDisk)
	}
	if !slices.Contains(embedded, "atlas.sum") {
		t.Errorf("atlas.sum is not embedded: %q", embedded)
	}
}
