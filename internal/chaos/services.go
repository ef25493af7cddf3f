package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/pin-platform/pin/consumers/crm"
	"github.com/pin-platform/pin/consumers/demo"
	"github.com/pin-platform/pin/consumers/messenger"
)

// service is one consumer under the run: its topic, its stream, what other
// components provision for it, and how its results are checked.
type service struct {
	demo.Topic
	events []*event
	// retryScale is its RETRY_TIME_SCALE: the retry-later schedule fits
	// the run's window.
	retryScale float64
	// setup: rows other components create before anything is produced.
	setup []sqlStep
	// late: rows created during the run, once a message waiting for them
	// is parked.
	late []*lateRow
	// check compares the database with the model of recs.
	check func(ctx context.Context, db *sql.DB, t *Tally, recs []record, marks map[string]string, dlq map[pos][]string) error
}

type sqlStep struct {
	sql  string
	args []any
}

// lateRow is a chat or a lead that its owner creates while the run goes:
// when a message with one of keys is parked waiting for it (or once every
// event is produced).
type lateRow struct {
	what string
	keys []string
	step sqlStep
	done bool
}

// scheduleOf is the length of a retry-later schedule.
func scheduleOf(backoff []time.Duration) time.Duration {
	var d time.Duration
	for _, b := range backoff {
		d += b
	}
	return d
}

// services builds the services named (all when none) with n events each
// from seed; window is how long a retry-later schedule may take.
func services(names []string, seed uint64, n int, window time.Duration) ([]*service, error) {
	msgScale := window.Seconds() / scheduleOf(messenger.CodeChatNotProvisioned.Backoff).Seconds()
	crmScale := window.Seconds() / scheduleOf(crm.CodeLeadNotFound.Backoff).Seconds()
	build := map[string]func(demo.Topic) *service{
		"rewards": func(t demo.Topic) *service {
			return &service{Topic: t, events: generateRewards(seed, n), retryScale: msgScale, check: checkRewards}
		},
		"messenger": func(t demo.Topic) *service { return messengerService(t, seed, n, msgScale) },
		"crm":       func(t demo.Topic) *service { return crmService(t, seed, n, crmScale) },
	}
	var out []*service
	for _, t := range demo.Topics {
		if len(names) > 0 && !slices.Contains(names, t.Service) {
			continue
		}
		b, ok := build[t.Service]
		if !ok {
			return nil, fmt.Errorf("service %s has no chaos model: add its generator and check to internal/chaos (services.go)", t.Service)
		}
		out = append(out, b(t))
	}
	for _, name := range names {
		if _, ok := build[name]; !ok {
			return nil, fmt.Errorf("unknown service %q (%s)", name, strings.Join(slices.Sorted(maps.Keys(build)), ", "))
		}
	}
	return out, nil
}

func checkRewards(ctx context.Context, db *sql.DB, t *Tally, recs []record, marks map[string]string, dlq map[pos][]string) error {
	x := modelRewards(recs)
	rows, err := readRewards(ctx, db)
	if err != nil {
		return err
	}
	x.compare(t, rows)
	compareMessages(t, &x.expectation, marks, dlq)
	return nil
}

func messengerService(t demo.Topic, seed uint64, n int, scale float64) *service {
	events, leads := generateMessenger(seed, n)
	s := &service{Topic: t, events: events, retryScale: scale}
	var chats, chatLeads []string
	for id, l := range leads {
		switch l.when {
		case atStart:
			chats, chatLeads = append(chats, l.chat.String()), append(chatLeads, id.String())
		case late:
			s.late = append(s.late, &lateRow{what: "the chat of lead " + id.String(), keys: []string{id.String()},
				step: sqlStep{`INSERT INTO chats (id, kind, lead_id) VALUES ($1, 'Lead', $2)`, []any{l.chat, id}}})
		}
	}
	s.setup = []sqlStep{{`INSERT INTO chats (id, kind, lead_id) SELECT c, 'Lead', l FROM unnest($1::uuid[], $2::uuid[]) AS u(c, l)`,
		[]any{pq.Array(chats), pq.Array(chatLeads)}}}
	s.check = func(ctx context.Context, db *sql.DB, t *Tally, recs []record, marks map[string]string, dlq map[pos][]string) error {
		x := modelMessenger(recs, leads)
		chats, chatLead, err := readMessenger(ctx, db)
		if err != nil {
			return err
		}
		x.compare(t, chats, chatLead, marks)
		compareMessages(t, &x.expectation, marks, dlq)
		return nil
	}
	return s
}

func crmService(t demo.Topic, seed uint64, n int, scale float64) *service {
	events, pairs, selections := generateCRM(seed, n)
	s := &service{Topic: t, events: events, retryScale: scale}
	var ids, tenants, agents, investors, statuses []string
	add := func(id, tenant uuid.UUID, p pair, status string) {
		ids, tenants, agents, investors, statuses = append(ids, id.String()), append(tenants, tenant.String()),
			append(agents, p.agent.String()), append(investors, p.investor.String()), append(statuses, status)
	}
	keysOf := map[pair][]string{}
	for sel, p := range selections {
		keysOf[p] = append(keysOf[p], sel.String())
	}
	for p, l := range pairs {
		if l.expired != uuid.Nil {
			add(l.expired, l.tenant, p, "Expired")
		}
		switch l.when {
		case atStart:
			add(l.id, l.tenant, p, "Active")
		case late:
			s.late = append(s.late, &lateRow{what: "the lead " + l.id.String(), keys: keysOf[p],
				step: sqlStep{`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) VALUES ($1, $2, $3, $4, 'Active')`,
					[]any{l.id, l.tenant, p.agent, p.investor}}})
		}
	}
	s.setup = []sqlStep{{`INSERT INTO leads (id, tenant_id, executor_agent_user_id, primary_investor_user_id, status) SELECT i, t, a, v, s FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[]) AS u(i, t, a, v, s)`,
		[]any{pq.Array(ids), pq.Array(tenants), pq.Array(agents), pq.Array(investors), pq.Array(statuses)}}}
	s.check = func(ctx context.Context, db *sql.DB, t *Tally, recs []record, marks map[string]string, dlq map[pos][]string) error {
		x := modelCRM(recs, pairs)
		leads, feed, unkeyed, err := readCRM(ctx, db)
		if err != nil {
			return err
		}
		x.compare(t, leads, feed, unkeyed)
		compareMessages(t, &x.expectation, marks, dlq)
		return nil
	}
	return s
}
