package crm

import (
	"context"

	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/lead"
	"github.com/pin-platform/pin/ent/leadevent"
)

// StatusActive is the only lead status that accepts feed entries
// (CRM-1). The others are Expired and Archived.
const StatusActive = "Active"

// pair is a lead's resolution key: (executor agent, primary investor).
type pair struct{ agent, investor uuid.UUID }

// view is what its Read read for a transaction: the Active leads of its
// messages' pairs and the messages the feed holds already; with the
// appends its handlers queued (writer.go), which keep it in step.
type view struct {
	leads map[pair]*ent.Lead
	// inFeed maps the MessageIds of the transaction that the feed has
	// already (source_message_id), and those queued since, to their lead.
	inFeed map[uuid.UUID]uuid.UUID
	writes
}

// read resolves the Active leads of every (agent, investor) pair of msgs
// with one statement (spec step 4), then looks for the messages' entries
// in the feed, with one statement too. It locks nothing: the writer locks
// the leads it appends to, in id order, and re-reads them under the lock
// (writer.go, claimLeads).
//
// The events of one lead arrive on every partition (the key is the
// SelectionId), so the transactions of two lanes touch the same leads.
// Locked here, a lead would stay locked through the handlers, the feed's
// insert, the marks and the commit, and the next lane's Read would wait
// for all of it (under a backlog, every transaction shares a lead with
// the one before: the lanes ran one after the other). Locked at the
// write, the next transaction reads and decides while this one commits.
//
// A pair without an Active lead is not in the view: its handler reports
// it. So is a message whose payload does not decode (read decodes the
// handler's type, which the handler then reuses: it reports the same
// error); with none left the view is empty.
func read(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (*view, error) {
	seen := make(map[pair]bool, len(msgs))
	var agents, investors consumer.Array
	msgIDs := make([]uuid.UUID, 0, len(msgs))
	for _, m := range msgs {
		msgIDs = append(msgIDs, m.MessageID)
		w, err := consumer.DecodePayload[wirePayload](m) // the handler's, decoded once
		if err != nil || w.AgentUserID == nil || w.InvestorUserID == nil {
			continue
		}
		a, err1 := uuid.Parse(*w.AgentUserID)
		i, err2 := uuid.Parse(*w.InvestorUserID)
		if err1 != nil || err2 != nil || seen[pair{a, i}] {
			continue
		}
		seen[pair{a, i}] = true
		agents.UUID(a)
		investors.UUID(i)
	}
	v := &view{leads: map[pair]*ent.Lead{}, inFeed: map[uuid.UUID]uuid.UUID{}, writes: newWrites()}
	if agents.Len() == 0 {
		return v, nil
	}
	found, err := tx.Lead.Query().
		Where(func(s *sql.Selector) {
			// The status as a literal, not an argument: the plan, made
			// once per connection for any argument (db.go), can then use
			// the partial index of Active pairs (ux_leads_active_pair).
			s.Where(sql.P(func(b *sql.Builder) {
				b.Ident(s.C(lead.FieldStatus)).WriteString(" = '" + StatusActive + "'")
			}))
			s.Where(sql.P(func(b *sql.Builder) {
				b.WriteByte('(').Ident(s.C(lead.FieldExecutorAgentUserID)).Comma().Ident(s.C(lead.FieldPrimaryInvestorUserID)).
					WriteString(") IN (SELECT * FROM unnest(").Arg(&agents).WriteString("::uuid[], ").
					Arg(&investors).WriteString("::uuid[]))")
			}))
		}).
		// What the handlers and the writer use: not the timestamps, which
		// lib/pq parses from text, three a row (2 % of the consumer's CPU
		// under a backlog).
		Select(lead.FieldTenantID, lead.FieldExecutorAgentUserID, lead.FieldPrimaryInvestorUserID, lead.FieldStatus, lead.FieldRowVersion).
		All(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range found {
		v.leads[pair{l.ExecutorAgentUserID, l.PrimaryInvestorUserID}] = l
	}
	// The feed's own idempotency layer (source_message_id), for every
	// message at once: a message applied already is a duplicate whatever
	// its lead has become since.
	var have []struct {
		Source uuid.UUID `json:"source_message_id"`
		Lead   uuid.UUID `json:"lead_id"`
	}
	if err := tx.LeadEvent.Query().
		Where(consumer.AnyOf(leadevent.FieldSourceMessageID, "uuid", consumer.UUIDArray(msgIDs))).
		Select(leadevent.FieldSourceMessageID, leadevent.FieldLeadID).
		Scan(ctx, &have); err != nil {
		return nil, err
	}
	for _, r := range have {
		v.inFeed[r.Source] = r.Lead
	}
	return v, nil
}
