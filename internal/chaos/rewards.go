package chaos

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/rewards"
)

// The rewards spec's codes and outcomes, as the DLQ headers and
// processed_messages carry them.
const (
	rewardsInvalid   = "REWARDS_BOND_EVENT_INVALID"
	rewardsConflict  = "REWARDS_BOND_REPLICA_ACTIVE_CONFLICT"
	rewardsOrphan    = "REWARDS_BOND_EVENT_ORPHAN_CLOSED"
	outCreated       = "created"
	outUpdated       = "updated"
	outClosed        = "closed"
	outStale         = "skipped-stale"
	outAlreadyClosed = "skipped-already-closed"
)

// bondCreated is a pin.referral.bond-created as the model applies it.
type bondCreated struct {
	bond, referred, referrer uuid.UUID
	company                  *uuid.UUID
	boundAt                  time.Time
	version                  int64
	at                       time.Time // the envelope's CreatedAt: synced_at
}

// bondClosed is a pin.referral.bond-closed as the model applies it.
type bondClosed struct {
	bond, referred uuid.UUID // referred: the payload's
	status         string    // as sent
	version        int64
	at             time.Time
}

// bondRow is a referral_bond_replicas row.
type bondRow struct {
	referred, referrer uuid.UUID
	company            *uuid.UUID
	status             string
	boundAt            time.Time
	version            int64
	synced             time.Time
}

// knownStatus is the spec's spelling of a known status (matched
// case-insensitively), or s as it came.
func knownStatus(s string) string {
	for _, k := range []string{"Active", "Replaced", "Revoked"} {
		if strings.EqualFold(s, k) {
			return k
		}
	}
	return s
}

func terminalStatus(s string) bool { s = knownStatus(s); return s == "Replaced" || s == "Revoked" }

// rewardsExpect is the model's view of the rewards run.
type rewardsExpect struct {
	expectation
	rows map[uuid.UUID]bondRow
}

// modelRewards applies the rewards spec to the records in partition order
// (its key, ReferredUserId, keeps a user's events in one partition).
func modelRewards(recs []record) *rewardsExpect {
	sortRecords(recs)
	x := &rewardsExpect{expectation: newExpectation(len(recs)), rows: map[uuid.UUID]bondRow{}}
	active := map[uuid.UUID]uuid.UUID{} // referred user → their Active bond
	for _, r := range recs {
		key, done := x.settled(r)
		if done {
			continue
		}
		switch b := r.ev.body.(type) {
		case bondCreated:
			row, ok := x.rows[b.bond]
			switch {
			case !ok:
				if _, taken := active[b.referred]; taken {
					x.deadLetter(r, rewardsConflict, key)
					continue
				}
				x.rows[b.bond] = bondRow{referred: b.referred, referrer: b.referrer, company: b.company,
					status: "Active", boundAt: b.boundAt, version: b.version, synced: b.at}
				active[b.referred] = b.bond
				x.mark(r, key, outCreated)
			case b.version <= row.version:
				x.mark(r, key, outStale)
			case row.status == "Active":
				row.version, row.synced = b.version, b.at
				x.rows[b.bond] = row
				x.mark(r, key, outUpdated)
			default: // a closed bond never returns to Active
				x.deadLetter(r, rewardsInvalid, key)
				continue
			}
		case bondClosed:
			row, ok := x.rows[b.bond]
			switch {
			case !ok:
				x.deadLetter(r, rewardsOrphan, key)
				continue
			case terminalStatus(row.status): // BND-4, whatever the Version
				x.mark(r, key, outAlreadyClosed)
			case b.version <= row.version:
				x.mark(r, key, outStale)
			case b.referred != row.referred:
				x.deadLetter(r, rewardsInvalid, key)
				continue
			default:
				if row.status == "Active" {
					delete(active, row.referred)
				}
				row.status, row.version, row.synced = knownStatus(b.status), b.version, b.at
				x.rows[b.bond] = row
				x.mark(r, key, outClosed)
			}
		}
	}
	return x
}

