package chaos

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/messenger"
)

const (
	msgInvalid         = "MSG_LEAD_PARTICIPANTS_INVALID"
	msgNotProvisioned  = "MSG_CHAT_NOT_PROVISIONED"
	outSynced          = "synced"
	factJoined         = "ParticipantJoined"
	factLeft           = "ParticipantLeft"
	factRoleChanged    = "ParticipantRoleChanged"
	messengerUnknownET = "pin.crm.lead-archived"
)

// provisioning says when a lead's chat (or a CRM pair's lead) is created
// by the component that owns it.
type provisioning int

const (
	atStart provisioning = iota // before anything is produced
	late                        // during the run, once a message waits for it
	never                       // never: its messages end in the DLQ
)

// member is a participant as a snapshot names it.
type member struct {
	user uuid.UUID
	role string
}

// participantsChanged is a pin.crm.lead-participants-changed as the model
// applies it.
type participantsChanged struct {
	lead    uuid.UUID
	version int64
	target  []member // ActiveParticipants as sent
	at      time.Time
}

var knownRoles = []string{"Executor", "Responsible", "CoAgent", "Assistant", "Lawyer", "InvestorPrimary", "InvestorSecondary"}

// storedRole is how a role is stored: a known role in the spec's spelling
// (matched case-insensitively), an unknown one as it came.
func storedRole(r string) string {
	for _, k := range knownRoles {
		if strings.EqualFold(r, k) {
			return k
		}
	}
	return r
}

// fold is a snapshot's target set: one entry per user (exact repeats
// folded), roles as stored.
func fold(target []member) map[uuid.UUID]string {
	out := make(map[uuid.UUID]string, len(target))
	for _, m := range target {
		if _, ok := out[m.user]; !ok {
			out[m.user] = storedRole(m.role)
		}
	}
	return out
}

// chatFact is a chat_events row.
type chatFact struct {
	msg  uuid.UUID
	typ  string
	user uuid.UUID
	role string
	prev string // "" when NULL
	at   time.Time
	chat uuid.UUID
}

func (f chatFact) key() string { return f.msg.String() + "/" + f.typ + "/" + f.user.String() }

func (f chatFact) same(o chatFact) bool {
	return f.typ == o.typ && f.user == o.user && f.role == o.role && f.prev == o.prev && f.at.Equal(o.at)
}

// chatUpdate is a chat_updates row: recipients and revoked, sorted.
type chatUpdate struct{ recipients, revoked string }

func newChatUpdate(recipients, revoked []uuid.UUID) chatUpdate {
	return chatUpdate{recipients: sortedIDs(recipients), revoked: sortedIDs(revoked)}
}

