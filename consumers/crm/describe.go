package crm

import (
	"context"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/lead"
	"github.com/pin-platform/pin/ent/leadevent"
)

// describe gives the spec's log fields (MessageId, SelectionId, LeadId,
// Action, AgentUserId, InvestorUserId) of a message whose handler did not
// run: its payload's, and the lead whose feed holds its entry (a
// duplicate), or the Active lead of its pair.
func describe(ctx context.Context, client *ent.Client, m *consumer.Message) func(*zerolog.Event) {
	p, err := consumer.DecodePayload[wirePayload](m)
	if err != nil {
		return nil
	}
	leadID := ""
	if ids, err := client.LeadEvent.Query().Where(leadevent.SourceMessageID(m.MessageID)).
		Select(leadevent.FieldLeadID).Strings(ctx); err == nil && len(ids) > 0 {
		leadID = ids[0]
	} else if p.AgentUserID != nil && p.InvestorUserID != nil {
		agent, err1 := uuid.Parse(*p.AgentUserID)
		investor, err2 := uuid.Parse(*p.InvestorUserID)
		if err1 == nil && err2 == nil {
			if l, err := client.Lead.Query().Where(lead.ExecutorAgentUserID(agent), lead.PrimaryInvestorUserID(investor),
				lead.Status(StatusActive)).Only(ctx); err == nil {
				leadID = l.ID.String()
			}
		}
	}
	return func(e *zerolog.Event) {
		p.logFields(e)
		if leadID != "" {
			e.Str("LeadId", leadID)
		}
	}
}
