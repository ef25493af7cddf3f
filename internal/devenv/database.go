package devenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/roster"
	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/localpg"
)

// SetUpDatabase makes database name on the local server whose superuser's
// URL is adminURL what production has (README, "Database roles"): owned
// by the schema owner (migrate.OwnerRole, created when missing; what an
// earlier environment created as the superuser is handed over to it),
// migrated by that owner with the migrations compiled into pinctl, and a
// login for each service (migrate.ServiceLogin; see ServiceURL). It
// returns the database's URL as the superuser and the migration files it
// applied.
func SetUpDatabase(ctx context.Context, adminURL, name string) (dbURL string, applied []string, err error) {
	if err := setUpRoles(ctx, adminURL, name); err != nil {
		return "", nil, fmt.Errorf("set up database %s: %w", name, err)
	}
	dbURL = withDB(adminURL, name)
	dir, err := migrate.Embedded()
	if err != nil {
		return "", nil, err
	}
	if applied, err = migrate.Apply(ctx, withUser(dbURL, migrate.OwnerRole), dir); err != nil {
		return "", nil, err
	}
	if err := ensureLogins(ctx, dbURL); err != nil {
		return "", nil, fmt.Errorf("create the services' logins: %w", err)
	}
	return dbURL, applied, nil
}

// ServiceURL is dbURL as service's login (migrate.ServiceLogin): the
// DATABASE_URL of its consumer on a database SetUpDatabase made.
func ServiceURL(dbURL, service string) string {
	return withUser(dbURL, migrate.ServiceLogin(service))
}

// StopDB stops the local PostgreSQL that Run keeps under dataDir, if it
// runs.
func StopDB(dataDir string) error {
	dir := filepath.Join(dataDir, "postgres")
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err != nil {
		return nil
	}
	srv, err := localpg.Start(context.Background(), dir, localpg.Options{Durable: true})
	if err != nil {
		return err
	}
	return srv.Stop()
}

// setUpRoles makes the local server's database name owned by the schema
// owner role (created when missing), migrating what an earlier version of
// the environment created as the superuser.
func setUpRoles(ctx context.Context, adminURL, name string) error {
	db, err := sql.Open("postgres", adminURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrate.EnsureOwner(ctx, db, ""); err != nil {
		return err
	}
	owner := pq.QuoteIdentifier(migrate.OwnerRole)
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		_, err := db.ExecContext(ctx, `CREATE DATABASE `+pq.QuoteIdentifier(name)+` OWNER `+owner)
		return err
	}
	if _, err := db.ExecContext(ctx, `ALTER DATABASE `+pq.QuoteIdentifier(name)+` OWNER TO `+owner); err != nil {
		return err
	}
	// Tables, sequences and the revision schema an earlier environment
	// created as the superuser.
	pdb, err := sql.Open("postgres", withDB(adminURL, name))
	if err != nil {
		return err
	}
	defer pdb.Close()
	_, err = pdb.ExecContext(ctx, `DO $$
DECLARE o record;
BEGIN
  FOR o IN SELECT c.oid::regclass AS rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname IN ('public', 'atlas_schema_revisions') AND c.relkind IN ('r', 'S', 'p')
      AND pg_get_userbyid(c.relowner) <> '`+migrate.OwnerRole+`' LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO `+migrate.OwnerRole+`', o.rel);
  END LOOP;
  IF EXISTS (SELECT FROM pg_namespace WHERE nspname = 'atlas_schema_revisions') THEN
    ALTER SCHEMA atlas_schema_revisions OWNER TO `+migrate.OwnerRole+`;
  END IF;
END $$`)
	return err
}

// ensureLogins creates each service's login (migrate.ServiceLogin) on the
// server of adminURL, a superuser's.
func ensureLogins(ctx context.Context, adminURL string) error {
	admin, err := sql.Open("postgres", adminURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	for _, s := range roster.All {
		svc := s.Name()
		if err := migrate.EnsureLogin(ctx, admin, migrate.ServiceLogin(svc), "", migrate.ServiceRole(svc)); err != nil {
			return err
		}
	}
	return nil
}

// withUser is url u with user user (the local server trusts local
// connections: no password).
func withUser(u, user string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.User = url.User(user)
	return p.String()
}

// withDB is url u for database name.
func withDB(u, name string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + name
	return p.String()
}