// compare checks the replica against the model.
func (x *rewardsExpect) compare(t *Tally, rows map[uuid.UUID]bondRow) {
	activeOf := map[uuid.UUID]int{}
	for id, got := range rows {
		if got.status == "Active" {
			activeOf[got.referred]++
		}
		want, ok := x.rows[id]
		if !ok {
			t.addWrong("bond %s is in the replica (%s, v%d), the model has no such bond", id, got.status, got.version)
			continue
		}
		switch {
		case got.version < want.version:
			t.addLost("bond %s at replica_version %d (%s), want %d (%s)", id, got.version, got.status, want.version, want.status)
		case got.version > want.version || got.status != want.status:
			t.addWrong("bond %s: %s v%d, want %s v%d", id, got.status, got.version, want.status, want.version)
		case !got.synced.Equal(want.synced):
			t.addWrong("bond %s: synced_at %s, want %s", id, got.synced.Format(time.RFC3339Nano), want.synced.Format(time.RFC3339Nano))
		case got.referred != want.referred || got.referrer != want.referrer || !sameID(got.company, want.company) || !got.boundAt.Equal(want.boundAt):
			t.addWrong("bond %s: immutable fields (referred, referrer, company, bound_at) differ from its bond-created", id)
		}
	}
	for id, want := range x.rows {
		if _, ok := rows[id]; !ok {
			t.addLost("bond %s (%s v%d) is not in the replica", id, want.status, want.version)
		}
	}
	for u, n := range activeOf {
		if n > 1 {
			t.addDoubled("referred user %s has %d Active bonds", u, n)
		}
	}
}

