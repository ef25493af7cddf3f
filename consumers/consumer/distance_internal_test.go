package consumer

import (
	"testing"
	"time"
)

func TestLanesFollowTheDatabasesDistance(t *testing.T) {
	near := Config{Transactions: 2, BatchSize: 256, FollowDistance: true}
	for _, tc := range []struct {
		name     string
		cfg      Config
		rtt      time.Duration
		n, batch int
	}{
		{"loopback", near, 40 * time.Microsecond, 2, 256},
		{"just under far", near, farRoundTrip - time.Microsecond, 2, 256},
		{"far", near, farRoundTrip, farTransactions, farBatchSize},
		{"a millisecond away", near, 1200 * time.Microsecond, farTransactions, farBatchSize},
		{"chosen by the operator", Config{Transactions: 2, BatchSize: 256}, 5 * time.Millisecond, 2, 256},
		{"more than far's, kept", Config{Transactions: 4, BatchSize: 800, FollowDistance: true}, 5 * time.Millisecond, 4, 800},
	} {
		n, b := lanesFor(tc.cfg, tc.rtt)
		if n != tc.n || b != tc.batch {
			t.Errorf("%s: lanesFor(%+v, %v) = %d, %d; want %d, %d", tc.name, tc.cfg, tc.rtt, n, b, tc.n, tc.batch)
		}
	}
}
