package demo

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/messenger"
	"github.com/pin-platform/pin/consumers/rewards"
)

// A Step of the scenario: produce events, or write to the database what
// another component would (provision a chat, create a lead), optionally
// after a pause.
type Step struct {
	Say     string        // printed before the step
	After   time.Duration // wait before the step
	Events  []Event
	SQL     string
	SQLArgs []any
}

// Scenario is the scripted demo of `make run`: every path of the three
// consumers, with fresh ids on each run so that it can be replayed over
// kept data, and the outcome it must reach.
type Scenario struct {
	Setup []Step // provisioning before anything is produced
	Steps []Step

	// ids the expectations look at
	bondA, bondB, bondC, referred1, referred2 uuid.UUID
	lead1, lead2, chat1, chat2                uuid.UUID
	agent1, investor1, agent2, coAgent        uuid.UUID
	crmLeadA, crmLeadB                        uuid.UUID
	agentA, investorA, agentB, investorB      uuid.UUID

	// DLQ is the dead letters the scenario must produce, by DLQ topic and
	// code: checked against the messages whose source offsets are this
	// run's.
	DLQ map[string]map[string]int
}

// NewScenario builds a scenario with fresh ids.
func NewScenario(now time.Time) *Scenario {
	s := &Scenario{}
	for _, p := range []*uuid.UUID{&s.bondA, &s.bondB, &s.bondC, &s.referred1, &s.referred2,
		&s.lead1, &s.lead2, &s.chat1, &s.chat2, &s.agent1, &s.investor1, &s.agent2, &s.coAgent,
		&s.crmLeadA, &s.crmLeadB, &s.agentA, &s.investorA, &s.agentB, &s.investorB} {
		*p = uuid.New()
	}
	t := func(sec int) time.Time { return now.Add(time.Duration(sec) * time.Second) }
	referrer := uuid.New()
	tenant := uuid.New()

	s.Setup = []Step{
		{Say: "provision the lead chat of lead 1 (a provisioning consumer's job)",
			SQL: `INSERT INTO chats (id, kind, lead_id) VALUES ($1, 'Lead', $2)`, SQLArgs: []any{s.chat1, s.lead1}},
		{Say: "create the Active lead A of (agent A, investor A) (the CRM API's job)",
			SQL:     `INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, $2, $3, $4, 'Active')`,
			SQLArgs: []any{s.crmLeadA, tenant, s.agentA, s.investorA}},
	}

	// rewards: created, duplicate, stale, rebind (closed Replaced + created),
	// revoke, and two poison messages.
	created := BondCreated(s.bondA, s.referred1, referrer, 1, t(0)).With("bond A created for referred user 1")
	poisonBond := BondCreated(uuid.Nil, s.referred2, referrer, 1, t(5)).With("poison: empty BondId → REWARDS_BOND_EVENT_INVALID")
	poisonBond.Value = []byte(strings.Replace(string(poisonBond.Value), `"BondId":"00000000-0000-0000-0000-000000000000"`, `"BondId":""`, 1))
	rewardsEvents := []Event{
		created,
		created.Again("the same message again → skipped-duplicate"),
		BondCreated(s.bondA, s.referred1, referrer, 1, t(1)).With("bond A created again, same Version → skipped-stale"),
		BondClosed(s.bondA, s.referred1, "Replaced", s.bondB, 2, t(2)).With("rebind: bond A closed as Replaced"),
		BondCreated(s.bondB, s.referred1, uuid.New(), 1, t(3)).With("rebind: bond B created for referred user 1"),
		BondCreated(s.bondC, s.referred2, referrer, 1, t(3)).With("bond C created for referred user 2"),
		BondClosed(s.bondC, s.referred2, "revoked", uuid.Nil, 2, t(4)).With("bond C revoked (enum matched case-insensitively)"),
		BondClosed(s.bondC, s.referred2, "Revoked", uuid.Nil, 3, t(5)).With("bond C closed again, a newer Version → skipped-already-closed"),
		poisonBond,
		BondClosed(uuid.New(), s.referred2, "Revoked", uuid.Nil, 3, t(6)).With("poison: closed for an unknown bond → 3 re-reads → REWARDS_BOND_EVENT_ORPHAN_CLOSED"),
	}

	// messenger: members join, one is re-roled then removed, a stale
	// snapshot, a poison snapshot, and an event that waits for its chat.
	exec := Participant{s.agent1, "Executor"}
	inv := Participant{s.investor1, "InvestorPrimary"}
	co := Participant{s.agent2, "CoAgent"}
	asst := Participant{s.agent2, "Assistant"}
	v3 := LeadParticipantsChanged(s.lead1, 3, []Participant{exec, inv, asst},
		[]Change{{s.agent2, "RoleChanged", "Assistant", "CoAgent"}}, t(2))
	stale := v3
	stale.MessageID = uuid.New()
	stale.Value = []byte(strings.Replace(string(v3.Value), v3.MessageID.String(), stale.MessageID.String(), 1))
	joined := LeadParticipantsChanged(s.lead1, 1, []Participant{exec, inv},
		[]Change{{s.agent1, "Added", "Executor", ""}, {s.investor1, "Added", "InvestorPrimary", ""}}, t(0)).
		With("lead 1: executor and investor join")
	messengerEvents := []Event{
		joined,
		joined.Again("the same message again → skipped-duplicate"),
		LeadParticipantsChanged(s.lead1, 2, []Participant{exec, inv, co},
			[]Change{{s.agent2, "Added", "CoAgent", ""}}, t(1)).With("lead 1: a co-agent joins"),
		v3.With("lead 1: the co-agent becomes an assistant"),
		LeadParticipantsChanged(s.lead1, 4, []Participant{exec, inv},
			[]Change{{s.agent2, "Removed", "Assistant", ""}}, t(3)).With("lead 1: the assistant is removed (access revoked)"),
		stale.With("lead 1: snapshot 3 again, new MessageId → skipped-stale"),
		LeadParticipantsChanged(s.lead1, 5, nil, nil, t(4)).With("poison: empty ActiveParticipants → MSG_LEAD_PARTICIPANTS_INVALID"),
		LeadParticipantsChanged(s.lead2, 1, []Participant{{s.coAgent, "Executor"}, {uuid.New(), "InvestorPrimary"}},
			[]Change{{s.coAgent, "Added", "Executor", ""}}, t(5)).With("lead 2: its chat does not exist yet → waits (MSG_CHAT_NOT_PROVISIONED)"),
	}

	// crm: shared, opened, duplicate, unknown action, and an event that
	// waits for its lead.
	sel1, sel2 := uuid.New(), uuid.New()
	shared := SelectionShared(sel1, s.agentA, s.investorA, "Shared", "Two-bedroom flats near the park", 12, t(0)).
		With("selection 1 shared with investor A → SelectionAttached")
	crmEvents := []Event{
		shared,
		SelectionShared(sel1, s.agentA, s.investorA, "Opened", "Two-bedroom flats near the park", 12, t(1)).
			With("selection 1 opened → SelectionViewed"),
		shared.Again("the same message again → skipped-duplicate"),
		SelectionShared(uuid.New(), s.agentA, s.investorA, "Forwarded", "x", 1, t(2)).
			With("poison: Action Forwarded → CRM_SELECTION_UNKNOWN_ACTION"),
		SelectionShared(sel2, s.agentB, s.investorB, "Shared", "Penthouses", 3, t(3)).
			With("selection 2 for (agent B, investor B): no lead yet → waits (CRM_SELECTION_LEAD_NOT_FOUND)"),
	}
	unreadable := func(topic, key string) Event {
		return Event{Topic: topic, Key: []byte(key), Value: []byte("{not json"), Note: "poison: unreadable envelope → EVENT_ENVELOPE_INVALID"}
	}

	s.Steps = []Step{
		{Say: "rewards: referral bonds", Events: rewardsEvents},
		{Say: "messenger: lead chat membership", Events: messengerEvents},
		{Say: "crm: selections in a lead's feed", Events: crmEvents},
		{Say: "an unreadable envelope on every topic", Events: []Event{
			unreadable(rewards.Topic, s.referred2.String()), unreadable(messenger.Topic, s.lead1.String()), unreadable(crm.Topic, sel1.String()),
		}},
		{Say: "the chat of lead 2 is provisioned: its waiting event applies", After: 1500 * time.Millisecond,
			SQL: `INSERT INTO chats (id, kind, lead_id) VALUES ($1, 'Lead', $2)`, SQLArgs: []any{s.chat2, s.lead2}},
		{Say: "the lead of (agent B, investor B) is created: its waiting selection applies",
			SQL:     `INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, $2, $3, $4, 'Active')`,
			SQLArgs: []any{s.crmLeadB, tenant, s.agentB, s.investorB}},
	}
	s.DLQ = map[string]map[string]int{
		rewards.DLQTopic:   {"REWARDS_BOND_EVENT_INVALID": 1, "REWARDS_BOND_EVENT_ORPHAN_CLOSED": 1, "EVENT_ENVELOPE_INVALID": 1},
		messenger.DLQTopic: {"MSG_LEAD_PARTICIPANTS_INVALID": 1, "EVENT_ENVELOPE_INVALID": 1},
		crm.DLQTopic:       {"CRM_SELECTION_UNKNOWN_ACTION": 1, "EVENT_ENVELOPE_INVALID": 1},
	}
	return s
}

