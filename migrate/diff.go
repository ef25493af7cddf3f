package migrate

import (
	"context"
	"fmt"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	atlasschema "ariga.io/atlas/sql/schema"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql/schema"

	entmigrate "github.com/pin-platform/pin/ent/migrate"
	pinschema "github.com/pin-platform/pin/schema"
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
	pk := &pkNames{want: pinschema.PrimaryKeyNames()}
	err = entmigrate.NamedDiff(ctx, devURL, name,
		schema.WithDir(d),
		schema.WithMigrationMode(schema.ModeReplay),
		schema.WithDialect(dialect.Postgres),
		schema.WithFormatter(atlasmigrate.DefaultFormatter),
		schema.WithDropColumn(true),
		schema.WithDropIndex(true),
		schema.WithDiffHook(pk.hook),
	)
	if err != nil {
		return false, fmt.Errorf("diff: %w", err)
	}
	after, err := d.Files()
	if err != nil {
		return false, err
	}
	if len(pk.renames) > 0 {
		if err := pk.write(d, before, after, name); err != nil {
			return false, err
		}
		if after, err = d.Files(); err != nil {
			return false, err
		}
	}
	return len(after) > len(before), nil
}

// pkNames renames primary-key constraints to the names the schemas declare
// (schema.PrimaryKey). ent sets no name, and the open-source Atlas does
// not plan a constraint's rename, so the diff hook notes each rename and
// Diff writes its statement into the new migration file (or a file of its
// own when nothing else changed).
type pkNames struct {
	want    map[string]string // table → constraint name
	renames []string          // ALTER TABLE … RENAME CONSTRAINT …
}

func (p *pkNames) hook(next schema.Differ) schema.Differ {
	return schema.DiffFunc(func(current, desired *atlasschema.Schema) ([]atlasschema.Change, error) {
		for _, t := range desired.Tables {
			n, ok := p.want[t.Name]
			if !ok || t.PrimaryKey == nil {
				continue
			}
			if cur, ok := current.Table(t.Name); ok && cur.PrimaryKey != nil && cur.PrimaryKey.Name != "" && cur.PrimaryKey.Name != n {
				p.renames = append(p.renames, fmt.Sprintf("-- Rename the primary key of %q\nALTER TABLE %q RENAME CONSTRAINT %q TO %q;\n",
					t.Name, t.Name, cur.PrimaryKey.Name, n))
			}
			t.PrimaryKey.Name = n // a new table's PRIMARY KEY gets its name (CONSTRAINT … PRIMARY KEY)
		}
		return next.Diff(current, desired)
	})
}

// write adds the renames to the file this diff wrote, or to a new file,
// and re-hashes the directory.
func (p *pkNames) write(d *atlasmigrate.LocalDir, before, after []atlasmigrate.File, name string) error {
	var body []byte
	file := ""
	if len(after) > len(before) {
		f := after[len(after)-1]
		file, body = f.Name(), append(f.Bytes(), '\n')
	} else {
		file = time.Now().UTC().Format("20060102150405") + "_" + name + ".sql"
	}
	for _, r := range p.renames {
		body = append(body, r...)
	}
	if err := d.WriteFile(file, body); err != nil {
		return err
	}
	sum, err := d.Checksum()
	if err != nil {
		return err
	}
	return atlasmigrate.WriteSumFile(d, sum)
}
