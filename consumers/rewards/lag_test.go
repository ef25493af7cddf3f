package rewards

import (
	"context"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/ent"
)

// The lag gauge's source reads max(synced_at) of the replica once, in the
// background, then follows the writes the process commits: a scrape reads
// no table (a replica of millions of bonds took seconds to scan, past the
// gauge's timeout), and the value only moves forward.
func TestTheLagSourceReadsTheReplicaOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	newest := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, at := range []time.Time{newest.Add(-time.Hour), newest} {
		b := newBond(uuid.New())
		if err := e.Client.ReferralBondReplica.Create().SetID(b.ID).SetReferredUserID(b.Referred).
			SetReferrerUserID(b.Referrer).SetStatus(string(StatusActive)).SetBoundAt(at).
			SetReplicaVersion(int64(i + 1)).SetSyncedAt(at).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A client of its own, to be closed once the seed is read.
	client, err := ent.Open(dialect.Postgres, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	l := newSyncedLag()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok, err := l.source(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if !got.Equal(newest) {
				t.Fatalf("seeded at %v, want max(synced_at) %v", got, newest)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the seed was never read")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// From here no scrape reads the table: it answers with the database gone.
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	l.applied(newest.Add(-time.Minute)) // an older event's write: no move back
	if got, ok, err := l.source(ctx, client); err != nil || !ok || !got.Equal(newest) {
		t.Fatalf("after an older write: %v, %v, %v; want %v", got, ok, err, newest)
	}
	later := newest.Add(time.Minute)
	l.applied(later)
	if got, ok, err := l.source(ctx, client); err != nil || !ok || !got.Equal(later) {
		t.Fatalf("after a newer write: %v, %v, %v; want %v", got, ok, err, later)
	}
}
