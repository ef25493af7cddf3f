package main

import (
	"bytes"
	"database/sql"
	"errors"
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
	pinctl := filepath.Join(builtBinaries(t), "pinctl")
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

	tests := []struct {
		name    string
		args    []string
		code    int
		stdout  []string // printed, each
		stderr  string   // the one line on stderr says this (when code != 0)
		without string   // not printed
	}{
		{
			name: "a column added by hand is printed as drift, exit 0",
			args: []string{"--url", drifted, "--dev-url", dev},
			stdout: []string{"pending: none (up to date)", "drift: the live schema differs from the migrations",
				`-- modify "leads" table`, `ALTER TABLE "leads" ADD COLUMN "note" character varying(200) NULL;`},
		},
		{
			name:   "with --exit-code drift exits 1",
			args:   []string{"--url", drifted, "--dev-url", dev, "--exit-code"},
			code:   1,
			stdout: []string{`ADD COLUMN "note"`},
			stderr: "has drifted from the migrations (--exit-code)",
		},
		{
			name:    "a clean database has no drift, exit 0 with --exit-code",
			args:    []string{"--url", clean, "--dev-url", dev, "--exit-code"},
			stdout:  []string{"no drift: the live schema (public) is what the applied migrations produce"},
			without: "differs",
		},
		{
			name:   "the dev database defaults to a throwaway local PostgreSQL",
			args:   []string{"--url", drifted},
			stdout: []string{`ALTER TABLE "leads" ADD COLUMN "note" character varying(200) NULL;`},
		},
		{
			name:    "--drift=false skips the check",
			args:    []string{"--url", drifted, "--drift=false"},
			stdout:  []string{"pending: none (up to date)"},
			without: "drift",
		},
		{
			name:   "an unreachable database exits 1 with one line",
			args:   []string{"--url", "postgres://postgres@127.0.0.1:1/none?sslmode=disable"},
			code:   1,
			stderr: "cannot reach database",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), pinctl, append([]string{"migrate", "status"}, tt.args...)...)
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