func sortedIDs(ids []uuid.UUID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

// chatState is a lead chat as the model or the database has it.
type chatState struct {
	version int64 // lead_member_version; 0: NULL
	applied int64 // row_version
	members map[uuid.UUID]*chatMember
	facts   []chatFact
	updates []chatUpdate
}

type chatMember struct {
	role   string
	active bool
}

func newChatState() *chatState { return &chatState{members: map[uuid.UUID]*chatMember{}} }

// apply reconciles the chat's members with snapshot p of message msg
// (spec steps 5–6): the facts and the chat_updates row it writes (none
// when the membership does not change), the version, the row's version.
func (c *chatState) apply(msg uuid.UUID, p participantsChanged) {
	target := fold(p.target)
	var facts []chatFact
	var recipients, revoked []uuid.UUID
	for u, role := range target {
		recipients = append(recipients, u)
		m, ok := c.members[u]
		switch {
		case !ok || !m.active:
			facts = append(facts, chatFact{msg: msg, typ: factJoined, user: u, role: role, at: p.at})
			c.members[u] = &chatMember{role: role, active: true}
		case !strings.EqualFold(m.role, role):
			facts = append(facts, chatFact{msg: msg, typ: factRoleChanged, user: u, role: role, prev: m.role, at: p.at})
			m.role = role
		}
	}
	for u, m := range c.members {
		if _, ok := target[u]; !ok && m.active {
			facts = append(facts, chatFact{msg: msg, typ: factLeft, user: u, role: m.role, at: p.at})
			m.active = false
			revoked = append(revoked, u)
		}
	}
	c.version = p.version
	c.applied++
	if len(facts) > 0 {
		c.facts = append(c.facts, facts...)
		c.updates = append(c.updates, newChatUpdate(recipients, revoked))
	}
}

// messengerLead is what the model knows of a lead besides its messages.
type messengerLead struct {
	chat uuid.UUID
	when provisioning
}

// messengerExpect is the model's view of the messenger run.
type messengerExpect struct {
	expectation
	leads map[uuid.UUID]messengerLead
	// chats: the expected state of every chat provisioned at the start.
	chats map[uuid.UUID]*chatState
	// lateMsgs: the valid messages of each lead whose chat came late,
	// by MessageId: applied in an order the run decides.
	lateMsgs map[uuid.UUID]map[uuid.UUID]participantsChanged
}

// modelMessenger applies the messenger spec to the records in partition
// order (its key, LeadId, keeps a lead's snapshots in one partition).
func modelMessenger(recs []record, leads map[uuid.UUID]messengerLead) *messengerExpect {
	sortRecords(recs)
	x := &messengerExpect{expectation: newExpectation(len(recs)), leads: leads,
		chats: map[uuid.UUID]*chatState{}, lateMsgs: map[uuid.UUID]map[uuid.UUID]participantsChanged{}}
	for id, l := range leads {
		switch l.when {
		case atStart:
			x.chats[id] = newChatState()
		case late:
			x.lateMsgs[id] = map[uuid.UUID]participantsChanged{}
		}
	}
	for _, r := range recs {
		key, done := x.settled(r)
		if done {
			continue
		}
		e := r.ev
		p := e.body.(participantsChanged)
		l, ok := leads[p.lead]
		switch {
		case !ok || l.when == never:
			x.deadLetter(r, msgNotProvisioned, key) // no mark: a copy waits and ends there too
			continue
		case l.when == late:
			x.lateMsgs[p.lead][e.id] = p
			x.mark(r, key, outSynced, outStale)
		default:
			c := x.chats[p.lead]
			if p.version <= c.version {
				x.mark(r, key, outStale)
			} else {
				c.apply(e.id, p)
				x.mark(r, key, outSynced)
			}
		}
	}
	return x
}

// compare checks the chats against the model.
func (x *messengerExpect) compare(t *Tally, got map[uuid.UUID]*chatState, chatLead map[uuid.UUID]uuid.UUID, marks map[string]string) {
	for chat, lead := range chatLead {
		l, ok := x.leads[lead]
		if !ok || l.chat != chat {
			t.addWrong("chat %s of lead %s: the run did not provision it", chat, lead)
		}
	}
	for lead, l := range x.leads {
		g := got[l.chat]
		switch l.when {
		case never:
			continue
		case atStart:
			if g == nil {
				t.addLost("the chat of lead %s is gone", lead)
				continue
			}
			compareChat(t, lead, x.chats[lead], g)
		case late:
			if g == nil {
				t.addLost("the chat of lead %s was never provisioned", lead)
				continue
			}
			x.compareLate(t, lead, g, marks)
		}
	}
}

// compareChat compares a chat's database state with the model's.
func compareChat(t *Tally, lead uuid.UUID, want, got *chatState) {
	switch {
	case got.version < want.version:
		t.addLost("lead %s: lead_member_version %d, want %d", lead, got.version, want.version)
	case got.version > want.version:
		t.addWrong("lead %s: lead_member_version %d, want %d", lead, got.version, want.version)
	}
	if got.applied != want.applied && got.version == want.version {
		t.addWrong("lead %s: row_version %d, want %d (one per snapshot applied)", lead, got.applied, want.applied)
	}
	compareMembers(t, lead, want.members, got.members)
	compareFacts(t, lead, want.facts, got.facts)
	compareUpdates(t, lead, want.updates, got.updates)
}

func compareMembers(t *Tally, lead uuid.UUID, want, got map[uuid.UUID]*chatMember) {
	for u, w := range want {
		g, ok := got[u]
		switch {
		case !ok:
			t.addLost("lead %s: member %s (%s) has no chat_participants row", lead, u, w.role)
		case g.active != w.active:
			if w.active {
				t.addLost("lead %s: member %s is removed, want active (%s)", lead, u, w.role)
			} else {
				t.addWrong("lead %s: member %s is active (%s), want removed", lead, u, g.role)
			}
		case g.role != w.role:
			t.addWrong("lead %s: member %s has role %s, want %s", lead, u, g.role, w.role)
		}
	}
	for u, g := range got {
		if _, ok := want[u]; !ok {
			t.addWrong("lead %s: user %s (%s) is a member the model does not know", lead, u, g.role)
		}
	}
}

func compareFacts(t *Tally, lead uuid.UUID, want, got []chatFact) {
	byKey := map[string][]chatFact{}
	for _, f := range got {
		byKey[f.key()] = append(byKey[f.key()], f)
	}
	for _, w := range want {
		gs := byKey[w.key()]
		delete(byKey, w.key())
		switch {
		case len(gs) == 0:
			t.addLost("lead %s: no %s fact of user %s for message %s", lead, w.typ, w.user, w.msg)
			continue
		case len(gs) > 1:
			t.addDoubled("lead %s: %d %s facts of user %s for message %s", lead, len(gs), w.typ, w.user, w.msg)
		}
		if !gs[0].same(w) {
			t.addWrong("lead %s: %s fact of user %s for message %s: role %s prev %q at %s, want role %s prev %q at %s", lead, w.typ, w.user, w.msg,
				gs[0].role, gs[0].prev, gs[0].at.Format(time.RFC3339Nano), w.role, w.prev, w.at.Format(time.RFC3339Nano))
		}
	}
	for _, gs := range byKey {
		t.addWrong("lead %s: a %s fact of user %s for message %s the model does not expect (%d)", lead, gs[0].typ, gs[0].user, gs[0].msg, len(gs))
	}
}

func compareUpdates(t *Tally, lead uuid.UUID, want, got []chatUpdate) {
	left := map[chatUpdate]int{}
	for _, u := range want {
		left[u]++
	}
	extra := 0
	for _, u := range got {
		if left[u] > 0 {
			left[u]--
			continue
		}
		extra++
	}
	missing := 0
	for _, n := range left {
		missing += n
	}
	switch {
	case missing > 0 && extra > 0:
		t.addWrong("lead %s: %d chat_updates rows differ from the model's", lead, max(missing, extra))
	case missing > 0:
		t.addLost("lead %s: %d chat_updates rows missing", lead, missing)
	case extra > 0 && len(got) > len(want):
		t.addDoubled("lead %s: %d chat_updates rows more than the %d changes", lead, extra, len(want))
	}
}

// compareLate checks a chat provisioned during the run. Its snapshots may
// have waited (parked) and applied out of line, so which of them applied
// is the run's: the version guard lets each applied one be newer than the
// last. The check rebuilds that history from the feed: the messages with
// facts, by Version, must each state exactly the change from the one
// before (nothing lost, nothing twice), and the chat must end at the
// newest snapshot.
func (x *messengerExpect) compareLate(t *Tally, lead uuid.UUID, got *chatState, marks map[string]string) {
	msgs := x.lateMsgs[lead]
	if len(msgs) == 0 {
		want := newChatState()
		compareChat(t, lead, want, got)
		return
	}
	var newest participantsChanged
	for _, p := range msgs {
		if p.version > newest.version {
			newest = p
		}
	}
	factsOf := map[uuid.UUID][]chatFact{}
	for _, f := range got.facts {
		if _, ok := msgs[f.msg]; !ok {
			t.addWrong("lead %s: a fact for message %s, which is not one of its snapshots", lead, f.msg)
			continue
		}
		factsOf[f.msg] = append(factsOf[f.msg], f)
	}
	order := make([]uuid.UUID, 0, len(factsOf))
	for m := range factsOf {
		order = append(order, m)
	}
	slices.SortFunc(order, func(a, b uuid.UUID) int { return int(msgs[a].version - msgs[b].version) })
	want := newChatState()
	for _, m := range order {
		if marks[messenger.KeyPrefix+m.String()] != outSynced {
			t.addWrong("lead %s: message %s has facts, its mark says %q", lead, m, marks[messenger.KeyPrefix+m.String()])
		}
		want.apply(m, msgs[m])
	}
	if newest.version > want.version {
		// The newest snapshot changed nothing after the last one with
		// facts: it applied without facts.
		want.version = newest.version
		if !holds(want.members, newest) {
			t.addLost("lead %s: its newest snapshot (v%d) changes the membership, yet no message of it has facts", lead, newest.version)
		}
	}
	switch {
	case got.version < newest.version:
		t.addLost("lead %s: lead_member_version %d, want %d (its newest snapshot)", lead, got.version, newest.version)
	case got.version > newest.version:
		t.addWrong("lead %s: lead_member_version %d, want %d", lead, got.version, newest.version)
	}
	if got.applied < int64(len(order)) || got.applied > int64(len(msgs)) {
		t.addWrong("lead %s: row_version %d, want between %d and %d", lead, got.applied, len(order), len(msgs))
	}
	compareMembers(t, lead, want.members, got.members)
	compareFacts(t, lead, want.facts, got.facts)
	compareUpdates(t, lead, want.updates, got.updates)
}

// holds reports whether members are exactly p's target set.
func holds(members map[uuid.UUID]*chatMember, p participantsChanged) bool {
	target := fold(p.target)
	n := 0
	for u, m := range members {
		if !m.active {
			continue
		}
		n++
		if role, ok := target[u]; !ok || !strings.EqualFold(role, m.role) {
			return false
		}
	}
	return n == len(target)
}

// readMessenger reads every lead chat: state by chat id, and the chat's
// lead.
func readMessenger(ctx context.Context, db *sql.DB) (map[uuid.UUID]*chatState, map[uuid.UUID]uuid.UUID, error) {
	chats := map[uuid.UUID]*chatState{}
	leads := map[uuid.UUID]uuid.UUID{}
	rs, err := db.QueryContext(ctx, `SELECT id, lead_id, coalesce(lead_member_version, 0), row_version FROM chats WHERE kind = 'Lead'`)
	if err != nil {
		return nil, nil, err
	}
	for rs.Next() {
		var id, lead uuid.UUID
		c := newChatState()
		if err := rs.Scan(&id, &lead, &c.version, &c.applied); err != nil {
			rs.Close()
			return nil, nil, err
		}
		chats[id], leads[id] = c, lead
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, nil, err
	}
	rs, err = db.QueryContext(ctx, `SELECT chat_id, user_id, role, removed_at IS NULL FROM chat_participants`)
	if err != nil {
		return nil, nil, err
	}
	for rs.Next() {
		var chat, user uuid.UUID
		m := &chatMember{}
		if err := rs.Scan(&chat, &user, &m.role, &m.active); err != nil {
			rs.Close()
			return nil, nil, err
		}
		if c := chats[chat]; c != nil {
			c.members[user] = m
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, nil, err
	}
	rs, err = db.QueryContext(ctx, `SELECT chat_id, type, user_id, role, coalesce(previous_role, ''), occurred_at, source_message_id FROM chat_events`)
	if err != nil {
		return nil, nil, err
	}
	for rs.Next() {
		var f chatFact
		if err := rs.Scan(&f.chat, &f.typ, &f.user, &f.role, &f.prev, &f.at, &f.msg); err != nil {
			rs.Close()
			return nil, nil, err
		}
		if c := chats[f.chat]; c != nil {
			c.facts = append(c.facts, f)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, nil, err
	}
	rs, err = db.QueryContext(ctx, `SELECT chat_id, recipient_user_ids::text[], revoked_user_ids::text[] FROM chat_updates`)
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	for rs.Next() {
		var chat uuid.UUID
		var rec, rev []string
		if err := rs.Scan(&chat, pq.Array(&rec), pq.Array(&rev)); err != nil {
			return nil, nil, err
		}
		slices.Sort(rec)
		slices.Sort(rev)
		if c := chats[chat]; c != nil {
			c.updates = append(c.updates, chatUpdate{recipients: strings.Join(rec, ","), revoked: strings.Join(rev, ",")})
		}
	}
	return chats, leads, rs.Err()
}

// messengerGen makes the messenger stream: lead chats whose members join,
// leave, change roles and hand over, snapshot by snapshot, with snapshots
// out of order, stale and repeated, and poison of every kind the spec
// knows, including snapshots for chats that are never provisioned.
type messengerGen struct {
	*gen
	out    []*event
	leads  []*genLead // chats provisioned at the start or late
	nevers []*genLead // chats never provisioned
	plan   map[uuid.UUID]messengerLead
	kinds  []poisonKind
	next   int
	poison float64
}

type genLead struct {
	id, chat uuid.UUID
	version  int64
	members  []member // current, roles in the spec's spelling
	removed  []member
	sent     []*event // valid snapshots sent, for stale copies
}

const poisonNeverProvisioned = "a snapshot for a chat never provisioned"

func messengerPoisons() []poisonKind {
	ks := envelopePoisons(msgInvalid)
	p := func(note, member string, v any) poisonKind { return payloadPoison(note, msgInvalid, member, v) }
	one := func(m map[string]any) []any { return []any{m} }
	uid := "00000000-0000-4000-8000-000000000001"
	ks = append(ks,
		p("LeadId missing", "LeadId", dropMember),
		p("LeadId not a UUID", "LeadId", "lead-1"),
		p("LeadId all zeros", "LeadId", uuid.Nil.String()),
		p("Version missing", "Version", dropMember),
		p("Version 0", "Version", 0),
		p("Version negative", "Version", -2),
		p("Version a string", "Version", "5"),
		p("ChangedAt missing", "ChangedAt", dropMember),
		p("ChangedAt not a time", "ChangedAt", "yesterday"),
		p("ActiveParticipants missing", "ActiveParticipants", dropMember),
		p("ActiveParticipants null", "ActiveParticipants", nil),
		p("ActiveParticipants empty", "ActiveParticipants", []any{}),
		p("ActiveParticipants an object", "ActiveParticipants", map[string]any{"UserId": uid, "Role": "Executor"}),
		p("a null member", "ActiveParticipants", []any{nil}),
		p("a member without UserId", "ActiveParticipants", one(map[string]any{"Role": "Executor"})),
		p("a member with the nil UserId", "ActiveParticipants", one(map[string]any{"UserId": uuid.Nil.String(), "Role": "Executor"})),
		p("a member without Role", "ActiveParticipants", one(map[string]any{"UserId": uid})),
		p("a member with a Role of 33 characters", "ActiveParticipants", one(map[string]any{"UserId": uid, "Role": strings.Repeat("R", 33)})),
		p("a Role that is a number", "ActiveParticipants", one(map[string]any{"UserId": uid, "Role": 3})),
		p("the same user twice with different roles", "ActiveParticipants",
			[]any{map[string]any{"UserId": uid, "Role": "Executor"}, map[string]any{"UserId": uid, "Role": "Lawyer"}}),
		p("Participants not a list", "Participants", "Added"),
		p("Participants missing", "Participants", dropMember),
		p("Participants null", "Participants", nil),
		p("a delta entry without UserId", "Participants", one(map[string]any{"ChangeType": "Added", "Role": "Lawyer"})),
		poisonKind{note: poisonNeverProvisioned, code: msgNotProvisioned},
	)
	return ks
}

// generateMessenger makes n messenger events from seed, and the lead
// chats they need: provisioned at the start, late, or never.
func generateMessenger(seed uint64, n int) ([]*event, map[uuid.UUID]messengerLead) {
	g := &messengerGen{gen: newGen(seed, 0x3e55e6), kinds: messengerPoisons(), plan: map[uuid.UUID]messengerLead{}}
	g.poison = poisonShare(len(g.kinds), n)
	nLeads := max(8, n/15)
	for i := range nLeads {
		l := &genLead{id: g.id(), chat: g.id()}
		when := atStart
		if i%30 == 7 || i == 1 { // about 3 %, and at least one
			when = late
		}
		g.plan[l.id] = messengerLead{chat: l.chat, when: when}
		g.leads = append(g.leads, l)
	}
	for range max(1, n/2000) {
		l := &genLead{id: g.id(), chat: g.id()}
		g.plan[l.id] = messengerLead{chat: l.chat, when: never}
		g.nevers = append(g.nevers, l)
	}
	for len(g.out) < n {
		g.step()
	}
	g.out = g.out[:n]
	for i, e := range g.out {
		e.seq = i
	}
	return g.out, g.plan
}

func (g *messengerGen) emit(e *event) { g.out = append(g.out, e) }

var extraRoles = []string{"CoAgent", "Assistant", "Lawyer", "InvestorSecondary", "Responsible"}

// snapshot builds the message of l's current state as version v, with
// the delta given. The sent ActiveParticipants may spell roles in another
// case, repeat a member exactly, or name a role the spec does not know.
func (g *messengerGen) snapshot(l *genLead, delta []demo.Change) *event {
	at := g.now()
	id := g.id()
	sent := make([]member, 0, len(l.members)+1)
	for _, m := range l.members {
		r := m.role
		if g.chance(0.05) {
			r = strings.ToLower(r)
		}
		sent = append(sent, member{m.user, r})
	}
	if g.chance(0.03) && len(sent) > 0 { // an exact repeat: folded
		sent = append(sent, sent[g.intn(len(sent))])
	}
	g.rng.Shuffle(len(sent), func(i, j int) { sent[i], sent[j] = sent[j], sent[i] })
	active := make([]demo.Participant, len(sent))
	for i, m := range sent {
		active[i] = demo.Participant{UserID: m.user, Role: m.role}
	}
	if g.chance(0.03) {
		delta = append(delta, demo.Change{UserID: g.id(), ChangeType: "Teleported", Role: "Lawyer"})
	}
	if g.chance(0.05) {
		delta = nil // an empty delta: membership still follows ActiveParticipants
	}
	if delta == nil {
		delta = []demo.Change{}
	}
	p := demo.LeadParticipantsPayload(l.id, l.version, active, delta, at)
	p["TenantId"] = g.id()
	e := &event{key: []byte(l.id.String()), id: id, route: messenger.KeyPrefix,
		value: demo.Envelope(id, messenger.EventType, "Lead", l.id, at, p),
		body:  participantsChanged{lead: l.id, version: l.version, target: sent, at: at}}
	if g.chance(0.03) {
		e.value = withContractVersion(e.value, 2)
	}
	return e
}

// change moves l to its next membership and returns the delta that says
// so (which only shapes the facts' wording; the consumer trusts
// ActiveParticipants).
func (g *messengerGen) change(l *genLead) []demo.Change {
	if len(l.members) == 0 { // a new lead: executor and primary investor
		l.members = []member{{g.id(), "Executor"}, {g.id(), "InvestorPrimary"}}
		return []demo.Change{{UserID: l.members[0].user, ChangeType: "Added", Role: "Executor"},
			{UserID: l.members[1].user, ChangeType: "Added", Role: "InvestorPrimary"}}
	}
	r := g.intn(100)
	switch {
	case r < 35 && len(l.members) < 8: // someone joins
		role := pick(g.gen, extraRoles)
		if g.chance(0.04) {
			role = "Notary" // unknown: stored as it came
		}
		m := member{g.id(), role}
		l.members = append(l.members, m)
		return []demo.Change{{UserID: m.user, ChangeType: "Added", Role: role}}
	case r < 45 && len(l.removed) > 0 && len(l.members) < 8: // someone comes back
		i := g.intn(len(l.removed))
		m := l.removed[i]
		l.removed = slices.Delete(l.removed, i, i+1)
		m.role = pick(g.gen, extraRoles)
		l.members = append(l.members, m)
		return []demo.Change{{UserID: m.user, ChangeType: "Added", Role: m.role}}
	case r < 70 && len(l.members) > 1: // someone leaves (a dismissal cascade alike)
		i := g.intn(len(l.members))
		m := l.members[i]
		l.members = slices.Delete(l.members, i, i+1)
		l.removed = append(l.removed, m)
		return []demo.Change{{UserID: m.user, ChangeType: "Removed", Role: m.role}}
	case r < 85: // a role changes
		i := g.intn(len(l.members))
		prev := l.members[i].role
		next := pick(g.gen, extraRoles)
		l.members[i].role = next
		return []demo.Change{{UserID: l.members[i].user, ChangeType: "RoleChanged", Role: next, PreviousRole: prev}}
	case r < 93: // hand-over: the executor leaves, another takes over
		var delta []demo.Change
		for i := 0; i < len(l.members); i++ {
			if l.members[i].role == "Executor" {
				old := l.members[i]
				l.members = slices.Delete(l.members, i, i+1)
				l.removed = append(l.removed, old)
				delta = append(delta, demo.Change{UserID: old.user, ChangeType: "Removed", Role: "Executor"})
				break
			}
		}
		if len(l.members) > 0 && g.chance(0.5) {
			i := g.intn(len(l.members))
			prev := l.members[i].role
			l.members[i].role = "Executor"
			return append(delta, demo.Change{UserID: l.members[i].user, ChangeType: "ExecutorChanged", Role: "Executor", PreviousRole: prev})
		}
		m := member{g.id(), "Executor"}
		l.members = append(l.members, m)
		return append(delta, demo.Change{UserID: m.user, ChangeType: "ExecutorChanged", Role: "Executor"})
	default: // a newer Version that changes nothing
		return []demo.Change{}
	}
}

func (g *messengerGen) step() {
	if g.chance(g.poison) {
		g.poisonStep()
		return
	}
	l := pick(g.gen, g.leads)
	r := g.intn(100)
	switch {
	case r < 80:
		l.version += 1 + int64(g.intn(3)/2) // mostly +1, sometimes a gap
		e := g.snapshot(l, g.change(l))
		e.note = "snapshot"
		if g.chance(0.08) { // reordered: the next snapshot overtakes it
			l.version++
			next := g.snapshot(l, g.change(l))
			next.note = "snapshot that overtook the one before"
			e.note = "snapshot overtaken by the next one (stale)"
			g.send(l, next)
		}
		g.send(l, e)
	case r < 86 && len(l.sent) > 0: // an old snapshot again, under a new MessageId
		old := pick(g.gen, l.sent)
		e := *old
		e.id = g.id()
		e.value = mutate(old.value, func(env map[string]any) { env["MessageId"] = e.id.String() })
		e.note = "an older snapshot again, new MessageId (stale)"
		g.emit(&e)
	case r < 98:
		g.duplicate()
	default:
		e := g.snapshot(l, nil)
		unknownType(e, messengerUnknownET)
		g.emit(e)
	}
}

func (g *messengerGen) send(l *genLead, e *event) {
	l.sent = append(l.sent, e)
	g.emit(e)
}

// duplicate sends an earlier message again, byte for byte.
func (g *messengerGen) duplicate() {
	if len(g.out) == 0 {
		return
	}
	e := *pick(g.gen, g.out)
	e.note = "again: " + e.note
	g.emit(&e)
}

func (g *messengerGen) poisonStep() {
	k := g.kinds[g.next%len(g.kinds)]
	g.next++
	if g.next%len(g.kinds) == 0 {
		g.rng.Shuffle(len(g.kinds), func(i, j int) { g.kinds[i], g.kinds[j] = g.kinds[j], g.kinds[i] })
	}
	if k.note == poisonNeverProvisioned {
		l := pick(g.gen, g.nevers)
		l.version++
		e := g.snapshot(l, g.change(l))
		e.note, e.want = "poison: "+k.note, k.code
		g.emit(e)
		return
	}
	// A broken snapshot of a lead whose chat exists, at the Version it
	// has: the consumer must refuse it (validation comes before the
	// version guard), and one that it failed to refuse would be skipped
	// as stale rather than change the chat, so that such a failure shows
	// as itself and not as a change of membership. A lead without a
	// snapshot yet, or whose chat comes late, would apply it: a lead
	// without a chat stands in.
	l := pick(g.gen, g.nevers)
	for range 8 {
		if c := pick(g.gen, g.leads); c.version > 0 && g.plan[c.id].when == atStart {
			l = c
			break
		}
	}
	e := g.snapshot(l, []demo.Change{{UserID: g.id(), ChangeType: "Added", Role: "Lawyer"}})
	poison(e, k)
	g.emit(e)
}

// String is a lead's provisioning, for messages.
func (p provisioning) String() string {
	switch p {
	case atStart:
		return "at the start"
	case late:
		return "late"
	}
	return "never"
}
