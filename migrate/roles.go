package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/lib/pq"
)

// Database roles. The migrations run as the owner of the consumers' schema
// objects; each service runs as a login user that is a member of the
// service's NOLOGIN group role, which the migrations create and grant
// (20261201120000_service_roles.sql): its own tables, its own rows of
// processed_messages and parked_messages, no DDL.

// OwnerRole is the role that owns the schema and runs the migrations in the
// embedded environment and the tests. It needs CREATEROLE: the migrations
// create the service roles and set their session defaults.
const OwnerRole = "pin_owner"

// ServiceRole is the group role of a service ("messenger" → "pin_messenger").
func ServiceRole(service string) string { return "pin_" + service }

// ServiceLogin is the login user the embedded environment and the tests run
// a service as ("messenger" → "messenger_consumer"): a member of its
// ServiceRole, with the role's session settings.
func ServiceLogin(service string) string { return service + "_consumer" }

// rolesLock serialises role creation among processes sharing a server
// (roles are cluster-wide).
const rolesLock int64 = 0x70696e5f726f6c // "pin_rol"

// EnsureOwner creates the owner role, with LOGIN, CREATEROLE and password
// (none when empty), unless it exists. admin must be a superuser.
func EnsureOwner(ctx context.Context, admin *sql.DB, password string) error {
	return inRoleTx(ctx, admin, func(tx *sql.Tx) error {
		if err := createRole(ctx, tx, OwnerRole, "LOGIN CREATEROLE", password); err != nil {
			return err
		}
		return nil
	})
}

// EnsureLogin creates login (with password, none when empty) unless it
// exists, makes it a member of group, and gives it group's session
// settings: PostgreSQL applies a role's settings (statement_timeout, …) to
// sessions that log in as that role, not as one of its members. admin
// must be able to create roles (a superuser, or CREATEROLE).
func EnsureLogin(ctx context.Context, admin *sql.DB, login, password, group string) error {
	return inRoleTx(ctx, admin, func(tx *sql.Tx) error {
		if err := createRole(ctx, tx, login, "LOGIN", password); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "GRANT "+pq.QuoteIdentifier(group)+" TO "+pq.QuoteIdentifier(login)); err != nil {
			return fmt.Errorf("grant %s to %s: %w", group, login, err)
		}
		rows, err := tx.QueryContext(ctx, `SELECT unnest(setconfig) FROM pg_db_role_setting
WHERE setrole = (SELECT oid FROM pg_roles WHERE rolname = $1) AND setdatabase = 0`, group)
		if err != nil {
			return fmt.Errorf("read the settings of %s: %w", group, err)
		}
		var settings []string
		for rows.Next() {
			var kv string
			if err := rows.Scan(&kv); err != nil {
				rows.Close()
				return err
			}
			settings = append(settings, kv)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, kv := range settings {
			k, v, _ := strings.Cut(kv, "=")
			stmt := fmt.Sprintf("ALTER ROLE %s SET %s = %s", pq.QuoteIdentifier(login), pq.QuoteIdentifier(k), pq.QuoteLiteral(v))
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("set %s of %s: %w", k, login, err)
			}
		}
		return nil
	})
}

func inRoleTx(ctx context.Context, admin *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, rolesLock); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func createRole(ctx context.Context, tx *sql.Tx, name, attrs, password string) error {
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	verb := "CREATE"
	if exists {
		verb = "ALTER"
	}
	stmt := verb + " ROLE " + pq.QuoteIdentifier(name) + " " + attrs
	if password != "" {
		stmt += " PASSWORD " + pq.QuoteLiteral(password)
	}
	if _, err := tx.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s role %s: %w", strings.ToLower(verb), name, err) // the statement holds the password: never in the error
	}
	return nil
}
