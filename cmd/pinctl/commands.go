package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// A command is a pinctl subcommand. Each lives in its own file and adds
// itself to the registry from an init function:
//
//	func init() { register(command{name: "dlq", summary: "…", run: runDLQ}) }
type command struct {
	name    string
	summary string // one line for `pinctl help`
	run     func(ctx context.Context, args []string) error
}

// commands is the registry of subcommands, by name.
var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("pinctl: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// run dispatches args (without the program name) to a subcommand.
func run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(os.Stdout)
		if len(args) == 0 {
			return usageError("no command given")
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return usageError(fmt.Sprintf("unknown command %q (see `pinctl help`)", args[0]))
	}
	return c.run(ctx, args[1:])
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: pinctl <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\n`pinctl <command> -h` describes a command.")
}

// usageError is a command line that cannot be run: exit code 2.
type usageError string

func (e usageError) Error() string { return string(e) }

// exitError ends pinctl with a given code and no message of its own (the
// code of a command run by `pg exec`, or a failure already reported).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode reports err on w in one line and returns the process exit code.
func exitCode(w io.Writer, err error) int {
	var ue usageError
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(w, "pinctl: %s\n", secrets.Redact(string(ue)))
		return 2
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(w, "pinctl: interrupted")
		return 1
	default:
		fmt.Fprintf(w, "pinctl: %s\n", secrets.Redact(strings.Join(strings.Fields(err.Error()), " ")))
		return 1
	}
}

// newFlags returns a flag set for a (sub)command whose usage line is use
// and whose -h output goes to stderr.
func newFlags(name, use, doc string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: pinctl %s\n\n%s\n", use, doc)
		if hasFlags(fs) {
			fmt.Fprintln(fs.Output(), "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseArgs parses flags that may come before, between or after the
// positional arguments (`diff NAME --dev-url U`), and checks the number of
// positional arguments is within [minArgs, maxArgs]. Everything after "--"
// is positional.
func parseArgs(fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError(err.Error())
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...) // Parse stopped after the terminator
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		fs.Usage()
		return nil, usageError(fmt.Sprintf("%s: wrong number of arguments", fs.Name()))
	}
	return pos, nil
}

// subcommands dispatches args to one of subs, for a command with a second
// level (`pinctl migrate apply`).
func subcommands(ctx context.Context, parent string, subs []command, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(os.Stderr, "usage: pinctl %s <command> [arguments]\n\ncommands:\n", parent)
		for _, s := range subs {
			fmt.Fprintf(os.Stderr, "  %-8s %s\n", s.name, s.summary)
		}
		if len(args) == 0 {
			return usageError(parent + ": no command given")
		}
		return nil
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:])
		}
	}
	return usageError(fmt.Sprintf("%s: unknown command %q (see `pinctl %s help`)", parent, args[0], parent))
}
