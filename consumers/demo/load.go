package demo

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
)

// Load generates realistic traffic, per topic or mixed: rewards mostly
// creates with some closes and stale deliveries; messenger snapshots of 2–8
// participants changing a little at a time; crm shares and opens over
// existing leads. Chats and leads it needs come from Setup.
type Load struct {
	rng   *rand.Rand
	start time.Time
	n     int
	// newID mints the ids born with an event: every MessageId, a new
	// bond's BondId and referred user, and the bond that replaced a
	// closed one (uuid.New; TimeOrdered).
	newID func() uuid.UUID

	// rewards: open bonds (referred → bond, version) to close later
	bonds []bond
	// messenger: per lead, its chat, version and current members
	leads []*leadState
	// crm: Active pairs
	pairs []pair
}

type bond struct {
	id, referred uuid.UUID
	version      int64
}

type leadState struct {
	lead, chat uuid.UUID
	version    int64
	members    []Participant
}

type pair struct{ lead, agent, investor, tenant uuid.UUID }

var roles = []string{"CoAgent", "Assistant", "Lawyer", "InvestorSecondary", "Responsible"}

// NewLoad prepares traffic over chats lead chats and leads CRM leads.
func NewLoad(seed uint64, chats, leads int) *Load {
	l := &Load{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), start: time.Now().UTC(), newID: uuid.New}
	for i := 0; i < chats; i++ {
		l.leads = append(l.leads, &leadState{lead: uuid.New(), chat: uuid.New(), members: []Participant{
			{uuid.New(), "Executor"}, {uuid.New(), "InvestorPrimary"},
		}})
	}
	for i := 0; i < leads; i++ {
		l.pairs = append(l.pairs, pair{uuid.New(), uuid.New(), uuid.New(), uuid.New()})
	}
	return l
}

// TimeOrdered makes the ids born with an event UUIDv7s (time-ordered,
// ascending in this process) instead of random ones: every MessageId, a
// new bond's BondId, and its referred user's id (a bond is created when
// the referred user signs up through the referral, so the user service
// minted that id moments before); a Replaced close's ReplacedByBondId.
// The ids of referrers, leads, chats, agents and selections stay random:
// minted long before their events. The load's choices (the seeded
// generator's draws) stay the same.
func (l *Load) TimeOrdered() { l.newID = func() uuid.UUID { return uuid.Must(uuid.NewV7()) } }

// Setup provisions the chats and leads the traffic refers to.
func (l *Load) Setup() []Step {
	chats, chatLeads := make([]string, len(l.leads)), make([]string, len(l.leads))
	for i, s := range l.leads {
		chats[i], chatLeads[i] = s.chat.String(), s.lead.String()
	}
	ids, tenants, agents, investors := make([]string, len(l.pairs)), make([]string, len(l.pairs)), make([]string, len(l.pairs)), make([]string, len(l.pairs))
	for i, p := range l.pairs {
		ids[i], tenants[i], agents[i], investors[i] = p.lead.String(), p.tenant.String(), p.agent.String(), p.investor.String()
	}
	return []Step{
		{Say: fmt.Sprintf("provision %d lead chats", len(chats)),
			SQL:     `INSERT INTO chats (id, kind, lead_id) SELECT c, 'Lead', l FROM unnest($1::uuid[], $2::uuid[]) AS u(c, l)`,
			SQLArgs: []any{pq.Array(chats), pq.Array(chatLeads)}},
		{Say: fmt.Sprintf("create %d Active leads", len(ids)),
			SQL:     `INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) SELECT i, t, a, v, 'Active' FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[]) AS u(i, t, a, v)`,
			SQLArgs: []any{pq.Array(ids), pq.Array(tenants), pq.Array(agents), pq.Array(investors)}},
	}
}

func (l *Load) at() time.Time {
	l.n++
	return l.start.Add(time.Duration(l.n) * time.Millisecond)
}

// Next returns the next event of the mix (the three topics in turn).
func (l *Load) Next() Event {
	switch l.n % 3 {
	case 0:
		return l.Rewards()
	case 1:
		if len(l.leads) > 0 {
			return l.Messenger()
		}
	}
	if len(l.pairs) > 0 {
		return l.CRM()
	}
	return l.Rewards()
}

// Rewards: 75 % new bonds, 20 % closes of open bonds, 5 % stale repeats.
func (l *Load) Rewards() Event {
	r := l.rng.IntN(100)
	switch {
	case r < 20 && len(l.bonds) > 0:
		i := l.rng.IntN(len(l.bonds))
		b := l.bonds[i]
		l.bonds[i] = l.bonds[len(l.bonds)-1]
		l.bonds = l.bonds[:len(l.bonds)-1]
		status, by := "Revoked", uuid.Nil
		if l.rng.IntN(2) == 0 {
			status, by = "Replaced", l.newID() // the bond that replaced it: new
		}
		return bondClosed(l.newID(), b.id, b.referred, status, by, b.version+1, l.at())
	case r < 25 && len(l.bonds) > 0:
		b := l.bonds[l.rng.IntN(len(l.bonds))]
		return bondCreated(l.newID(), b.id, b.referred, uuid.New(), b.version, l.at())
	}
	b := bond{l.newID(), l.newID(), 1}
	l.bonds = append(l.bonds, b)
	if len(l.bonds) > 10000 { // keep memory flat on long runs
		l.bonds = l.bonds[len(l.bonds)-10000:]
	}
	return bondCreated(l.newID(), b.id, b.referred, uuid.New(), 1, l.at())
}

// Messenger: the next snapshot of a random lead: add, remove or re-role one
// member, keeping 2–8 members.
func (l *Load) Messenger() Event {
	s := l.leads[l.rng.IntN(len(l.leads))]
	s.version++
	var delta []Change
	switch op := l.rng.IntN(3); {
	case (op == 0 || len(s.members) <= 2) && len(s.members) < 8:
		p := Participant{uuid.New(), roles[l.rng.IntN(len(roles))]}
		s.members = append(s.members, p)
		delta = []Change{{p.UserID, "Added", p.Role, ""}}
	case op == 1 && len(s.members) > 2:
		i := 2 + l.rng.IntN(len(s.members)-2) // executor and investor stay
		p := s.members[i]
		s.members = append(s.members[:i:i], s.members[i+1:]...)
		delta = []Change{{p.UserID, "Removed", p.Role, ""}}
	default:
		if len(s.members) > 2 {
			i := 2 + l.rng.IntN(len(s.members)-2)
			prev := s.members[i].Role
			s.members[i].Role = roles[l.rng.IntN(len(roles))]
			delta = []Change{{s.members[i].UserID, "RoleChanged", s.members[i].Role, prev}}
		}
	}
	active := append([]Participant(nil), s.members...)
	return leadParticipantsChanged(l.newID(), s.lead, s.version, active, delta, l.at())
}

// CRM: a share (70 %) or an open (30 %) of a selection over an Active lead.
func (l *Load) CRM() Event {
	p := l.pairs[l.rng.IntN(len(l.pairs))]
	action := "Shared"
	if l.rng.IntN(10) < 3 {
		action = "Opened"
	}
	return selectionShared(l.newID(), uuid.New(), p.agent, p.investor, action, "Selection", 1+l.rng.IntN(30), l.at())
}
