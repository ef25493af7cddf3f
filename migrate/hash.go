package migrate

import (
	"fmt"

	atlasmigrate "ariga.io/atlas/sql/migrate"
)

// Hash rewrites the atlas.sum of the migration directory at path to match
// its files, as `atlas migrate hash` does. It is for a reviewed edit of a
// file that no database has applied yet (a directive added by hand, say):
// Apply refuses a file changed after it was applied whatever atlas.sum says.
func Hash(path string) error {
	if path == "" {
		return fmt.Errorf("hash: no migration directory given")
	}
	dir, err := OpenDir(path)
	if err != nil {
		return err
	}
	sum, err := dir.Checksum()
	if err != nil {
		return fmt.Errorf("hash %s: %w", path, err)
	}
	if err := atlasmigrate.WriteSumFile(dir, sum); err != nil {
		return fmt.Errorf("write %s/%s: %w", path, atlasmigrate.HashFileName, err)
	}
	return nil
}
