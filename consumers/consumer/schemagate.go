package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/pin-platform/pin/migrate/migrations"
)

// The schema gate. A consumer binary is built with the migrations of its
// commit (package migrations embeds them), and its SQL expects the schema the
// newest of them makes. Rolled out before `pinctl migrate apply`, it would
// fail on every message; so it does not join its group until the database's
// revision table (the Atlas CLI's, atlas_schema_revisions, in the schema
// `pinctl migrate apply` keeps it in for the same URL) records that
// migration as applied: /readyz answers 503 meanwhile, one error line names
// the missing version, pin_consumer_schema_behind is 1, and the revision is
// read again every CONSUMER_SCHEMA_RECHECK. A database ahead of the binary
// (later migrations applied too: expand, then contract) passes.

// errSchemaBehind is the gate's verdict on a database behind the binary.
var errSchemaBehind = errors.New("the database is behind this binary")

// awaitSchema waits until the database has the binary's newest migration,
// and reports false when ctx ended first. Without Options.SchemaVersion
// there is no gate.
func (r *Runtime) awaitSchema(ctx context.Context) bool {
	if r.schemaVersion == "" {
		return true
	}
	said := ""
	for {
		err := r.schemaApplied(ctx, r.schemaVersion)
		if err == nil {
			r.m.schemaBehind.Set(0)
			r.gate.Store(nil)
			if said != "" {
				r.log.Info().Str("migration", r.schemaVersion).Msg("schema gate: the migration is applied; joining the group")
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		reason := "schema gate: " + err.Error()
		r.gate.Store(&reason)
		if errors.Is(err, errSchemaBehind) {
			r.m.schemaBehind.Set(1)
		}
		if reason != said { // one line per state, not one per re-check
			r.log.Error().Str("migration", r.schemaVersion).Dur("recheck", r.cfg.SchemaRecheck).Msg(reason)
			said = reason
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(r.cfg.SchemaRecheck):
		}
	}
}

// schemaApplied reports nil when the revision table records version as
// fully applied, an errSchemaBehind error when it does not, and another
// error when it cannot be read.
func (r *Runtime) schemaApplied(ctx context.Context, version string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var applied, total int64
	var failed string
	// Where `pinctl migrate apply` keeps it for this URL (its search_path).
	table := migrations.RevisionTableOf(r.cfg.DatabaseURL)
	err := r.db.QueryRowContext(ctx, `SELECT applied, total, COALESCE(error, '')
FROM `+table+` WHERE version = $1`, version).Scan(&applied, &total, &failed)
	var pqErr *pq.Error
	switch {
	case err == nil && failed == "" && applied >= total:
		return nil
	case err == nil:
		return fmt.Errorf("%w: migration %s is partly applied (%d of %d statements; %s): finish it with `pinctl migrate apply`",
			errSchemaBehind, version, applied, total, abbreviate(failed, 200))
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: migration %s, which it was built with, is not applied: run `pinctl migrate apply`", errSchemaBehind, version)
	case errors.As(err, &pqErr) && (pqErr.Code == "42P01" || pqErr.Code == "3F000"):
		return fmt.Errorf("%w: the database has no migration history (%s); migration %s is not applied: run `pinctl migrate apply`", errSchemaBehind, table, version)
	default:
		return fmt.Errorf("cannot read the migration history (%s): %w", table, err)
	}
}
