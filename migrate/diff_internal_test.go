package migrate

import (
	"strings"
	"testing"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	atlasschema "ariga.io/atlas/sql/schema"
)

// The open-source Atlas writes a new table's PRIMARY KEY without its
// name, so PostgreSQL calls it <table>_pkey: the diff renames it in the
// same file to the name the schema declares, and an existing table's key
// under another name too. A key already named as declared is left alone.
func TestDiffNamesThePrimaryKeysOfNewAndExistingTables(t *testing.T) {
	table := func(name, pk string) *atlasschema.Table {
		tb := atlasschema.NewTable(name).AddColumns(atlasschema.NewColumn("id"))
		tb.SetPrimaryKey(atlasschema.NewPrimaryKey(tb.Columns...))
		tb.PrimaryKey.Name = pk
		return tb
	}
	current := atlasschema.New("public").AddTables(table("old", "old_pkey"), table("kept", "pk_kept"))
	desired := atlasschema.New("public").AddTables(table("old", ""), table("kept", ""), table("fresh", ""))
	p := &pkNames{want: map[string]string{"old": "pk_old", "kept": "pk_kept", "fresh": "pk_fresh"}}
	if _, err := p.hook(nopDiffer{}).Diff(current, desired); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(p.renames, "")
	for _, want := range []string{
		`ALTER TABLE "old" RENAME CONSTRAINT "old_pkey" TO "pk_old";`,
		`ALTER TABLE "fresh" RENAME CONSTRAINT "fresh_pkey" TO "pk_fresh";`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("renames lack %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"kept"`) || len(p.renames) != 2 {
		t.Errorf("renames: %q, want the two above only", p.renames)
	}
	if n := defaultPKName(strings.Repeat("t", 70)); len(n) != 63 || !strings.HasSuffix(n, "_pkey") {
		t.Errorf("defaultPKName of a long table: %q (%d bytes), want 63 bytes ending in _pkey", n, len(n))
	}
}

type nopDiffer struct{}

func (nopDiffer) Diff(_, _ *atlasschema.Schema) ([]atlasschema.Change, error) { return nil, nil }

// A file the diff names by the clock but that sorts before the newest one
// (a file dated ahead, a clock behind) is renamed to follow it, and the
// directory re-hashed; one that sorts after is left as it is.
func TestDiffKeepsANewFileAfterTheNewest(t *testing.T) {
	d, err := atlasmigrate.NewLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"20261202160000_a.sql": "SELECT 1;\n", "20261202080000_b.sql": "SELECT 2;\n"} {
		if err := d.WriteFile(name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := d.Files()
	newest, written := files[1], files[0] // by version: b (08:00) sorts first
	if err := inOrder(d, newest, written); err != nil {
		t.Fatal(err)
	}
	files, _ = d.Files()
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	if strings.Join(names, " ") != "20261202160000_a.sql 20261202160001_b.sql" {
		t.Fatalf("files: %v, want b renamed to follow a", names)
	}
	if err := atlasmigrate.Validate(d); err != nil {
		t.Fatalf("the sum file does not match the directory: %v", err)
	}
	if err := inOrder(d, files[0], files[1]); err != nil {
		t.Fatal(err)
	}
	if again, _ := d.Files(); again[1].Name() != "20261202160001_b.sql" {
		t.Fatalf("a file in order was renamed: %s", again[1].Name())
	}
}
