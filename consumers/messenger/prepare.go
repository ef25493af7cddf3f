package messenger

import (
	"context"

	"github.com/google/uuid"

	"github.com/pin-platform/consumers/consumers/consumer"
	"github.com/pin-platform/consumers/ent"
	"github.com/pin-platform/consumers/ent/chat"
	"github.com/pin-platform/consumers/ent/chatparticipant"
)

// loaded is what prepare read for a batch: the chats of the batch's leads
// and their member rows. The handler keeps the chats in step with its
// writes and forgets a chat's members once it changed them, so a lead met
// twice in one batch sees the first event's effect.
type loaded struct {
	chats   map[uuid.UUID]*ent.Chat // by lead
	members map[uuid.UUID][]*ent.ChatParticipant
	fresh   map[uuid.UUID]bool // chats whose members are as read
}

type loadedKey struct{}

// prepare reads the chats of every lead of the batch, and all their member
// rows, with two statements instead of two per event. Nothing is locked:
// the handler's chat update is conditioned on the row_version read (the
// spec's optimistic concurrency), so a chat changed by someone else since
// is MSG_CONCURRENT_UPDATE, as on its own. Messages whose LeadId cannot be
// read are left to their handlers.
func prepare(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
	seen := make(map[uuid.UUID]bool, len(msgs))
	leads := make([]uuid.UUID, 0, len(msgs))
	for _, m := range msgs {
		w, err := consumer.DecodePayload[struct {
			LeadID uuid.UUID `json:"LeadId"`
		}](m)
		if err != nil || w.LeadID == uuid.Nil || seen[w.LeadID] {
			continue
		}
		seen[w.LeadID] = true
		leads = append(leads, w.LeadID)
	}
	if len(leads) == 0 {
		return ctx, nil
	}
	chats, err := tx.Chat.Query().Where(chat.LeadIDIn(leads...)).All(ctx)
	if err != nil {
		return nil, err
	}
	l := &loaded{
		chats:   make(map[uuid.UUID]*ent.Chat, len(chats)),
		members: make(map[uuid.UUID][]*ent.ChatParticipant, len(chats)),
		fresh:   make(map[uuid.UUID]bool, len(chats)),
	}
	ids := make([]uuid.UUID, 0, len(chats))
	twice := map[uuid.UUID]bool{}
	for _, c := range chats {
		if c.LeadID == nil {
			continue
		}
		if _, ok := l.chats[*c.LeadID]; ok {
			twice[*c.LeadID] = true // not ours to pick: the handler reads and reports it
		}
		l.chats[*c.LeadID] = c
		l.fresh[c.ID] = true
		ids = append(ids, c.ID)
	}
	for lead := range twice {
		delete(l.chats, lead)
	}
	if len(ids) > 0 {
		rows, err := tx.ChatParticipant.Query().Where(chatparticipant.ChatIDIn(ids...)).All(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			l.members[r.ChatID] = append(l.members[r.ChatID], r)
		}
	}
	return context.WithValue(ctx, loadedKey{}, l), nil
}

// preparedChat is the lead's chat as prepare read it (and the batch's
// writes moved it), or nil.
func preparedChat(ctx context.Context, lead uuid.UUID) *ent.Chat {
	if l, ok := ctx.Value(loadedKey{}).(*loaded); ok {
		return l.chats[lead]
	}
	return nil
}

// preparedMembers is the chat's member rows as prepare read them, and
// whether they are still as read.
func preparedMembers(ctx context.Context, chatID uuid.UUID) ([]*ent.ChatParticipant, bool) {
	if l, ok := ctx.Value(loadedKey{}).(*loaded); ok && l.fresh[chatID] {
		return l.members[chatID], true
	}
	return nil, false
}

// membersChanged forgets what prepare read of the chat's members: the next
// event of the chat in the batch reads the table.
func membersChanged(ctx context.Context, chatID uuid.UUID) {
	if l, ok := ctx.Value(loadedKey{}).(*loaded); ok {
		delete(l.fresh, chatID)
	}
}
