package messenger

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/chat"
	"github.com/pin-platform/pin/ent/chatparticipant"
	"github.com/pin-platform/pin/schema/uuidarray"
)

// handler applies one lead-participants snapshot to the lead's chat.
type handler struct{ m *metrics }

// testHookBeforeWrite, when set, runs after the handler has read the chat
// and before its first write: tests use it to play a concurrent writer. It
// is nil outside tests.
var testHookBeforeWrite atomic.Pointer[func(ctx context.Context, chatID uuid.UUID)]

// handle is the route's consumer.Handler (spec "Algorithm" steps 2–7). The
// runtime owns the transaction, the idempotency mark, the offset and what a
// returned code means; everything here happens inside tx, and the effects
// outside it (metrics) are registered with AfterCommit.
func (h *handler) handle(ctx context.Context, tx *ent.Tx, m *consumer.Message) (consumer.Outcome, error) {
	log := zerolog.Ctx(ctx)
	s, err := decode(m)
	if err != nil {
		log.Warn().Err(err).Str("code", CodeInvalid.Name).Msg("failed")
		return "", err
	}
	consumer.LogFields(ctx, func(e *zerolog.Event) {
		e.Str("LeadId", s.LeadID.String()).Int64("Version", s.Version)
	})
	log.Debug().Str("LeadId", s.LeadID.String()).Int64("Version", s.Version).
		Int("participants", len(s.Target)).Msg("consumed") // the outcome line carries these at the default level
	for _, u := range s.UnknownRoles {
		log.Warn().Str("LeadId", s.LeadID.String()).Str("UserId", u.UserID.String()).Str("Role", u.Role).
			Msg("unknown role: stored as it came (Guest bucket for access)")
	}
	for _, c := range s.UnknownChanges {
		log.Warn().Str("LeadId", s.LeadID.String()).Str("UserId", c.UserID.String()).Str("ChangeType", c.ChangeType).
			Msg("unknown ChangeType: no-op of the delta, membership follows ActiveParticipants")
	}

	// Step 3: the chat and its members (in a batch, prepare read them).
	c := preparedChat(ctx, s.LeadID)
	if c == nil {
		c, err = tx.Chat.Query().Where(chat.LeadID(s.LeadID)).Only(ctx)
	}
	if ent.IsNotFound(err) {
		log.Info().Str("LeadId", s.LeadID.String()).Int64("Version", s.Version).
			Str("code", CodeChatNotProvisioned.Name).Msg("retry-not-provisioned")
		return "", CodeChatNotProvisioned.Errorf("lead %s has no chat yet", s.LeadID)
	}
	if err != nil {
		return "", fmt.Errorf("read the chat of lead %s: %w", s.LeadID, err)
	}
	consumer.LogFields(ctx, func(e *zerolog.Event) { e.Str("ChatId", c.ID.String()) })

	// Step 4: version guard.
	if c.LeadMemberVersion != nil && s.Version <= *c.LeadMemberVersion {
		applied := *c.LeadMemberVersion
		consumer.LogFields(ctx, func(e *zerolog.Event) { e.Int64("appliedVersion", applied) })
		consumer.AfterCommit(ctx, h.m.stale.Inc)
		return SkippedStale, nil
	}

	rows, ok := preparedMembers(ctx, c.ID)
	if !ok {
		if rows, err = tx.ChatParticipant.Query().Where(chatparticipant.ChatID(c.ID)).All(ctx); err != nil {
			return "", fmt.Errorf("read the members of chat %s: %w", c.ID, err)
		}
	}
	byUser := make(map[uuid.UUID]*ent.ChatParticipant, len(rows))
	var current []member
	for _, r := range rows {
		byUser[r.UserID] = r
		if r.RemovedAt == nil {
			current = append(current, member{UserID: r.UserID, Role: r.Role})
		}
	}

	// Step 5: the diff against ActiveParticipants.
	d := reconcile(s.Target, current)

	if hook := testHookBeforeWrite.Load(); hook != nil {
		(*hook)(ctx, c.ID)
	}

	// Step 7 first: claim the chat row. The update is conditioned on the
	// row_version we read; a concurrent writer either committed since (the
	// condition fails now) or holds the row (we wait for it, then the
	// condition fails). Either way we return MSG_CONCURRENT_UPDATE and the
	// runtime re-runs the message in a fresh transaction, which re-reads the
	// chat and usually finds its Version stale. Claiming before touching the
	// members means two writers never race on chat_participants. Every write
	// of the chat row moves row_version, and every change of the members
	// comes with one.
	if b := batchOf(ctx); b != nil && ok {
		// A prepared batch: the claim, and every write after it, is
		// queued; flush claims all of the batch's chats at once, with the
		// same condition, and writes.
		b.claim(c, s.Version, m)
		if !d.empty() {
			b.apply(c.ID, m.MessageID, s, d, byUser)
		}
		return h.synced(ctx, d), nil
	}
	n, err := tx.Chat.Update().
		Where(chat.ID(c.ID), chat.RowVersion(c.RowVersion)).
		SetLeadMemberVersion(s.Version).
		AddRowVersion(1).
		Save(ctx)
	if err != nil {
		return "", fmt.Errorf("update chat %s: %w", c.ID, err)
	}
	if n == 0 {
		err := CodeConcurrentUpdate.Errorf("chat %s moved past row_version %d since it was read", c.ID, c.RowVersion)
		log.Warn().Err(err).Str("LeadId", s.LeadID.String()).Str("ChatId", c.ID.String()).
			Int64("Version", s.Version).Str("code", CodeConcurrentUpdate.Name).Msg("failed")
		return "", err
	}

	if !d.empty() {
		if err := h.apply(ctx, tx, c.ID, m.MessageID, s, d, byUser); err != nil {
			return "", err
		}
	}
	return h.synced(ctx, d), nil
}

