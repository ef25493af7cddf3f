package rewards

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) {
	zerolog.TimeFieldFormat = time.RFC3339Nano // as consumer.Main sets it
	pgtest.Main(m)
}
