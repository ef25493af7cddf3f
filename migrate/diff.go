package migrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	if len(after) > len(before) && len(before) > 0 {
		if err := inOrder(d, before[len(before)-1], after[len(after)-1]); err != nil {
			return false, err
		}
	}
	return len(after) > len(before), nil
}

// inOrder renames the file the diff wrote (named by the clock) to follow
// the newest one before it when the clock sorts it earlier (a file dated
// ahead, a clock behind): migrate apply refuses a file older than the
// newest applied one.
func inOrder(d *atlasmigrate.LocalDir, newest, written atlasmigrate.File) error {
	if written.Version() > newest.Version() {
		return nil
	}
	at, err := time.Parse("20060102150405", newest.Version())
	if err != nil {
		return nil // not a timestamp: left as it is
	}
	name := at.Add(time.Second).Format("20060102150405") + strings.TrimPrefix(written.Name(), written.Version())
	if err := d.WriteFile(name, written.Bytes()); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(d.Path(), written.Name())); err != nil {
		return err
	}
	sum, err := d.Checksum()
	if err != nil {
		return err
	}
	return atlasmigrate.WriteSumFile(d, sum)
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
			from := ""
			if cur, ok := current.Table(t.Name); !ok {
				// A new table: the open-source Atlas writes its PRIMARY KEY
				// without the name, so PostgreSQL names it <table>_pkey.
				from = defaultPKName(t.Name)
			} else if cur.PrimaryKey != nil {
				from = cur.PrimaryKey.Name
			}
			if from != "" && from != n {
				p.renames = append(p.renames, fmt.Sprintf("-- Rename the primary key of %q\nALTER TABLE %q RENAME CONSTRAINT %q TO %q;\n",
					t.Name, t.Name, from, n))
			}
			t.PrimaryKey.Name = n
		}
		return next.Diff(current, desired)
	})
}

// defaultPKName is the name PostgreSQL gives the primary key of table when
// its CREATE TABLE names none (<table>_pkey, within NAMEDATALEN - 1 bytes).
func defaultPKName(table string) string {
	const max = 63 - len("_pkey")
	if len(table) > max {
		table = table[:max]
	}
	return table + "_pkey"
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
