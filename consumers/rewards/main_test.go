package rewards

import (
	"testing"

	"github.com/pin-platform/consumers/migrate/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
