package migrate

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"

	"github.com/pin-platform/pin/migrate/migrations"
)

// The revision table is the Atlas CLI's: same schema, table, columns and
// encoding (its ent schema cmd/atlas/internal/migrate/ent/schema/revision.go
// rendered by ent for PostgreSQL), so that `atlas migrate status|apply` and
// `pinctl migrate` read and write each other's history. Where it is
// (RevisionSchema, RevisionTable, RevisionTableOf) is package migrations':
// the consumers' schema gate reads it too.
const (
	// RevisionSchema is the schema of the revision table for a database-wide
	// URL (one without search_path).
	RevisionSchema = migrations.RevisionSchema
	// RevisionTable is the revision table's name.
	RevisionTable = migrations.RevisionTable

	// cloudIdentifier is the version of the CLI's bookkeeping row that
	// identifies the target; it is not a revision.
	cloudIdentifier = ".atlas_cloud_identifier"
)

// RevisionTableOf is the revision table `pinctl migrate apply` keeps for
// databaseURL (migrations.RevisionTableOf).
func RevisionTableOf(databaseURL string) string { return migrations.RevisionTableOf(databaseURL) }

// revisionDDL creates the revision table exactly as the CLI's ent migration
// does (TypeString → character varying, TypeUint/Int/Int64 → bigint, Text →
// text, Strings → jsonb, Time → timestamptz).
const revisionDDL = `CREATE TABLE IF NOT EXISTS %[1]s (
	"version" character varying NOT NULL,
	"description" character varying NOT NULL,
	"type" bigint NOT NULL DEFAULT 2,
	"applied" bigint NOT NULL DEFAULT 0,
	"total" bigint NOT NULL DEFAULT 0,
	"executed_at" timestamptz NOT NULL,
	"execution_time" bigint NOT NULL,
	"error" text NULL,
	"error_stmt" text NULL,
	"hash" character varying NOT NULL,
	"partial_hashes" jsonb NULL,
	"operator_version" character varying NOT NULL,
	PRIMARY KEY ("version")
)`

const revisionColumns = `"version", "description", "type", "applied", "total", "executed_at", "execution_time", "error", "error_stmt", "hash", "partial_hashes", "operator_version"`

// revisions implements atlasmigrate.RevisionReadWriter over an ExecQuerier:
// the client's pool, or the transaction a file runs in, so that a file's
// statements and its revision commit or roll back together.
type revisions struct {
	eq     schema.ExecQuerier
	schema string
}

var _ atlasmigrate.RevisionReadWriter = (*revisions)(nil)

func (r *revisions) table() string { return migrations.RevisionTableIn(r.schema) }

// Ident implements atlasmigrate.RevisionReadWriter.
func (r *revisions) Ident() *atlasmigrate.TableIdent {
	return &atlasmigrate.TableIdent{Name: RevisionTable, Schema: r.schema}
}

// create makes the revision schema and table when they do not exist.
func (r *revisions) create(ctx context.Context) error {
	if _, err := r.eq.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+migrations.QuoteIdent(r.schema)); err != nil {
		return fmt.Errorf("create revision schema %s: %w", r.schema, err)
	}
	if _, err := r.eq.ExecContext(ctx, fmt.Sprintf(revisionDDL, r.table())); err != nil {
		return fmt.Errorf("create revision table %s: %w", r.table(), err)
	}
	return nil
}

