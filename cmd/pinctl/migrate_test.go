package main

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pin-platform/pin/migrate/pgtest"
)

// TestMigrateStatusDrift runs `pinctl migrate status` as an operator does
// and checks what it prints about drift, and its exit codes.
func TestMigrateStatusDrift(t *testing.T) {
	t.Parallel()
	drifted := pgtest.NewDB(t)
	db, err := sql.Open("postgres", drifted)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ALTER TABLE leads ADD COLUMN note character varying(200) NULL`); err != nil {
		t.Fatal(err)
	}
	clean := pgtest.NewDB(t)
	dev := pgtest.NewEmptyDB(t)

	runMigrate(t, nil, []migrateCase{
		{
			name: "a column added by hand is printed as drift, exit 0",
			args: []string{"status", "--url", drifted, "--dev-url", dev},
			stdout: []string{"pending: none (up to date)", "drift: the live schema differs from the migrations",
				`-- modify "leads" table`, `ALTER TABLE "leads" ADD COLUMN "note" character varying(200) NULL;`},
		},
		{
			name:   "with --exit-code drift exits 1",
			args:   []string{"status", "--url", drifted, "--dev-url", dev, "--exit-code"},
			code:   1,
			stdout: []string{`ADD COLUMN "note"`},
			stderr: "has drifted from the migrations (--exit-code)",
		},
		{
			name:    "a clean database has no drift, exit 0 with --exit-code",
			args:    []string{"status", "--url", clean, "--dev-url", dev, "--exit-code"},
			stdout:  []string{"no drift: the live schema (public) is what the applied migrations produce"},
			without: "differs",
		},
		{
			name:   "the dev database defaults to a throwaway local PostgreSQL",
			args:   []string{"status", "--url", drifted},
			stdout: []string{`ALTER TABLE "leads" ADD COLUMN "note" character varying(200) NULL;`},
		},
		{
			name:    "--drift=false skips the check",
			args:    []string{"status", "--url", drifted, "--drift=false"},
			stdout:  []string{"pending: none (up to date)"},
			without: "drift",
		},
		{
			name:   "an unreachable database exits 1 with one line",
			args:   []string{"status", "--url", "postgres://postgres@127.0.0.1:1/none?sslmode=disable"},
			code:   1,
			stderr: "cannot reach database",
		},
	})
}

// migrateCase is one run of `pinctl migrate` and what it must do.
type migrateCase struct {
	name    string
	args    []string // after `pinctl migrate`
	code    int
	stdout  []string // printed, each
	stderr  string   // the one line on stderr says this (when code != 0)
	without string   // not printed
}

// runMigrate runs each case's `pinctl migrate` as an operator does, with
// env added to the test's environment, and checks its exit code and
// output.
func runMigrate(t *testing.T, env []string, tests []migrateCase) {
	t.Helper()
	pinctl := filepath.Join(builtBinaries(t), "pinctl")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), pinctl, append([]string{"migrate"}, tt.args...)...)
			cmd.Env = append(os.Environ(), env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d", code, tt.code)
			}
			for _, want := range tt.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			if tt.without != "" && strings.Contains(stdout.String(), tt.without) {
				t.Errorf("stdout has %q", tt.without)
			}
			if tt.code != 0 && (strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), tt.stderr)) {
				t.Errorf("stderr %q: want one line saying %q", stderr.String(), tt.stderr)
			}
		})
	}
}

// TestMigrateWithoutADevDatabase runs status and plan where no throwaway
// PostgreSQL can start (PG_BIN names no server binaries): the database was
// read, so they exit 0 and say what they could not check, unless the
// command line asked for the check (docs/contract.md §1).
func TestMigrateWithoutADevDatabase(t *testing.T) {
	t.Parallel()
	migrated := pgtest.NewDB(t)
	empty := pgtest.NewEmptyDB(t)
	unreachable := "postgres://postgres@127.0.0.1:1/none?sslmode=disable"
	const hint = "pass --dev-url URL or install PostgreSQL's server binaries"
	runMigrate(t, []string{"PG_BIN=" + filepath.Join(t.TempDir(), "none")}, []migrateCase{
		{
			name:    "status prints the state and that drift was not checked, exit 0",
			args:    []string{"status", "--url", migrated},
			stdout:  []string{"current version: ", "pending: none (up to date)", "drift: not checked: no dev database: ", hint},
			without: "no drift",
		},
		{
			name:   "status --exit-code cannot tell there is no drift: exit 1",
			args:   []string{"status", "--url", migrated, "--exit-code"},
			code:   1,
			stdout: []string{"pending: none (up to date)", "drift: not checked: no dev database: "},
			stderr: "drift not checked, so --exit-code cannot tell there is none",
		},
		{
			name:   "status --drift asks for the check: exit 1",
			args:   []string{"status", "--url", migrated, "--drift"},
			code:   1,
			stdout: []string{"drift: not checked: no dev database: "},
			stderr: "migrate status: drift check: no dev database: ",
		},
		{
			name:   "status with a --dev-url that cannot be reached: exit 1",
			args:   []string{"status", "--url", migrated, "--dev-url", unreachable},
			code:   1,
			stdout: []string{"pending: none (up to date)"},
			stderr: "migrate status: drift check: dev database: cannot reach database",
		},
		{
			name:    "status --drift=false needs no dev database",
			args:    []string{"status", "--url", migrated, "--drift=false"},
			stdout:  []string{"pending: none (up to date)"},
			without: "drift",
		},
		{
			name:    "plan prints the pending SQL unlinted, saying so, exit 0",
			args:    []string{"plan", "--url", empty},
			stdout:  []string{"current version: none (empty database)", "lint: not run: no dev database: ", hint, `CREATE TABLE "chats"`, "-- lint: not run"},
			without: "no findings",
		},
		{
			name:   "plan with a --dev-url that cannot be reached: exit 1",
			args:   []string{"plan", "--url", empty, "--dev-url", unreachable},
			code:   1,
			stderr: "migrate plan: dev database: cannot reach database",
		},
		{
			name:   "status of an unreachable database exits 1 with one line",
			args:   []string{"status", "--url", unreachable},
			code:   1,
			stderr: "cannot reach database",
		},
		{
			name:   "plan of an unreachable database exits 1 with one line",
			args:   []string{"plan", "--url", unreachable},
			code:   1,
			stderr: "cannot reach database",
		},
	})
}

// A pending file that fails on the dev database is a finding of the
// check, not a check that could not run: plan exits 1 saying so, with a
// throwaway PostgreSQL or --dev-url's. Only where no dev database can be
// had does plan print the SQL unlinted and exit 0.
func TestMigratePlanOfAFileThatFailsExitsOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join("..", "..", "migrate", "migrations")
	files, err := filepath.Glob(filepath.Join(src, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migration files in %s: %v", src, err)
	}
	for _, f := range append(files, filepath.Join(src, "atlas.sum")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	broken := `ALTER TABLE "no_such_table" ADD COLUMN "x" integer NULL;` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "20991231000000_broken.sql"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	migrated := pgtest.NewDB(t)
	dev := pgtest.NewEmptyDB(t)
	runMigrate(t, nil, []migrateCase{
		{
			name:   "the directory rehashed",
			args:   []string{"hash", "--dir", dir},
			stdout: []string{"atlas.sum"},
		},
		{
			name:   "on a throwaway PostgreSQL: exit 1, naming the file",
			args:   []string{"plan", "--url", migrated, "--dir", dir},
			code:   1,
			stderr: "20991231000000_broken.sql",
		},
		{
			name:   "on --dev-url's database: exit 1",
			args:   []string{"plan", "--url", migrated, "--dir", dir, "--dev-url", dev},
			code:   1,
			stderr: "20991231000000_broken.sql",
		},
	})
	runMigrate(t, []string{"PG_BIN=" + filepath.Join(t.TempDir(), "none")}, []migrateCase{
		{
			name:   "with no dev database to be had: the SQL unlinted, exit 0",
			args:   []string{"plan", "--url", migrated, "--dir", dir},
			stdout: []string{"lint: not run: no dev database: ", `ALTER TABLE "no_such_table"`},
		},
	})
}
