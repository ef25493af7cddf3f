// Package demo produces what PIN's producers would: envelopes of the three
// topics (docs/contract.md §4), the scripted scenario of `make run` with the
// outcome it must reach, and realistic load for `pinctl dev --events` and
// the benchmark.
package demo

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/messenger"
	"github.com/pin-platform/pin/consumers/rewards"
	"github.com/pin-platform/pin/consumers/roster"
)

// Topic is a source topic with its DLQ, group and partition count.
type Topic struct {
	Service    string
	Name       string
	DLQ        string
	Group      string
	Partitions int
}

// Topics lists the services' topics, in the roster's order.
var Topics = func() []Topic {
	out := make([]Topic, len(roster.All))
	for i, s := range roster.All {
		out[i] = Topic{s.Name(), s.Topic(), s.DLQTopic(), s.Group(), s.Partitions}
	}
	return out
}()

// Event is one message to produce.
type Event struct {
	Topic     string
	Key       []byte
	Value     []byte
	MessageID uuid.UUID
	Note      string // what it demonstrates
}

// Envelope builds the JSON envelope of docs/contract.md §4 (ContractVersion 1)
// of message id around payload.
func Envelope(id uuid.UUID, eventType, aggregateType string, aggregateID uuid.UUID, at time.Time, payload any) []byte {
	b, err := json.Marshal(map[string]any{
		"MessageId":       id,
		"EventType":       eventType,
		"ContractVersion": 1,
		"CreatedAt":       at.UTC().Format(time.RFC3339Nano),
		"AggregateId":     aggregateID,
		"AggregateType":   aggregateType,
		"Payload":         payload,
	})
	if err != nil {
		panic(err) // maps of plain values always marshal
	}
	return b
}

// BondCreatedPayload is the payload of a pin.referral.bond-created.
func BondCreatedPayload(bond, referred, referrer uuid.UUID, version int64, boundAt time.Time) map[string]any {
	return map[string]any{
		"BondId": bond, "ReferredUserId": referred, "ReferrerUserId": referrer,
		"BoundAt": boundAt.UTC().Format(time.RFC3339Nano), "Version": version,
		"Channel": "Link", "ReferralLinkId": uuid.New(),
	}
}

// BondClosedPayload is the payload of a pin.referral.bond-closed.
func BondClosedPayload(bond, referred uuid.UUID, status string, version int64) map[string]any {
	return map[string]any{"BondId": bond, "ReferredUserId": referred, "Status": status, "Version": version}
}

// LeadParticipantsPayload is the payload of a
// pin.crm.lead-participants-changed: the target set, the delta, the
// version and when it changed.
func LeadParticipantsPayload(lead uuid.UUID, version int64, active []Participant, delta []Change, at time.Time) map[string]any {
	act := make([]map[string]any, len(active))
	for i, p := range active {
		act[i] = map[string]any{"UserId": p.UserID, "Role": p.Role}
	}
	del := make([]map[string]any, len(delta))
	for i, c := range delta {
		m := map[string]any{"UserId": c.UserID, "ChangeType": c.ChangeType, "Role": c.Role}
		if c.PreviousRole != "" {
			m["PreviousRole"] = c.PreviousRole
		}
		del[i] = m
	}
	return map[string]any{
		"LeadId": lead, "ActiveParticipants": act, "Participants": del, "Version": version,
		"ChangedAt": at.UTC().Format(time.RFC3339Nano),
	}
}

// SelectionSharedPayload is the payload of a pin.selections.selection-shared.
func SelectionSharedPayload(selection, agent, investor uuid.UUID, action, title string, objects int, at time.Time) map[string]any {
	return map[string]any{
		"SelectionId": selection, "SelectionTitle": title, "PropertyObjectsCount": objects,
		"Action": action, "AgentUserId": agent, "InvestorUserId": investor,
		"OccurredAt": at.UTC().Format(time.RFC3339Nano),
	}
}

// BondCreated is a pin.referral.bond-created event.
func BondCreated(bond, referred, referrer uuid.UUID, version int64, at time.Time) Event {
	return bondCreated(uuid.New(), bond, referred, referrer, version, at)
}

func bondCreated(id, bond, referred, referrer uuid.UUID, version int64, at time.Time) Event {
	return Event{
		Topic: rewards.Topic, Key: []byte(referred.String()), MessageID: id,
		Value: Envelope(id, rewards.EventTypeBondCreated, "ReferralBond", bond, at, BondCreatedPayload(bond, referred, referrer, version, at)),
	}
}

// BondClosed is a pin.referral.bond-closed event. A Replaced bond names
// the bond that replaced it (replacedBy; uuid.Nil leaves the member out).
func BondClosed(bond, referred uuid.UUID, status string, replacedBy uuid.UUID, version int64, at time.Time) Event {
	return bondClosed(uuid.New(), bond, referred, status, replacedBy, version, at)
}

func bondClosed(id, bond, referred uuid.UUID, status string, replacedBy uuid.UUID, version int64, at time.Time) Event {
	p := BondClosedPayload(bond, referred, status, version)
	if replacedBy != uuid.Nil {
		p["ReplacedByBondId"] = replacedBy
	}
	return Event{
		Topic: rewards.Topic, Key: []byte(referred.String()), MessageID: id,
		Value: Envelope(id, rewards.EventTypeBondClosed, "ReferralBond", bond, at, p),
	}
}

// Participant is a lead participant: a user and a role.
type Participant struct {
	UserID uuid.UUID
	Role   string
}

// Change is one entry of the participants delta.
type Change struct {
	UserID       uuid.UUID
	ChangeType   string
	Role         string
	PreviousRole string
}

// LeadParticipantsChanged is a pin.crm.lead-participants-changed event.
func LeadParticipantsChanged(lead uuid.UUID, version int64, active []Participant, delta []Change, at time.Time) Event {
	return leadParticipantsChanged(uuid.New(), lead, version, active, delta, at)
}

func leadParticipantsChanged(id, lead uuid.UUID, version int64, active []Participant, delta []Change, at time.Time) Event {
	return Event{
		Topic: messenger.Topic, Key: []byte(lead.String()), MessageID: id,
		Value: Envelope(id, messenger.EventType, "Lead", lead, at, LeadParticipantsPayload(lead, version, active, delta, at)),
	}
}

// SelectionShared is a pin.selections.selection-shared event.
func SelectionShared(selection, agent, investor uuid.UUID, action, title string, objects int, at time.Time) Event {
	return selectionShared(uuid.New(), selection, agent, investor, action, title, objects, at)
}

func selectionShared(id, selection, agent, investor uuid.UUID, action, title string, objects int, at time.Time) Event {
	return Event{
		Topic: crm.Topic, Key: []byte(selection.String()), MessageID: id,
		Value: Envelope(id, crm.EventType, "Selection", selection, at, SelectionSharedPayload(selection, agent, investor, action, title, objects, at)),
	}
}

// Again is the same message delivered a second time (same MessageId).
func (e Event) Again(note string) Event {
	e.Note = note
	return e
}

// With sets the event's note.
func (e Event) With(note string) Event {
	e.Note = note
	return e
}
