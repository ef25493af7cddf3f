package roster

import (
	"os/exec"
	"strings"
	"testing"
)

// The consumers' binaries link no migration toolchain: neither Atlas (its
// schema engine, HCL, MySQL and SQLite support) nor the packages that pull
// it in. The ent client is generated without ent's migration support
// (schema/internal/entc), and the schema gate reads the newest migration
// from package migrations, which imports no Atlas. Linked in, they were
// 6.5 MB of a consumer binary (48.2 against 41.6 MB) and 4 MB of its
// mapped segments, part of every consumer's resident memory.
func TestConsumerBinariesLinkNoMigrationToolchain(t *testing.T) {
	go_, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go: %v", err)
	}
	// Packages, and (ending in "/") trees of packages.
	forbidden := []string{
		"ariga.io/atlas/",
		"entgo.io/ent/entc/",
		"entgo.io/ent/dialect/sql/schema",
		"github.com/pin-platform/pin/ent/migrate",
		"github.com/pin-platform/pin/migrate",
	}
	for _, s := range All {
		pkg := "github.com/pin-platform/pin/cmd/" + s.Binary()
		out, err := exec.Command(go_, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 50 {
			t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), deps)
		}
		for _, d := range deps {
			for _, f := range forbidden {
				if d == f || strings.HasSuffix(f, "/") && strings.HasPrefix(d, f) {
					t.Errorf("%s links %s", s.Binary(), d)
				}
			}
		}
	}
}
