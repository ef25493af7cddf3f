package rewards

import (
	"testing"

	"github.com/pin-platform/pin/consumers/servicetest"
)

// TestMain shares one PostgreSQL server among the package's tests (the one
// DATABASE_URL names, or a private one), each test on its own clone of the
// migrated template.
func TestMain(m *testing.M) { servicetest.Main(m) }
