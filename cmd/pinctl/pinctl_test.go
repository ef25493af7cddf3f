package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pin-platform/pin/migrate"
	"github.com/pin-platform/pin/migrate/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// binaries is the module's binaries (pinctl and the three consumers), built
// once per test run by the tests that run them as processes.
var binaries struct {
	once sync.Once
	dir  string
	err  error
}

func builtBinaries(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		if binaries.dir, binaries.err = os.MkdirTemp("", "pinctl-test-bin-"); binaries.err != nil {
			return
		}
		build := exec.Command("go", "build", "-o", binaries.dir+string(filepath.Separator), "./cmd/...")
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			binaries.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return binaries.dir
}

// runExpecting runs cmd (stdout and stderr together, logged) and checks
// that it succeeds and that its output holds every one of wants.
func runExpecting(t *testing.T, cmd *exec.Cmd, wants ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Log(out.String())
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(cmd.Args[1:], " "), err)
	}
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	return out.String()
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantPos []string
		wantDev string
		wantErr bool
	}{
		{"flags after the positional argument", []string{"name", "--dev-url", "u"}, []string{"name"}, "u", false},
		{"flags before the positional argument", []string{"-dev-url=u", "name"}, []string{"name"}, "u", false},
		{"everything after -- is positional", []string{"--dev-url", "u", "--", "go", "test", "-v", "./..."}, []string{"go", "test", "-v", "./..."}, "u", false},
		{"an unknown flag is a usage error", []string{"--nope"}, nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(new(bytes.Buffer))
			dev := fs.String("dev-url", "", "")
			pos, err := parseArgs(fs, tt.args, 0, 10)
			if tt.wantErr {
				var ue usageError
				if !errors.As(err, &ue) {
					t.Fatalf("error %v, want a usage error", err)
				}
				return
			}
			if err != nil || !slices.Equal(pos, tt.wantPos) || *dev != tt.wantDev {
				t.Fatalf("positional %q dev-url %q err %v; want %q %q", pos, *dev, err, tt.wantPos, tt.wantDev)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		out  string
	}{
		{"success", nil, 0, ""},
		{"usage error", usageError("bad"), 2, "pinctl: bad\n"},
		{"failure on one line", errors.New("cannot reach database x:\n  refused"), 1, "pinctl: cannot reach database x: refused\n"},
		{"command's own code", &exitError{code: 7}, 7, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if code := exitCode(&b, tt.err); code != tt.code || b.String() != tt.out {
				t.Fatalf("exit %d %q, want %d %q", code, b.String(), tt.code, tt.out)
			}
		})
	}
}

func TestMigrateCommands(t *testing.T) {
	url := pgtest.NewEmptyDB(t)
	unreachable := "postgres://postgres@127.0.0.1:1/none?sslmode=disable"
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"status of an empty database", []string{"migrate", "status", "--url", url}, 0},
		{"plan of an empty database", []string{"migrate", "plan", "--url", url, "--dev-url", pgtest.NewEmptyDB(t)}, 0},
		{"apply", []string{"migrate", "apply", "--url", url}, 0},
		{"apply again", []string{"migrate", "apply", "--url", url}, 0},
		{"plan of an up-to-date database", []string{"migrate", "plan", "--url", url}, 0},
		{"lint of the committed files", []string{"migrate", "lint", "--dir", "../../migrate/migrations", "--dev-url", pgtest.NewEmptyDB(t)}, 0},
		{"apply without a URL (no --url, --url-file or $DATABASE_URL)", []string{"migrate", "apply"}, 2},
		{"apply to an unreachable database", []string{"migrate", "apply", "--url", unreachable}, 1},
		{"status of an unreachable database", []string{"migrate", "status", "--url", unreachable}, 1},
		{"plan of an unreachable database", []string{"migrate", "plan", "--url", unreachable}, 1},
		{"diff with an invalid name", []string{"migrate", "diff", "Bad Name"}, 2},
		{"unknown subcommand", []string{"migrate", "nope"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "") // the test server's: never a command's default here
			var stderr bytes.Buffer
			code := exitCode(&stderr, run(t.Context(), tt.args))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			if code != 0 && strings.Count(stderr.String(), "\n") != 1 {
				t.Fatalf("stderr is not one line: %q", stderr.String())
			}
		})
	}
}

func TestMigrateHash(t *testing.T) {
	path := t.TempDir()
	src, err := os.ReadDir("../../migrate/migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range src {
		b, err := os.ReadFile(filepath.Join("../../migrate/migrations", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".sql") {
			b = append([]byte("-- atlas:nolint\n\n"), b...) // a reviewed directive
		}
		if err := os.WriteFile(filepath.Join(path, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stderr bytes.Buffer
	if code := exitCode(&stderr, run(t.Context(), []string{"migrate", "hash", "--dir", path})); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	dir, err := migrate.OpenDir(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.CheckDir(dir); err != nil {
		t.Fatalf("after hash: %v", err)
	}
}

func TestPgExec(t *testing.T) {
	tests := []struct {
		name string
		cmd  string
		code int
	}{
		{"the command sees DATABASE_URL of a running server", `case "$DATABASE_URL" in postgres://*/postgres\?sslmode=disable) exit 0;; *) exit 9;; esac`, 0},
		{"the command's exit code is pinctl's", "exit 3", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := exitCode(&stderr, run(t.Context(), []string{"pg", "exec", "--", "sh", "-c", tt.cmd})); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
		})
	}
}
