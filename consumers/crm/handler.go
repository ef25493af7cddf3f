package crm

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
)

type handler struct {
	m   *metrics
	pub Publisher
	now func() time.Time
}

// handle appends one selection event to its lead's feed: it decides on the
// view its Read read (view.go) and queues the append, which the
// transaction's writer makes before the commit (writer.go). It returns
// Attached or Viewed, SkippedDuplicate when the feed holds the message's
// entry already, or an error of one of the spec's codes.
func (h *handler) handle(ctx context.Context, v *view, m *consumer.Message) (consumer.Outcome, error) {
	log := zerolog.Ctx(ctx)
	// The runtime logs "consumed"; every later line of the message (its
	// outcome, parked, dead-lettered) carries these fields.
	p, ev, err := decode(m)
	m.LogFields(p.logFields)
	if err != nil {
		return "", err
	}
	if ev.TitleTruncated() {
		log.Warn().Func(p.logFields).
			Int("SelectionTitleRunes", ev.TitleRunes).Int("StoredRunes", MaxTitleRunes).
			Msg("selection-title-truncated")
	}

	// The feed's own idempotency layer (source_message_id) first: an event
	// applied already is a duplicate whatever its lead became since.
	if dupOf := v.inFeed[m.MessageID]; dupOf != uuid.Nil {
		leadID := dupOf.String()
		m.LogFields(func(e *zerolog.Event) { e.Str("LeadId", leadID).Str("duplicate", "source_message_id") })
		return SkippedDuplicate, nil
	}

	// The pair's Active lead, as Read resolved it (the writer locks it and
	// checks it is still so).
	l := v.leads[pair{ev.AgentUserID, ev.InvestorUserID}]
	if l == nil {
		return "", h.leadNotFound(ctx, p, CodeLeadNotFound.Errorf("no Active lead for agent %s and investor %s", ev.AgentUserID, ev.InvestorUserID))
	}
	leadID := l.ID.String()
	m.LogFields(func(e *zerolog.Event) { e.Str("LeadId", leadID) })

	typ := ev.Action.EventType()
	entry := FeedEntry{
		Type:            typ,
		OccurredAt:      ev.OccurredAt,
		SourceMessageID: m.MessageID,
		Payload:         ev.FeedPayload(),
	}
	id, err := v.append(l, entry, h.now(), m, func(err error) error { return h.leadNotFound(ctx, p, err) })
	if err != nil {
		return "", err
	}
	eventID := id.String()
	m.LogFields(func(e *zerolog.Event) { e.Str("EventId", eventID) })
	added := LeadEventAdded{LeadID: l.ID, EventID: id, Type: typ}
	pubCtx := context.WithoutCancel(ctx)
	m.AfterCommit(func() { publishSafely(pubCtx, h.pub, added) })
	if typ == SelectionViewed {
		return Viewed, nil
	}
	return Attached, nil
}

// decode reads and validates the message's payload: the event, or an error
// of CRM_SELECTION_EVENT_INVALID or CRM_SELECTION_UNKNOWN_ACTION. p is the
// payload as it came (as much of it as could be read), for the log.
func decode(m *consumer.Message) (p wirePayload, ev SelectionShared, err error) {
	p, err = consumer.DecodePayload[wirePayload](m)
	if err != nil {
		return p, ev, err
	}
	ev, verr := p.validate()
	// A time beyond MAX_CLOCK_SKEW is a fault too: an unknown Action is
	// CRM_SELECTION_UNKNOWN_ACTION only when it is the payload's one fault.
	timeErr := m.CheckTime("OccurredAt", ev.OccurredAt) // nil for an OccurredAt that could not be read (zero)
	if verr == nil {
		return p, ev, timeErr
	}
	var late *consumer.Error
	if errors.As(timeErr, &late) {
		verr.problems, verr.unknownAction = append(verr.problems, late.Err.Error()), false
	}
	if verr.unknownAction {
		return p, ev, CodeUnknownAction.Wrap(verr)
	}
	return p, ev, CodeEventInvalid.Wrap(verr)
}

// leadNotFound counts and logs an attempt that found no Active lead and
// returns err (CRM_SELECTION_LEAD_NOT_FOUND). It counts when the code is
// returned, not after commit: such an attempt rolls back, and the
// after-commit hooks of a rolled-back attempt never run.
func (h *handler) leadNotFound(ctx context.Context, p wirePayload, err error) error {
	h.m.leadNotFound.Inc()
	zerolog.Ctx(ctx).Info().Func(p.logFields).Str("reason", err.Error()).Msg("skipped-lead-not-found")
	return err
}

// logFields adds the spec's log fields of the event as they came, a known
// Action in the spec's spelling (the LeadId is added once resolved).
func (p wirePayload) logFields(e *zerolog.Event) {
	str := func(k string, v *string) {
		if v != nil {
			e.Str(k, consumer.Cut(*v)) // as it came: a producer's string, cut
		}
	}
	str("SelectionId", p.SelectionID)
	if p.Action != nil {
		if a, ok := ParseAction(*p.Action); ok {
			e.Str("Action", string(a)) // the spec's spelling
		} else {
			e.Str("Action", consumer.Cut(*p.Action))
		}
	}
	str("AgentUserId", p.AgentUserID)
	str("InvestorUserId", p.InvestorUserID)
}
