package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/demo"
)

const (
	crmInvalid       = "CRM_SELECTION_EVENT_INVALID"
	crmUnknownAction = "CRM_SELECTION_UNKNOWN_ACTION"
	crmLeadNotFound  = "CRM_SELECTION_LEAD_NOT_FOUND"
	outAttached      = "attached"
	outViewed        = "viewed"
	crmUnknownET     = "pin.selections.selection-deleted"
	maxTitleRunes    = 256
)

// selectionShared is a pin.selections.selection-shared as the model
// applies it.
type selectionShared struct {
	selection, agent, investor uuid.UUID
	action                     string // as sent
	title                      string // as sent
	count                      int
	at                         time.Time // OccurredAt
}

// pair is an (executor agent, primary investor) pair: what a selection
// event names, and what finds its lead.
type pair struct{ agent, investor uuid.UUID }

// crmLead is a pair's leads as the run provisions them.
type crmLead struct {
	id, tenant uuid.UUID // the pair's Active lead
	when       provisioning
	// expired is an Expired lead of the pair, inserted at the start
	// (uuid.Nil: none): never the one a selection lands on.
	expired uuid.UUID
}

// feedEntry is a lead_events row.
type feedEntry struct {
	lead, tenant uuid.UUID
	typ          string
	at           time.Time
	selection    uuid.UUID
	title        string
	count        int
	extra        string // payload members beyond the three (and ContractVersion)
}

// leadRow is a leads row.
type leadRow struct {
	tenant, agent, investor uuid.UUID
	status                  string
	lastEventAt             time.Time // zero: NULL
}

// crmExpect is the model's view of the crm run.
type crmExpect struct {
	expectation
	pairs map[pair]crmLead
	feed  map[uuid.UUID]feedEntry // by source_message_id
	leads map[uuid.UUID]leadRow
}

// cutTitle is the title as stored: at most 256 runes.
func cutTitle(s string) string {
	if utf8.RuneCountInString(s) <= maxTitleRunes {
		return s
	}
	r := []rune(s)
	return string(r[:maxTitleRunes])
}

// modelCRM applies the crm spec to the records. The feed is keyed by
// MessageId and last_event_at is a maximum, so the order does not matter
// beyond which copy of a MessageId comes first.
func modelCRM(recs []record, pairs map[pair]crmLead) *crmExpect {
	sortRecords(recs)
	x := &crmExpect{expectation: newExpectation(len(recs)), pairs: pairs,
		feed: map[uuid.UUID]feedEntry{}, leads: map[uuid.UUID]leadRow{}}
	for p, l := range pairs {
		if l.when != never {
			x.leads[l.id] = leadRow{tenant: l.tenant, agent: p.agent, investor: p.investor, status: "Active"}
		}
		if l.expired != uuid.Nil {
			x.leads[l.expired] = leadRow{tenant: l.tenant, agent: p.agent, investor: p.investor, status: "Expired"}
		}
	}
	for _, r := range recs {
		key, done := x.settled(r)
		if done {
			continue
		}
		e := r.ev
		s := e.body.(selectionShared)
		l, ok := pairs[pair{s.agent, s.investor}]
		if !ok || l.when == never {
			x.deadLetter(r, crmLeadNotFound, key)
			continue
		}
		typ, out := "SelectionAttached", outAttached
		if strings.EqualFold(s.action, "Opened") {
			typ, out = "SelectionViewed", outViewed
		}
		x.feed[e.id] = feedEntry{lead: l.id, tenant: l.tenant, typ: typ, at: s.at,
			selection: s.selection, title: cutTitle(s.title), count: s.count}
		if lr := x.leads[l.id]; s.at.After(lr.lastEventAt) {
			lr.lastEventAt = s.at
			x.leads[l.id] = lr
		}
		x.mark(r, key, out)
	}
	return x
}