// exists reports whether the revision table exists.
func (r *revisions) exists(ctx context.Context) (bool, error) {
	rows, err := r.eq.QueryContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2)`,
		r.schema, RevisionTable)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var ok bool
	if rows.Next() {
		if err := rows.Scan(&ok); err != nil {
			return false, err
		}
	}
	return ok, rows.Err()
}

// ReadRevisions implements atlasmigrate.RevisionReadWriter: every revision,
// by version. A missing table holds no revisions.
func (r *revisions) ReadRevisions(ctx context.Context) ([]*atlasmigrate.Revision, error) {
	if ok, err := r.exists(ctx); err != nil || !ok {
		return nil, err
	}
	return r.query(ctx, `SELECT `+revisionColumns+` FROM `+r.table()+` WHERE "version" <> $1 ORDER BY "version"`, cloudIdentifier)
}

// ReadRevision implements atlasmigrate.RevisionReadWriter.
func (r *revisions) ReadRevision(ctx context.Context, version string) (*atlasmigrate.Revision, error) {
	if version == cloudIdentifier {
		return nil, errors.New("the revision-table identifier is not a revision")
	}
	if ok, err := r.exists(ctx); err != nil {
		return nil, err
	} else if !ok {
		return nil, atlasmigrate.ErrRevisionNotExist
	}
	revs, err := r.query(ctx, `SELECT `+revisionColumns+` FROM `+r.table()+` WHERE "version" = $1`, version)
	if err != nil {
		return nil, err
	}
	if len(revs) == 0 {
		return nil, atlasmigrate.ErrRevisionNotExist
	}
	return revs[0], nil
}

// WriteRevision implements atlasmigrate.RevisionReadWriter: an upsert by
// version, as the CLI's.
func (r *revisions) WriteRevision(ctx context.Context, rev *atlasmigrate.Revision) error {
	if rev.Version == cloudIdentifier {
		return errors.New("writing the revision-table identifier is not allowed")
	}
	// ent stores a nil []string as the JSON value null, not SQL NULL.
	partial, err := json.Marshal(rev.PartialHashes)
	if err != nil {
		return err
	}
	_, err = r.eq.ExecContext(ctx, `INSERT INTO `+r.table()+` (`+revisionColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT ("version") DO UPDATE SET
	"type" = EXCLUDED."type", "applied" = EXCLUDED."applied", "total" = EXCLUDED."total",
	"execution_time" = EXCLUDED."execution_time", "error" = EXCLUDED."error",
	"error_stmt" = EXCLUDED."error_stmt", "hash" = EXCLUDED."hash",
	"partial_hashes" = EXCLUDED."partial_hashes", "operator_version" = EXCLUDED."operator_version"`,
		rev.Version, rev.Description, int64(rev.Type), rev.Applied, rev.Total,
		rev.ExecutedAt, int64(rev.ExecutionTime), rev.Error, rev.ErrorStmt,
		rev.Hash, string(partial), rev.OperatorVersion)
	if err != nil {
		return fmt.Errorf("write revision %s: %w", rev.Version, err)
	}
	return nil
}

// DeleteRevision implements atlasmigrate.RevisionReadWriter.
func (r *revisions) DeleteRevision(ctx context.Context, version string) error {
	if version == cloudIdentifier {
		return errors.New("deleting the revision-table identifier is not allowed")
	}
	_, err := r.eq.ExecContext(ctx, `DELETE FROM `+r.table()+` WHERE "version" = $1`, version)
	return err
}

func (r *revisions) query(ctx context.Context, query string, args ...any) ([]*atlasmigrate.Revision, error) {
	rows, err := r.eq.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read revisions: %w", err)
	}
	defer rows.Close()
	var revs []*atlasmigrate.Revision
	for rows.Next() {
		var (
			rev               atlasmigrate.Revision
			typ, execTime     int64
			errText, errStmt  sql.NullString
			partial           []byte
			executedAt        time.Time
			applied, totalCnt int64
		)
		if err := rows.Scan(&rev.Version, &rev.Description, &typ, &applied, &totalCnt,
			&executedAt, &execTime, &errText, &errStmt, &rev.Hash, &partial, &rev.OperatorVersion); err != nil {
			return nil, fmt.Errorf("read revisions: %w", err)
		}
		rev.Type = atlasmigrate.RevisionType(typ)
		rev.Applied, rev.Total = int(applied), int(totalCnt)
		rev.ExecutedAt = executedAt
		rev.ExecutionTime = time.Duration(execTime)
		rev.Error, rev.ErrorStmt = errText.String, errStmt.String
		if len(partial) > 0 {
			if err := json.Unmarshal(partial, &rev.PartialHashes); err != nil {
				return nil, fmt.Errorf("read revision %s: partial_hashes: %w", rev.Version, err)
			}
		}
		revs = append(revs, &rev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read revisions: %w", err)
	}
	return revs, nil
}
