// Command rewards-consumers runs the rewards service's event consumers
// (Referral Bond Sync, group pin-rewards-referral-bonds) until SIGINT or
// SIGTERM. Configuration comes from the environment (docs/contract.md §2).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/consumers/roster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := consumer.Main(ctx, os.Environ(), os.Stderr, roster.Rewards.Addr(), roster.Rewards.New)
	stop()
	os.Exit(code)
}