// compare checks the leads and their feeds against the model.
func (x *crmExpect) compare(t *Tally, leads map[uuid.UUID]leadRow, feed map[uuid.UUID][]feedEntry, unkeyed int) {
	for msg, want := range x.feed {
		got := feed[msg]
		switch {
		case len(got) == 0:
			t.addLost("no feed entry for message %s (lead %s)", msg, want.lead)
			continue
		case len(got) > 1:
			t.addDoubled("%d feed entries for message %s", len(got), msg)
		}
		if g := got[0]; !g.at.Equal(want.at) || !sameEntryButTime(g, want) {
			t.addWrong("feed entry of message %s: %+v, want %+v", msg, g, want)
		}
	}
	for msg, got := range feed {
		if _, ok := x.feed[msg]; !ok {
			t.addWrong("a feed entry the model does not expect: message %s on lead %s (%s)", msg, got[0].lead, got[0].typ)
		}
	}
	if unkeyed > 0 {
		t.addWrong("%d feed entries without a source_message_id", unkeyed)
	}
	for id, want := range x.leads {
		got, ok := leads[id]
		switch {
		case !ok:
			t.addLost("lead %s is gone", id)
		case got.status != want.status || got.tenant != want.tenant:
			t.addWrong("lead %s: status %s, want %s", id, got.status, want.status)
		case got.lastEventAt.Before(want.lastEventAt):
			t.addLost("lead %s: last_event_at %s, want %s", id, fmtTime(got.lastEventAt), fmtTime(want.lastEventAt))
		case !got.lastEventAt.Equal(want.lastEventAt):
			t.addWrong("lead %s: last_event_at %s, want %s", id, fmtTime(got.lastEventAt), fmtTime(want.lastEventAt))
		}
	}
	for id := range leads {
		if _, ok := x.leads[id]; !ok {
			t.addWrong("lead %s: the run did not create it", id)
		}
	}
}