func sameID(a, b *uuid.UUID) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// readRewards reads the replica.
func readRewards(ctx context.Context, db *sql.DB) (map[uuid.UUID]bondRow, error) {
	rs, err := db.QueryContext(ctx, `SELECT bond_id, referred_user_id, referrer_user_id, referrer_company_id, status, bound_at, replica_version, synced_at FROM referral_bond_replicas`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[uuid.UUID]bondRow{}
	for rs.Next() {
		var id uuid.UUID
		var r bondRow
		var company uuid.NullUUID
		if err := rs.Scan(&id, &r.referred, &r.referrer, &company, &r.status, &r.boundAt, &r.version, &r.synced); err != nil {
			return nil, err
		}
		if company.Valid {
			r.company = &company.UUID
		}
		out[id] = r
	}
	return out, rs.Err()
}

// rewardsGen makes the rewards stream: referred users whose bonds are
// created, updated, closed and rebound, with stale and repeated deliveries,
// and poison of every kind the spec knows.
type rewardsGen struct {
	*gen
	out    []*event
	users  []*referredUser
	kinds  []poisonKind
	next   int     // the next poison kind, round robin
	poison float64 // share of poison steps
}

type referredUser struct {
	id    uuid.UUID
	bonds []*genBond // the last one is the current
}

type genBond struct {
	id, referred, referrer uuid.UUID
	company                *uuid.UUID
	boundAt                time.Time
	version                int64
	status                 string // as the model will store it
	sent                   []*event
}

func (u *referredUser) current() *genBond {
	if len(u.bonds) == 0 {
		return nil
	}
	return u.bonds[len(u.bonds)-1]
}

// stateful poison kinds: made against the state, not by breaking a member.
const (
	poisonConflict = "a second Active bond for a referred user"
	poisonTerminal = "bond-created on a closed bond"
	poisonMismatch = "bond-closed whose ReferredUserId differs from the row's"
	poisonOrphan   = "bond-closed for a bond never created"
)

func rewardsPoisons() []poisonKind {
	ks := envelopePoisons(rewardsInvalid)
	created := func(note, member string, v any) poisonKind {
		k := payloadPoison(note, rewardsInvalid, member, v)
		k.note = "bond-created: " + k.note
		return k
	}
	closed := func(note, member string, v any) poisonKind {
		k := payloadPoison(note, rewardsInvalid, member, v)
		k.note = "bond-closed: " + k.note
		return k
	}
	ks = append(ks,
		poisonKind{note: "CreatedAt missing", code: rewardsInvalid, make: func(b []byte) []byte {
			return mutate(b, func(env map[string]any) { delete(env, "CreatedAt") })
		}},
		created("BondId missing", "BondId", dropMember),
		created("BondId empty", "BondId", ""),
		created("BondId all zeros", "BondId", uuid.Nil.String()),
		created("BondId not a UUID", "BondId", "bond-1"),
		created("ReferredUserId missing", "ReferredUserId", dropMember),
		created("ReferrerUserId missing", "ReferrerUserId", dropMember),
		created("ReferrerUserId all zeros", "ReferrerUserId", uuid.Nil.String()),
		created("ReferrerCompanyId not a UUID", "ReferrerCompanyId", "company-1"),
		created("BoundAt missing", "BoundAt", dropMember),
		created("BoundAt not a time", "BoundAt", "soon"),
		created("Version missing", "Version", dropMember),
		created("Version 0", "Version", 0),
		created("Version negative", "Version", -3),
		created("Version a string", "Version", "2"),
		closed("BondId missing", "BondId", dropMember),
		closed("ReferredUserId missing", "ReferredUserId", dropMember),
		closed("Status missing", "Status", dropMember),
		closed("Status blank", "Status", "  "),
		closed("Status Active", "Status", "Active"),
		closed("Status longer than 32 characters", "Status", strings.Repeat("S", 33)),
		closed("Version 0", "Version", 0),
		closed("ReplacedByBondId not a UUID", "ReplacedByBondId", "bond-2"),
		poisonKind{note: poisonConflict, code: rewardsConflict},
		poisonKind{note: poisonTerminal, code: rewardsInvalid},
		poisonKind{note: poisonMismatch, code: rewardsInvalid},
		poisonKind{note: poisonOrphan, code: rewardsOrphan},
	)
	return ks
}

// generateRewards makes n rewards events from seed.
func generateRewards(seed uint64, n int) []*event {
	g := &rewardsGen{gen: newGen(seed, 0x5e7a1d), kinds: rewardsPoisons()}
	g.poison = poisonShare(len(g.kinds), n)
	for len(g.out) < n {
		g.step()
	}
	g.out = g.out[:n]
	for i, e := range g.out {
		e.seq = i
	}
	return g.out
}

// poisonShare is the share of poison steps: 2.5 %, more for short runs so
// that every kind appears.
func poisonShare(kinds, n int) float64 {
	return min(0.3, max(0.025, 1.5*float64(kinds)/float64(max(n, 1))))
}

func (g *rewardsGen) emit(e *event) { g.out = append(g.out, e) }

func (g *rewardsGen) created(b *genBond, version int64, referrer uuid.UUID, boundAt time.Time) *event {
	at := g.now()
	id := g.id()
	p := demo.BondCreatedPayload(b.id, b.referred, referrer, version, boundAt)
	p["ReferralLinkId"] = g.id()
	if b.company != nil {
		p["ReferrerCompanyId"] = *b.company
	}
	e := &event{key: []byte(b.referred.String()), id: id, route: rewards.KeyPrefixBondCreated,
		value: demo.Envelope(id, rewards.EventTypeBondCreated, "ReferralBond", b.id, at, p),
		body:  bondCreated{bond: b.id, referred: b.referred, referrer: referrer, company: b.company, boundAt: boundAt, version: version, at: at}}
	if g.chance(0.03) {
		e.value = withContractVersion(e.value, 2)
	}
	return e
}

func (g *rewardsGen) closed(b *genBond, referred uuid.UUID, status string, version int64) *event {
	at := g.now()
	id := g.id()
	p := demo.BondClosedPayload(b.id, referred, status, version)
	if knownStatus(status) == "Replaced" {
		p["ReplacedByBondId"] = g.id()
	}
	if g.chance(0.2) {
		p["RevokeReason"] = "fraud check"
	}
	e := &event{key: []byte(b.referred.String()), id: id, route: rewards.KeyPrefixBondClosed,
		value: demo.Envelope(id, rewards.EventTypeBondClosed, "ReferralBond", b.id, at, p),
		body:  bondClosed{bond: b.id, referred: referred, status: status, version: version, at: at}}
	if g.chance(0.03) {
		e.value = withContractVersion(e.value, 2)
	}
	return e
}

func (g *rewardsGen) newBond(u *referredUser) *genBond {
	b := &genBond{id: g.id(), referred: u.id, referrer: g.id(), status: "Active", version: 1 + int64(g.intn(3))}
	if g.chance(0.3) {
		c := g.id()
		b.company = &c
	}
	b.boundAt = g.clock.Add(time.Millisecond)
	u.bonds = append(u.bonds, b)
	return b
}

// users in a state: with an Active bond, or whose bond is closed
// (Replaced/Revoked; an unknown status is left alone).
func (g *rewardsGen) pickUser(want func(*referredUser) bool) *referredUser {
	for range 8 {
		if len(g.users) == 0 {
			return nil
		}
		if u := pick(g.gen, g.users); want(u) {
			return u
		}
	}
	return nil
}

func hasActive(u *referredUser) bool { b := u.current(); return b != nil && b.status == "Active" }
func hasClosed(u *referredUser) bool { b := u.current(); return b != nil && terminalStatus(b.status) }

func (g *rewardsGen) step() {
	if g.chance(g.poison) {
		g.poisonStep()
		return
	}
	r := g.intn(100)
	switch {
	case r < 22 || len(g.users) < 5: // a new referred user and their bond
		u := &referredUser{id: g.id()}
		g.users = append(g.users, u)
		b := g.newBond(u)
		g.send(b, g.created(b, b.version, b.referrer, b.boundAt), "bond created")
	case r < 38: // bond-created with a higher Version on an Active bond
		if u := g.pickUser(hasActive); u != nil {
			b := u.current()
			b.version += 1 + int64(g.intn(2))
			referrer := b.referrer
			if g.chance(0.1) { // a source-immutable field differs: logged, not applied
				referrer = g.id()
			}
			g.send(b, g.created(b, b.version, referrer, b.boundAt), "bond-created with a higher Version")
		}
	case r < 52: // closed
		if u := g.pickUser(hasActive); u != nil {
			b := u.current()
			b.version++
			status := pick(g.gen, []string{"Revoked", "Replaced", "revoked", "REPLACED", "Revoked", "Replaced", "Suspended"})
			b.status = knownStatus(status)
			g.send(b, g.closed(b, b.referred, status, b.version), "bond closed as "+status)
		}
	case r < 62: // rebind: the old bond Replaced, a new one created
		if u := g.pickUser(hasActive); u != nil {
			old := u.current()
			old.version++
			old.status = "Replaced"
			g.send(old, g.closed(old, old.referred, "Replaced", old.version), "rebind: the old bond Replaced")
			b := g.newBond(u)
			g.send(b, g.created(b, b.version, b.referrer, b.boundAt), "rebind: the new bond created")
		}
	case r < 70: // a new bond for a user whose bond is closed
		if u := g.pickUser(func(u *referredUser) bool { b := u.current(); return b != nil && b.status != "Active" }); u != nil {
			b := g.newBond(u)
			g.send(b, g.created(b, b.version, b.referrer, b.boundAt), "a new bond after a closed one")
		}
	case r < 78: // stale: an older Version again, under a new MessageId
		if u := g.pickUser(func(u *referredUser) bool { return u.current() != nil }); u != nil {
			b := pick(g.gen, u.bonds)
			v := 1 + int64(g.intn(int(b.version)))
			if b.status == "Active" || g.chance(0.5) {
				g.send(b, g.created(b, min(v, b.version), b.referrer, b.boundAt), "stale bond-created")
			} else {
				g.send(b, g.closed(b, b.referred, "Revoked", min(v, b.version)), "stale bond-closed")
			}
		}
	case r < 82: // closed again with a higher Version: skipped, already closed
		if u := g.pickUser(hasClosed); u != nil {
			b := u.current()
			g.send(b, g.closed(b, b.referred, "Revoked", b.version+1+int64(g.intn(3))), "bond-closed on a closed bond")
		}
	case r < 96: // the same message again
		g.duplicate()
	default: // an event type rewards does not route
		u := &referredUser{id: g.id()}
		b := &genBond{id: g.id(), referred: u.id, referrer: g.id(), version: 1, boundAt: g.clock}
		e := g.created(b, 1, b.referrer, b.boundAt)
		var eventType any = "pin.referral.bond-suspended"
		if b.id[0]&1 == 1 { // half of them (by the bond's random id: no draw of its own)
			eventType = 7 // not a string: unknown too
		}
		unknownType(e, eventType)
		g.emit(e)
	}
}

// send emits e, an event of bond b.
func (g *rewardsGen) send(b *genBond, e *event, note string) {
	e.note = note
	b.sent = append(b.sent, e)
	g.emit(e)
}

// duplicate sends an earlier message again, byte for byte: one that was
// applied or skipped (its mark makes the copy a duplicate), or poison that
// does not depend on the state (dead-lettered again).
func (g *rewardsGen) duplicate() {
	for range 8 {
		if len(g.out) == 0 {
			return
		}
		e := pick(g.gen, g.out)
		if e.want == "" || e.code != "" {
			c := *e
			c.note = "again: " + e.note
			g.emit(&c)
			return
		}
	}
}

func (g *rewardsGen) poisonStep() {
	k := g.kinds[g.next%len(g.kinds)]
	g.next++
	if g.next%len(g.kinds) == 0 { // a new round in another order
		g.rng.Shuffle(len(g.kinds), func(i, j int) { g.kinds[i], g.kinds[j] = g.kinds[j], g.kinds[i] })
	}
	switch k.note {
	case poisonConflict:
		if u := g.pickUser(hasActive); u != nil {
			b := &genBond{id: g.id(), referred: u.id, referrer: g.id(), version: 1, boundAt: g.clock}
			e := g.created(b, 1, b.referrer, b.boundAt)
			e.note, e.want = "poison: "+k.note, k.code
			g.emit(e)
		}
	case poisonTerminal:
		if u := g.pickUser(hasClosed); u != nil {
			b := u.current()
			e := g.created(b, b.version+1, b.referrer, b.boundAt)
			e.note, e.want = "poison: "+k.note, k.code
			g.emit(e)
		}
	case poisonMismatch:
		if u := g.pickUser(hasActive); u != nil {
			b := u.current()
			e := g.closed(b, g.id(), "Revoked", b.version+1)
			e.note, e.want = "poison: "+k.note, k.code
			g.emit(e)
		}
	case poisonOrphan:
		referred := g.id()
		if len(g.users) > 0 && g.chance(0.5) {
			referred = pick(g.gen, g.users).id
		}
		b := &genBond{id: g.id(), referred: referred}
		e := g.closed(b, referred, "Revoked", 2)
		e.note, e.want = "poison: "+k.note, k.code
		g.emit(e)
	default:
		b := &genBond{id: g.id(), referred: g.id(), referrer: g.id(), version: 1, boundAt: g.clock}
		var e *event
		if strings.HasPrefix(k.note, "bond-closed") {
			e = g.closed(b, b.referred, "Revoked", 2)
		} else {
			e = g.created(b, 1, b.referrer, b.boundAt)
		}
		poison(e, k)
		g.emit(e)
	}
}
