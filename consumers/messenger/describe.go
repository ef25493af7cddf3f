package messenger

import (
	"context"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/chat"
)

// describe gives the spec's log fields (MessageId, LeadId, ChatId,
// Version) of a message whose handler did not run: its payload's, and its
// lead's chat.
func describe(ctx context.Context, client *ent.Client, m *consumer.Message) func(*zerolog.Event) {
	p, err := consumer.DecodePayload[payload](m)
	if err != nil || p.LeadID == uuid.Nil {
		return nil
	}
	chatID := ""
	if c, err := client.Chat.Query().Where(chat.LeadID(p.LeadID)).Only(ctx); err == nil {
		chatID = c.ID.String()
	}
	return func(e *zerolog.Event) {
		e.Str("LeadId", p.LeadID.String()).Int64("Version", p.Version)
		if chatID != "" {
			e.Str("ChatId", chatID)
		}
	}
}