func sameEntryButTime(a, b feedEntry) bool {
	a.at, b.at = time.Time{}, time.Time{}
	return a == b
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "NULL"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// readCRM reads the leads and the feed (by source_message_id; unkeyed
// counts the entries without one).
func readCRM(ctx context.Context, db *sql.DB) (leads map[uuid.UUID]leadRow, feed map[uuid.UUID][]feedEntry, unkeyed int, err error) {
	leads, feed = map[uuid.UUID]leadRow{}, map[uuid.UUID][]feedEntry{}
	rs, err := db.QueryContext(ctx, `SELECT id, tenant_id, executor_agent_user_id, primary_investor_user_id, status, last_event_at FROM leads`)
	if err != nil {
		return nil, nil, 0, err
	}
	for rs.Next() {
		var id uuid.UUID
		var l leadRow
		var last sql.NullTime
		if err := rs.Scan(&id, &l.tenant, &l.agent, &l.investor, &l.status, &last); err != nil {
			rs.Close()
			return nil, nil, 0, err
		}
		if last.Valid {
			l.lastEventAt = last.Time
		}
		leads[id] = l
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, nil, 0, err
	}
	rs, err = db.QueryContext(ctx, `SELECT lead_id, tenant_id, type, occurred_at, source_message_id, payload FROM lead_events`)
	if err != nil {
		return nil, nil, 0, err
	}
	defer rs.Close()
	for rs.Next() {
		var f feedEntry
		var msg uuid.NullUUID
		var payload []byte
		if err := rs.Scan(&f.lead, &f.tenant, &f.typ, &f.at, &msg, &payload); err != nil {
			return nil, nil, 0, err
		}
		var p map[string]json.RawMessage
		_ = json.Unmarshal(payload, &p)
		_ = json.Unmarshal(p["SelectionId"], &f.selection)
		_ = json.Unmarshal(p["SelectionTitle"], &f.title)
		_ = json.Unmarshal(p["PropertyObjectsCount"], &f.count)
		for k, v := range p {
			switch k {
			case "SelectionId", "SelectionTitle", "PropertyObjectsCount":
			case "ContractVersion":
				if string(v) != "1" {
					f.extra += k + "=" + string(v) + " "
				}
			default:
				f.extra += k + " "
			}
		}
		if !msg.Valid {
			unkeyed++
			continue
		}
		feed[msg.UUID] = append(feed[msg.UUID], f)
	}
	return leads, feed, unkeyed, rs.Err()
}

// crmGen makes the crm stream: selections shared and opened over Active
// leads, with titles too long, times out of order, repeated deliveries,
// and poison of every kind the spec knows, including pairs that never
// have an Active lead.
type crmGen struct {
	*gen
	out        []*event
	pairs      []pair // with an Active lead, at the start or late
	nevers     []pair // without one: none at all, or only an Expired lead
	plan       map[pair]crmLead
	selections map[uuid.UUID]pair
	bySel      []uuid.UUID
	kinds      []poisonKind
	next       int
	poison     float64
}

const poisonNoLead = "a selection for a pair without an Active lead"

func crmPoisons() []poisonKind {
	ks := envelopePoisons(crmInvalid)
	p := func(note, member string, v any) poisonKind { return payloadPoison(note, crmInvalid, member, v) }
	ks = append(ks,
		p("SelectionId missing", "SelectionId", dropMember),
		p("SelectionId not a GUID", "SelectionId", "selection-1"),
		p("SelectionId all zeros", "SelectionId", uuid.Nil.String()),
		p("SelectionTitle missing", "SelectionTitle", dropMember),
		p("SelectionTitle empty", "SelectionTitle", ""),
		p("SelectionTitle with a NUL character", "SelectionTitle", "Flats\x00near the park"),
		p("SelectionTitle a number", "SelectionTitle", 12),
		p("PropertyObjectsCount missing", "PropertyObjectsCount", dropMember),
		p("PropertyObjectsCount negative", "PropertyObjectsCount", -1),
		p("PropertyObjectsCount beyond an int", "PropertyObjectsCount", int64(math.MaxInt32)+1),
		p("PropertyObjectsCount a string", "PropertyObjectsCount", "12"),
		p("Action missing", "Action", dropMember),
		p("Action empty", "Action", ""),
		p("Action a number", "Action", 1),
		p("AgentUserId missing", "AgentUserId", dropMember),
		p("AgentUserId not a GUID", "AgentUserId", "agent-1"),
		p("InvestorUserId missing", "InvestorUserId", dropMember),
		p("InvestorUserId all zeros", "InvestorUserId", uuid.Nil.String()),
		p("OccurredAt missing", "OccurredAt", dropMember),
		p("OccurredAt without an offset", "OccurredAt", "2026-11-01T10:00:00"),
		p("OccurredAt not a time", "OccurredAt", "last week"),
		payloadPoison("an unknown Action", crmUnknownAction, "Action", "Forwarded"),
		poisonKind{note: "an unknown Action and a missing title", code: crmInvalid, make: func(b []byte) []byte {
			return mutate(b, func(env map[string]any) {
				p := payloadOf(env)
				p["Action"] = "Forwarded"
				delete(p, "SelectionTitle")
			})
		}},
		poisonKind{note: poisonNoLead, code: crmLeadNotFound},
	)
	return ks
}

var titles = []string{
	"Two-bedroom flats near the park", "Penthouses with a view", "Студии у метро", "Houses with a garden",
	"Квартиры в новостройках", "Lofts downtown", "Family homes", "Investment studios",
}

// generateCRM makes n crm events from seed, and the leads they need.
func generateCRM(seed uint64, n int) ([]*event, map[pair]crmLead, map[uuid.UUID]pair) {
	g := &crmGen{gen: newGen(seed, 0xc4a5e1), kinds: crmPoisons(), plan: map[pair]crmLead{}, selections: map[uuid.UUID]pair{}}
	g.poison = poisonShare(len(g.kinds), n)
	nPairs := max(6, n/40)
	for i := range nPairs {
		p := pair{g.id(), g.id()}
		l := crmLead{id: g.id(), tenant: g.id(), when: atStart}
		if i%30 == 11 || i == 1 {
			l.when = late
		}
		if g.chance(0.1) {
			l.expired = g.id()
		}
		g.plan[p] = l
		g.pairs = append(g.pairs, p)
	}
	for i := range max(2, n/4000) {
		p := pair{g.id(), g.id()}
		l := crmLead{tenant: g.id(), when: never}
		if i%2 == 1 {
			l.expired = g.id() // only an Expired lead: not found all the same
		}
		g.plan[p] = l
		g.nevers = append(g.nevers, p)
	}
	for len(g.out) < n {
		g.step()
	}
	g.out = g.out[:n]
	for i, e := range g.out {
		e.seq = i
	}
	return g.out, g.plan, g.selections
}

func (g *crmGen) emit(e *event) { g.out = append(g.out, e) }

// selection makes a share or an open of a selection of pair p: a new
// selection, or one of p's shared before.
func (g *crmGen) selection(p pair) *event {
	sel := uuid.Nil
	if len(g.bySel) > 0 && g.chance(0.4) {
		s := pick(g.gen, g.bySel)
		if g.selections[s] == p {
			sel = s
		}
	}
	if sel == uuid.Nil {
		sel = g.id()
		g.selections[sel] = p
		g.bySel = append(g.bySel, sel)
	}
	action := "Shared"
	if g.chance(0.35) {
		action = "Opened"
	}
	if g.chance(0.05) {
		action = strings.ToUpper(action)
	}
	title := pick(g.gen, titles)
	switch r := g.intn(100); {
	case r < 4: // too long: cut to 256 characters, kept
		title = strings.Repeat("Квартира у парка · ", 20)
	case r < 5: // exactly 256 characters: kept whole
		title = strings.Repeat("ж", maxTitleRunes)
	}
	count := g.intn(60)
	at := g.now()
	occurred := at
	if g.chance(0.3) { // an older OccurredAt: last_event_at never moves back
		occurred = at.Add(-time.Duration(g.intn(3_600_000)) * time.Millisecond)
	}
	id := g.id()
	e := &event{key: []byte(sel.String()), id: id, route: crm.KeyPrefix,
		value: demo.Envelope(id, crm.EventType, "Selection", sel, at,
			demo.SelectionSharedPayload(sel, p.agent, p.investor, action, title, count, occurred)),
		body: selectionShared{selection: sel, agent: p.agent, investor: p.investor, action: action, title: title, count: count, at: occurred},
		note: "selection " + strings.ToLower(action)}
	if g.chance(0.03) {
		e.value = withContractVersion(e.value, 2)
	}
	return e
}

func (g *crmGen) step() {
	if g.chance(g.poison) {
		g.poisonStep()
		return
	}
	switch r := g.intn(100); {
	case r < 90:
		g.emit(g.selection(pick(g.gen, g.pairs)))
	case r < 99: // the same message again, byte for byte
		if len(g.out) > 0 {
			e := *pick(g.gen, g.out)
			e.note = "again: " + e.note
			g.emit(&e)
		}
	default:
		e := g.selection(pick(g.gen, g.pairs))
		unknownType(e, crmUnknownET)
		g.emit(e)
	}
}

func (g *crmGen) poisonStep() {
	k := g.kinds[g.next%len(g.kinds)]
	g.next++
	if g.next%len(g.kinds) == 0 {
		g.rng.Shuffle(len(g.kinds), func(i, j int) { g.kinds[i], g.kinds[j] = g.kinds[j], g.kinds[i] })
	}
	if k.note == poisonNoLead {
		e := g.selection(pick(g.gen, g.nevers))
		e.note, e.want = "poison: "+k.note, k.code
		g.emit(e)
		return
	}
	e := g.selection(pick(g.gen, g.pairs))
	poison(e, k)
	g.emit(e)
}
