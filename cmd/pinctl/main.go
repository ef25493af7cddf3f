// Command pinctl is the operator's tool of the consumers: versioned
// migrations (`pinctl migrate …`), a throwaway PostgreSQL for a command
// (`pinctl pg exec -- …`) and the other subcommands registered in this
// package. Run `pinctl help` for the list.
//
// Exit codes: 0 success, 1 failure (one line on stderr says why), 2 usage
// error; `pg exec` exits with its command's code.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pin-platform/pin/internal/secret"
)

// secrets are the passwords pinctl was given (its environment's, and the
// database URL's of --url or --url-file): every error line is masked by it.
var secrets = secret.FromEnv(os.Environ())

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	os.Exit(exitCode(os.Stderr, err))
}
