package crm

import (
	"context"

	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/consumers/consumers/consumer"
	"github.com/pin-platform/consumers/ent"
	"github.com/pin-platform/consumers/ent/lead"
)

// pair is a lead's resolution key: (executor agent, primary investor).
type pair struct{ agent, investor uuid.UUID }

type leadsKey struct{}

// prepare resolves the Active leads of every (agent, investor) pair of the
// batch with one statement and locks them FOR NO KEY UPDATE in id order.
//
// The events of one lead arrive on every partition (the key is the
// SelectionId), and each appends to the feed and bumps the lead's
// row_version. Without the up-front lock, the batches of two partitions
// lock the same leads in different orders as their handlers reach them,
// and PostgreSQL breaks the cycle after deadlock_timeout by rolling one
// batch back. Locked in one order, they wait for each other instead. NO
// KEY UPDATE is what the lead's own UPDATE takes; it does not block the
// feed inserts' foreign-key checks (KEY SHARE).
//
// A pair without an Active lead is left to its handler, which reads the
// table again and reports it.
func prepare(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
	seen := make(map[pair]bool, len(msgs))
	var agents, investors []string
	for _, m := range msgs {
		w, err := consumer.DecodePayload[struct {
			AgentUserID    *string `json:"AgentUserId"`
			InvestorUserID *string `json:"InvestorUserId"`
		}](m)
		if err != nil || w.AgentUserID == nil || w.InvestorUserID == nil {
			continue
		}
		a, err1 := uuid.Parse(*w.AgentUserID)
		i, err2 := uuid.Parse(*w.InvestorUserID)
		if err1 != nil || err2 != nil || seen[pair{a, i}] {
			continue
		}
		seen[pair{a, i}] = true
		agents, investors = append(agents, a.String()), append(investors, i.String())
	}
	if len(agents) == 0 {
		return ctx, nil
	}
	found, err := tx.Lead.Query().
		Where(lead.Status(StatusActive), func(s *sql.Selector) {
			s.Where(sql.P(func(b *sql.Builder) {
				b.WriteByte('(').Ident(s.C(lead.FieldExecutorAgentUserID)).Comma().Ident(s.C(lead.FieldPrimaryInvestorUserID)).
					WriteString(") IN (SELECT * FROM unnest(").Arg(pq.Array(agents)).WriteString("::uuid[], ").
					Arg(pq.Array(investors)).WriteString("::uuid[]))")
			}))
		}).
		Order(ent.Asc(lead.FieldID)).
		Modify(func(s *sql.Selector) { s.For(sql.LockNoKeyUpdate) }).
		All(ctx)
	if err != nil {
		return nil, err
	}
	leads := make(map[pair]*ent.Lead, len(found))
	for _, l := range found {
		leads[pair{l.ExecutorAgentUserID, l.PrimaryInvestorUserID}] = l
	}
	return context.WithValue(ctx, leadsKey{}, leads), nil
}

// preparedLead is the pair's Active lead as prepare locked it, kept in step
// with the batch's writes by appendEvent, or nil.
func preparedLead(ctx context.Context, agent, investor uuid.UUID) *ent.Lead {
	leads, _ := ctx.Value(leadsKey{}).(map[pair]*ent.Lead)
	return leads[pair{agent, investor}]
}
