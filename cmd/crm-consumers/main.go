// Command crm-consumers runs the CRM's Kafka consumers: Selection Shared
// (pin.selections.selection-shared.v1, group crm-selections). It runs until
// SIGINT or SIGTERM, then drains and exits 0; exit 2 on bad configuration
// (docs/contract.md §2).
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
	code := consumer.Main(ctx, os.Environ(), os.Stderr, roster.CRM.Addr(), roster.CRM.New)
	stop()
	os.Exit(code)
}
