package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/pin-platform/pin/migrate/localpg"
)

func init() {
	register(command{
		name:    "pg",
		summary: "a throwaway local PostgreSQL: exec",
		run: func(ctx context.Context, args []string) error {
			return subcommands(ctx, "pg", pgCommands, args)
		},
	})
}

var pgCommands = []command{
	{name: "exec", summary: "run a command with DATABASE_URL set to a throwaway PostgreSQL", run: pgExec},
}

func pgExec(ctx context.Context, args []string) error {
	fs := newFlags("pg exec", "pg exec -- CMD [ARGS...]",
		"Starts a private PostgreSQL from the system's binaries in a temporary\n"+
			"directory, runs CMD with DATABASE_URL=postgres://…/postgres?sslmode=disable\n"+
			"and the terminal's stdio, then stops and removes the server. Exits with\n"+
			"CMD's exit code. `make test` uses it so one server serves the whole run.")
	pos, err := parseArgs(fs, args, 1, 1<<20)
	if err != nil {
		return err
	}
	srv, stop, err := startLocal(ctx, "pinctl-pg-*")
	if err != nil {
		return fmt.Errorf("pg exec: %w", err)
	}
	defer stop()

	cmd := exec.CommandContext(ctx, pos[0], pos[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "DATABASE_URL="+srv.URL("postgres"))
	// On SIGINT/SIGTERM pass the signal on and give the command time to
	// clean up, rather than killing it outright.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return &exitError{code: 128 + int(ws.Signal())}
		}
		return &exitError{code: ee.ExitCode()}
	default:
		return fmt.Errorf("pg exec: %w", err)
	}
}

// devDatabase returns devURL, or when it is empty the URL of a throwaway
// local server's (empty) postgres database; stop shuts that server down.
func devDatabase(ctx context.Context, devURL string) (url string, stop func(), err error) {
	if devURL != "" {
		return devURL, func() {}, nil
	}
	srv, stop, err := startLocal(ctx, "pinctl-dev-*")
	if err != nil {
		return "", nil, fmt.Errorf("start a dev database (or pass --dev-url): %w", err)
	}
	return srv.URL("postgres"), stop, nil
}

// startLocal starts a non-durable local server in a new temporary
// directory; stop stops it and removes the directory.
func startLocal(ctx context.Context, pattern string) (*localpg.Server, func(), error) {
	dir, err := localpg.MkdirTemp(pattern)
	if err != nil {
		return nil, nil, err
	}
	srv, err := localpg.Start(ctx, dir, localpg.Options{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pinctl: stop local PostgreSQL in %s: %v\n", dir, err)
			return // leave the data for inspection
		}
		os.RemoveAll(dir)
	}
	return srv, stop, nil
}
