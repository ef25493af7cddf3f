package migrate_test

import (
	"testing"

	"github.com/pin-platform/pin/migrate"
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
