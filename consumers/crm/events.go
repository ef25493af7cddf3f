package crm

import (
	"context"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
)

// LeadEventAdded is the lead aggregate's domain event: an entry was
// appended to the lead's feed. It is raised in-process once the
// transaction that appended it has committed; no Kafka event goes out.
type LeadEventAdded struct {
	LeadID  uuid.UUID
	EventID uuid.UUID // lead_events.id
	Type    LeadEventType
}

// Publisher receives the domain events after commit. It runs on the
// partition's worker: it must be quick and must not fail the message (the
// transaction has committed already). ctx carries the message's logger and
// span.
type Publisher func(ctx context.Context, e LeadEventAdded)

// LogPublisher is the default Publisher: it logs the event.
func LogPublisher(ctx context.Context, e LeadEventAdded) {
	zerolog.Ctx(ctx).Info().
		Str("LeadId", e.LeadID.String()).
		Str("EventId", e.EventID.String()).
		Str("Type", string(e.Type)).
		Msg("lead-event-added")
}

// publishSafely runs pub, turning a panic into an error log: after commit a
// panic could only crash the process.
func publishSafely(ctx context.Context, pub Publisher, e LeadEventAdded) {
	defer func() {
		if p := recover(); p != nil {
			zerolog.Ctx(ctx).Error().Interface("panic", p).Str("LeadId", e.LeadID.String()).
				Str("EventId", e.EventID.String()).Msg("lead-event-added publisher panicked")
		}
	}()
	pub(ctx, e)
}
