package messenger

import (
	"context"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/chat"
	"github.com/pin-platform/pin/ent/chatparticipant"
)

// view is what its Read read for a transaction — the chats of its messages'
// leads and the member rows a snapshot can touch — with the writes its
// handlers queued (writer.go). The queued writes keep the chats and the
// member rows in step, so a lead met twice in one transaction sees the
// first event's effect.
type view struct {
	chats   map[uuid.UUID]*ent.Chat              // by lead
	members map[uuid.UUID][]*ent.ChatParticipant // by chat
	writes
}

// read reads the chats of every lead of msgs, and their member rows, with
// two statements. Of the rows it reads the active ones (what the diff
// compares with, and what a snapshot may remove or re-role) and the
// removed ones of users that some snapshot of the transaction lists (an
// add reactivates the user's row, MSG-4): the removed rows of everyone
// else never matter, and they accumulate over a chat's life (under the
// benchmark's load, half a chat's rows by the end). Nothing is locked
// here: the chats are claimed at the end (write), conditioned on the
// row_version read — the spec's optimistic concurrency. Messages whose
// payload does not decode, or has no LeadId, are left to their handlers
// (read decodes the handler's type, which the handler then reuses: it
// reports the same error); with none left the view is empty.
func read(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (*view, error) {
	seen := make(map[uuid.UUID]bool, len(msgs))
	leads := make([]uuid.UUID, 0, len(msgs))
	seenUser := make(map[uuid.UUID]bool, 4*len(msgs))
	var users []uuid.UUID
	for _, m := range msgs {
		w, err := consumer.DecodePayload[payload](m) // the handler's, decoded once
		if err != nil || w.LeadID == uuid.Nil {
			continue
		}
		for _, p := range w.ActiveParticipants {
			if !seenUser[p.UserID] {
				seenUser[p.UserID] = true
				users = append(users, p.UserID)
			}
		}
		if !seen[w.LeadID] {
			seen[w.LeadID] = true
			leads = append(leads, w.LeadID)
		}
	}
	v := &view{
		chats:   map[uuid.UUID]*ent.Chat{},
		members: map[uuid.UUID][]*ent.ChatParticipant{},
		writes:  newWrites(),
	}
	if len(leads) == 0 {
		return v, nil
	}
	chats, err := tx.Chat.Query().Where(consumer.AnyOf(chat.FieldLeadID, "uuid", consumer.UUIDArray(leads))).All(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]uuid.UUID, 0, len(chats))
	for _, c := range chats {
		if c.LeadID == nil {
			continue
		}
		v.chats[*c.LeadID] = c // lead_id is unique (ux_chats_lead_id)
		ids = append(ids, c.ID)
	}
	if len(ids) == 0 {
		return v, nil
	}
	rows, err := tx.ChatParticipant.Query().Where(
		consumer.AnyOf(chatparticipant.FieldChatID, "uuid", consumer.UUIDArray(ids)),
		chatparticipant.Or(chatparticipant.RemovedAtIsNil(), consumer.AnyOf(chatparticipant.FieldUserID, "uuid", consumer.UUIDArray(users))),
	).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		v.members[r.ChatID] = append(v.members[r.ChatID], r)
	}
	return v, nil
}
