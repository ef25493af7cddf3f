package crm

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
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
// (spec step 4) and looks for the messages' entries in the feed (step 3)
// with one statement, readSQL: two reads in one round trip (at 1 ms from
// PostgreSQL a transaction's round trips are its time). It locks nothing:
// the writer locks the leads it appends to, in id order, and re-reads
// them under the lock (writer.go, writeSQL).
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
	rows, err := tx.QueryContext(ctx, readSQL, &agents, &investors, consumer.UUIDArray(msgIDs))
	if err != nil {
		return nil, fmt.Errorf("read the transaction's leads and feed entries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                      uuid.UUID
			tenant, agent, investor uuid.NullUUID
			status                  sql.NullString
			version                 sql.NullInt64
			source                  uuid.NullUUID
		)
		if err := rows.Scan(&id, &tenant, &agent, &investor, &status, &version, &source); err != nil {
			return nil, fmt.Errorf("read the transaction's leads and feed entries: %w", err)
		}
		if source.Valid { // the feed's own idempotency layer: applied already, whatever its lead has become since
			v.inFeed[source.UUID] = id
			continue
		}
		v.leads[pair{agent.UUID, investor.UUID}] = &ent.Lead{ID: id, TenantID: tenant.UUID, ExecutorAgentUserID: agent.UUID,
			PrimaryInvestorUserID: investor.UUID, Status: status.String, RowVersion: version.Int64}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the transaction's leads and feed entries: %w", err)
	}
	return v, nil
}

// readSQL is read's statement: $1 and $2 the pairs' agents and investors,
// $3 the MessageIds. Its rows are the Active leads of the pairs (what the
// handlers and the writer use: not the timestamps, which lib/pq parses
// from text, three a row, 2 % of the consumer's CPU under a backlog), then
// the feed's entries of the messages: their lead, and the MessageId last,
// NULL on a lead's row. The status is a literal, not an argument: the
// plan, made once per connection for any argument (db.go), can then use
// the partial index of Active pairs (ux_leads_active_pair); the entries
// are looked up in ux_lead_events_source_message_id.
const readSQL = `SELECT l.id, l.tenant_id, l.executor_agent_user_id, l.primary_investor_user_id, l.status, l.row_version, NULL::uuid
FROM leads AS l
WHERE l.status = '` + StatusActive + `' AND (l.executor_agent_user_id, l.primary_investor_user_id) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))
UNION ALL
SELECT e.lead_id, NULL, NULL, NULL, NULL, NULL, e.source_message_id
FROM lead_events AS e
WHERE e.source_message_id = ANY($3::uuid[])`
