package messenger

import (
	"context"
	"database/sql"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/migrate/pgtest"
)

// TestConvergence is a property test of the handler against PostgreSQL:
// for random histories of a lead (snapshots v1…vN of random teams), any
// delivery of them — shuffled, with duplicates and with drops, applied one
// after the other or by concurrent consumers racing on the optimistic lock —
// ends with the chat's active members equal to the highest-version snapshot
// delivered, lead_member_version equal to its Version, and a feed that,
// replayed from the start, gives exactly that membership.
//
// The seed is logged; MESSENGER_CONVERGENCE_SEED=<seed> replays a run.
func TestConvergence(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	if s := os.Getenv("MESSENGER_CONVERGENCE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("MESSENGER_CONVERGENCE_SEED: %v", err)
		}
	}
	t.Logf("seed %d (MESSENGER_CONVERGENCE_SEED=%d go test -run TestConvergence to replay)", seed, seed)
	rng := rand.New(rand.NewSource(seed))

	client, db, _ := pgtest.NewClient(t)
	h := &handler{m: newMetrics(nil)}
	users := make([]uuid.UUID, 7)
	for i := range users {
		users[i] = uuid.New()
	}
	roles := append(slices.Clone(knownRoles), "Notary")
	changeTypes := append(slices.Clone(knownChangeTypes), "Teleported")

	const rounds = 60
	for round := range rounds {
		lead := uuid.New()
		chatID := uuid.New()
		if _, err := db.Exec(`INSERT INTO chats (id, kind, lead_id) VALUES ($1, 'Lead', $2)`, chatID, lead); err != nil {
			t.Fatal(err)
		}

		// A history of snapshots.
		snaps := make([]ev, 1+rng.Intn(8))
		for i := range snaps {
			var team []member
			for _, u := range users {
				if rng.Intn(2) == 0 {
					team = append(team, member{u, roles[rng.Intn(len(roles))]})
				}
			}
			if len(team) == 0 {
				team = append(team, member{users[rng.Intn(len(users))], RoleExecutor})
			}
			x := newEv(lead, int64(i+1), team...)
			// Noise the consumer must shrug off: role spelling, a repeated
			// member, a delta of any kind (it never decides membership).
			for j := range x.Active {
				if rng.Intn(3) == 0 && x.Active[j].Role != "Notary" {
					x.Active[j].Role = strings.ToLower(x.Active[j].Role)
				}
			}
			if rng.Intn(4) == 0 {
				x.Active = append(x.Active, x.Active[rng.Intn(len(x.Active))])
			}
			for range rng.Intn(3) {
				x.Delta = append(x.Delta, change{User: users[rng.Intn(len(users))],
					Type: changeTypes[rng.Intn(len(changeTypes))], Role: roles[rng.Intn(len(roles))]})
			}
			snaps[i] = x
		}

		// A delivery: drops, duplicates, any order.
		var deliveries []ev
		best := int64(0)
		var want []member
		for _, x := range snaps {
			if rng.Intn(4) == 0 {
				continue // lost
			}
			copies := 1
			if rng.Intn(3) == 0 {
				copies += 1 + rng.Intn(2)
			}
			for range copies {
				deliveries = append(deliveries, x)
			}
			if x.Version > best {
				best, want = x.Version, x.Active
			}
		}
		rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
		workers := 1
		if round%2 == 1 {
			workers = 3 // concurrent consumers, as around a rebalance
		}

		applyAll(t, client, h, deliveries, workers)
		if t.Failed() {
			t.Fatalf("round %d (seed %d): %d deliveries of %d snapshots", round, seed, len(deliveries), len(snaps))
		}
		checkConverged(t, db, chatID, best, canonicalTeam(want), round, seed)
	}
}

// applyAll delivers xs with the given number of concurrent workers; a
// worker that loses the optimistic lock retries at once in a fresh
// transaction, as the runtime does.
func applyAll(t *testing.T, client *ent.Client, h *handler, xs []ev, workers int) {
	t.Helper()
	ch := make(chan ev)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range ch {
				for attempt := 1; ; attempt++ {
					out, err := applyDirect(context.Background(), client, h, x)
					if c, ok := consumer.CodeOf(err); ok && c.Name == CodeConcurrentUpdate.Name && attempt < 100 {
						continue
					}
					if err != nil {
						t.Errorf("v%d: %v", x.Version, err)
					} else if out != Synced && out != SkippedStale {
						t.Errorf("v%d: outcome %q", x.Version, out)
					}
					break
				}
			}
		}()
	}
	for _, x := range xs {
		ch <- x
	}
	close(ch)
	wg.Wait()
}

// canonicalTeam is what the chat should hold for ActiveParticipants team:
// roles in the spec's spelling, repeats folded, sorted.
func canonicalTeam(team []member) []member {
	seen := map[uuid.UUID]bool{}
	var out []member
	for _, m := range team {
		if seen[m.UserID] {
			continue
		}
		seen[m.UserID] = true
		r, _ := canonicalRole(m.Role)
		out = append(out, member{m.UserID, r})
	}
	sortMembers(out)
	return out
}

func checkConverged(t *testing.T, db *sql.DB, chatID uuid.UUID, best int64, want []member, round int, seed int64) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("round %d (seed %d): "+format, append([]any{round, seed}, args...)...)
	}
	s := chatOf(t, db, chatID)
	if best == 0 {
		if s.LeadMemberVersion.Valid || len(activeOf(t, db, chatID)) != 0 {
			fail("nothing delivered, yet chat %+v has members %v", s, activeOf(t, db, chatID))
		}
		return
	}
	if s.LeadMemberVersion.Int64 != best {
		fail("lead_member_version %v, want %d", s.LeadMemberVersion, best)
	}
	if got := activeOf(t, db, chatID); !slices.Equal(got, want) {
		fail("active members %v, want v%d's %v", got, best, want)
	}

	// The feed replays to the membership, and each fact is consistent with
	// the membership before it.
	replay := map[uuid.UUID]string{}
	for _, x := range eventsOf(t, db, chatID) {
		role, in := replay[x.UserID]
		switch x.Type {
		case EventParticipantJoined:
			if in {
				fail("%s joined while a member", x.UserID)
			}
			replay[x.UserID] = x.Role
		case EventParticipantLeft:
			if !in || role != x.Role {
				fail("%s left as %s while member=%v as %s", x.UserID, x.Role, in, role)
			}
			delete(replay, x.UserID)
		case EventParticipantRoleChanged:
			if !in || role != x.PreviousRole.String || x.Role == role {
				fail("%s role change %s→%s while member=%v as %s", x.UserID, x.PreviousRole.String, x.Role, in, role)
			}
			replay[x.UserID] = x.Role
		}
	}
	var replayed []member
	for u, r := range replay {
		replayed = append(replayed, member{u, r})
	}
	sortMembers(replayed)
	if !slices.Equal(replayed, want) {
		fail("the feed replays to %v, want %v", replayed, want)
	}
	if ps := pushesOf(t, db, chatID); len(ps) > 0 && !sameIDs(ps[len(ps)-1].Recipients, userIDs(want)) {
		fail("last chat_updates recipients %v, want %v", ps[len(ps)-1].Recipients, userIDs(want))
	}
}
