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

// The lanes beyond the first wait for a batch's worth of messages with a
// near database; far, or for an eager service, any run opens one.
func TestTheBacklogThatOpensALaneFollowsTheDistance(t *testing.T) {
	for _, tc := range []struct {
		name  string
		svc   Service
		rtt   time.Duration
		batch int
		want  int
	}{
		{"loopback", Service{}, 40 * time.Microsecond, 256, 256},
		{"just under far", Service{}, farRoundTrip - time.Microsecond, 300, 300},
		{"far", Service{}, farRoundTrip, 512, 0},
		{"eager, near", Service{EagerLanes: true}, 40 * time.Microsecond, 256, 0},
	} {
		if got := backlogFor(tc.svc, tc.rtt, tc.batch); got != tc.want {
			t.Errorf("%s: backlogFor(eager %v, %v, %d) = %d, want %d", tc.name, tc.svc.EagerLanes, tc.rtt, tc.batch, got, tc.want)
		}
	}
}