// synced records a synced message's counts: on its outcome line, and in
// the metrics once committed.
func (h *handler) synced(ctx context.Context, d diff) consumer.Outcome {
	added, removed, roles := len(d.Add), len(d.Remove), len(d.Roles)
	consumer.LogFields(ctx, func(e *zerolog.Event) {
		e.Int("added", added).Int("removed", removed).Int("roleChanged", roles)
	})
	consumer.AfterCommit(ctx, func() {
		h.m.added.Add(float64(added))
		h.m.removed.Add(float64(removed))
	})
	return Synced
}

// pushRow is the chat_updates row of the diff d, applied for snapshot s:
// the active members receive the update, the removed ones lose their
// subscription.
func pushRow(tx *ent.Tx, chatID uuid.UUID, s snapshot, d diff) *ent.ChatPushCreate {
	return tx.ChatPush.Create().
		SetChatID(chatID).
		SetRecipientUserIds(uuidarray.UUIDs(userIDs(s.Target))).
		SetRevokedUserIds(uuidarray.UUIDs(userIDs(d.Remove)))
}

// factRow is the chat_events row of fact f of the snapshot s (message
// messageID) in chat chatID.
func factRow(tx *ent.Tx, chatID, messageID uuid.UUID, s snapshot, f fact) *ent.ChatEventCreate {
	return tx.ChatEvent.Create().
		SetChatID(chatID).
		SetType(f.Type).
		SetUserID(f.UserID).
		SetRole(f.Role).
		SetNillablePreviousRole(f.PreviousRole).
		SetOccurredAt(s.ChangedAt).
		SetSourceMessageID(messageID)
}

// apply writes a non-empty diff: the members (step 5), the feed facts and
// the realtime outbox row with its notification (step 6).
func (h *handler) apply(ctx context.Context, tx *ent.Tx, chatID, messageID uuid.UUID, s snapshot, d diff,
	byUser map[uuid.UUID]*ent.ChatParticipant) error {
	now := time.Now()

	// Add: reactivate the member's row when there is one (MSG-4: one
	// row per chat and user, soft-removed and brought back; joined_at then
	// marks the current membership's start, the feed keeps the earlier
	// ones), else insert.
	var inserts []*ent.ChatParticipantCreate
	for _, a := range d.Add {
		if r, ok := byUser[a.UserID]; ok {
			if err := tx.ChatParticipant.Update().Where(chatparticipant.ID(r.ID)).
				SetRole(a.Role).ClearRemovedAt().SetJoinedAt(now).
				Exec(ctx); err != nil {
				return fmt.Errorf("reactivate member %s of chat %s: %w", a.UserID, chatID, err)
			}
			continue
		}
		inserts = append(inserts, tx.ChatParticipant.Create().
			SetChatID(chatID).SetUserID(a.UserID).SetRole(a.Role).SetJoinedAt(now))
	}
	for _, part := range consumer.Chunks(inserts, memberParams) {
		if err := tx.ChatParticipant.CreateBulk(part...).Exec(ctx); err != nil {
			return fmt.Errorf("add members to chat %s: %w", chatID, err)
		}
	}

	// Remove: soft (MSG-5); the row and the chat's history stay.
	if len(d.Remove) > 0 {
		ids := make([]uuid.UUID, len(d.Remove))
		for i, r := range d.Remove {
			ids[i] = byUser[r.UserID].ID
		}
		for _, part := range consumer.Chunks(ids, 1) {
			if _, err := tx.ChatParticipant.Update().
				Where(chatparticipant.IDIn(part...), chatparticipant.RemovedAtIsNil()).
				SetRemovedAt(now).
				Save(ctx); err != nil {
				return fmt.Errorf("remove members of chat %s: %w", chatID, err)
			}
		}
	}

	for _, r := range d.Roles {
		if err := tx.ChatParticipant.Update().Where(chatparticipant.ID(byUser[r.UserID].ID)).SetRole(r.To).Exec(ctx); err != nil {
			return fmt.Errorf("change the role of member %s of chat %s: %w", r.UserID, chatID, err)
		}
	}

	// Feed: one fact per change (MSG-6).
	facts := d.facts()
	events := make([]*ent.ChatEventCreate, len(facts))
	for i, f := range facts {
		events[i] = factRow(tx, chatID, messageID, s, f)
	}
	for _, part := range consumer.Chunks(events, factParams) {
		if err := tx.ChatEvent.CreateBulk(part...).Exec(ctx); err != nil {
			return fmt.Errorf("write the feed of chat %s: %w", chatID, err)
		}
	}

	// Realtime, persist-then-push: the outbox row is written with the
	// change, and pg_notify queues "chat_updates" with its id. PostgreSQL
	// delivers a notification only when its transaction commits, and drops
	// it when the transaction (or the savepoint it was queued under, as in
	// the runtime's re-drive of parked messages) rolls back: listeners are
	// never told about a change that is not in the database, and the row
	// stays for a pusher that was not listening (pushed_at IS NULL).
	push, err := pushRow(tx, chatID, s, d).Save(ctx)
	if err != nil {
		return fmt.Errorf("write the chat_updates row of chat %s: %w", chatID, err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_notify('chat_updates', $1)`, push.ID.String()); err != nil {
		return fmt.Errorf("notify chat_updates: %w", err)
	}
	return nil
}