// Events is every event the scenario produces.
func (s *Scenario) Events() []Event {
	var out []Event
	for _, st := range s.Steps {
		out = append(out, st.Events...)
	}
	return out
}

// Check compares the database with the scenario's expected outcome and
// returns what differs (nothing when the run went as it should).
func (s *Scenario) Check(ctx context.Context, db *sql.DB) []string {
	var bad []string
	expect := func(what string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			bad = append(bad, fmt.Sprintf("%s: got %v, want %v", what, got, want))
		}
	}
	q := func(query string, args ...any) string {
		var out sql.NullString
		if err := db.QueryRowContext(ctx, query, args...).Scan(&out); err != nil {
			return "error: " + err.Error()
		}
		return out.String
	}
	status := `SELECT status FROM referral_bond_replicas WHERE bond_id = $1`
	expect("bond A status", q(status, s.bondA), "Replaced")
	expect("bond B status", q(status, s.bondB), "Active")
	expect("bond C status", q(status, s.bondC), "Revoked")
	expect("Active bonds of referred user 1", q(`SELECT count(*) FROM referral_bond_replicas WHERE referred_user_id = $1 AND status = 'Active'`, s.referred1), 1)

	members := func(chat uuid.UUID) string {
		rows, err := db.QueryContext(ctx, `SELECT user_id, role FROM chat_participants WHERE chat_id = $1 AND removed_at IS NULL`, chat)
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		var ms []string
		for rows.Next() {
			var u uuid.UUID
			var r string
			if err := rows.Scan(&u, &r); err != nil {
				return err.Error()
			}
			ms = append(ms, s.name(u)+":"+r)
		}
		sort.Strings(ms)
		return strings.Join(ms, ",")
	}
	expect("lead 1 chat members", members(s.chat1), "agent1:Executor,investor1:InvestorPrimary")
	expect("lead 1 removed member kept (soft removal)", q(`SELECT count(*) FROM chat_participants WHERE chat_id = $1 AND user_id = $2 AND removed_at IS NOT NULL`, s.chat1, s.agent2), 1)
	expect("lead 1 chat version", q(`SELECT lead_member_version FROM chats WHERE id = $1`, s.chat1), 4)
	expect("lead 1 feed facts", q(`SELECT string_agg(type, ',' ORDER BY type) FROM chat_events WHERE chat_id = $1`, s.chat1),
		"ParticipantJoined,ParticipantJoined,ParticipantJoined,ParticipantLeft,ParticipantRoleChanged")
	expect("lead 1 realtime updates", q(`SELECT count(*) FROM chat_updates WHERE chat_id = $1`, s.chat1), 4)
	expect("lead 2 chat (waited for provisioning) version", q(`SELECT lead_member_version FROM chats WHERE id = $1`, s.chat2), 1)

	feed := `SELECT string_agg(type, ',' ORDER BY type) FROM lead_events WHERE lead_id = $1`
	expect("lead A feed", q(feed, s.crmLeadA), "SelectionAttached,SelectionViewed")
	expect("lead B feed (waited for the lead)", q(feed, s.crmLeadB), "SelectionAttached")
	expect("messages still waiting", q(`SELECT count(*) FROM parked_messages`), 0)
	return bad
}

func (s *Scenario) name(u uuid.UUID) string {
	switch u {
	case s.agent1:
		return "agent1"
	case s.investor1:
		return "investor1"
	case s.agent2:
		return "agent2"
	}
	return u.String()
}
