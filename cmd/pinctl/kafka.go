package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pin-platform/pin/internal/kafkaenv"
)

// checkKafka reaches the brokers before a command works with them: a
// refused password or TLS handshake is one clear line and exit 1, not a
// command that waits for nothing. The command's clients take the same
// KAFKA_* settings (kafkaenv.Client).
func checkKafka(ctx context.Context, brokers string) error {
	return kafkaenv.Check(ctx, *kafkaenv.Client(brokers, nil), 15*time.Second)
}

// opBrokersFlag registers --brokers, defaulting to $KAFKA_BOOTSTRAP_SERVERS.
func opBrokersFlag(fs *flag.FlagSet) *string {
	return fs.String("brokers", os.Getenv("KAFKA_BOOTSTRAP_SERVERS"), "Kafka bootstrap servers (default $KAFKA_BOOTSTRAP_SERVERS)")
}

func opRequireFlag(fs *flag.FlagSet, name, value string) error {
	if strings.TrimSpace(value) == "" {
		fs.Usage()
		return usageError(fmt.Sprintf("%s: --%s is required", fs.Name(), name))
	}
	return nil
}
