package migrate

import (
	"context"
	"fmt"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql/schema"

	entmigrate "github.com/pin-platform/consumers/ent/migrate"
)

// Diff writes a new migration file NAME into dir, holding the statements that
// bring a database at the directory's latest revision to the ent schema. The
// directory is replayed on devURL, a database that must be empty (it is
// cleaned by the replay). It reports whether a file was written: an
// up-to-date directory gets none.
func Diff(ctx context.Context, devURL, dir, name string) (bool, error) {
	d, err := atlasmigrate.NewLocalDir(dir)
	if err != nil {
		return false, fmt.Errorf("open migration directory: %w", err)
	}
	before, err := d.Files()
	if err != nil {
		return false, err
	}
	err = entmigrate.NamedDiff(ctx, devURL, name,
		schema.WithDir(d),
		schema.WithMigrationMode(schema.ModeReplay),
		schema.WithDialect(dialect.Postgres),
		schema.WithFormatter(atlasmigrate.DefaultFormatter),
		schema.WithDropColumn(true),
		schema.WithDropIndex(true),
	)
	if err != nil {
		return false, fmt.Errorf("diff: %w", err)
	}
	after, err := d.Files()
	if err != nil {
		return false, err
	}
	return len(after) > len(before), nil
}
