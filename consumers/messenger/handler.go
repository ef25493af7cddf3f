package messenger

import (
	"context"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
)

// handler applies one lead-participants snapshot to the lead's chat.
type handler struct{ m *metrics }

// testHookBeforeWrite, when set, runs after the handler has decided on the
// chat as Read read it and before the transaction's writer claims it:
// tests use it to play a concurrent writer. It is nil outside tests.
var testHookBeforeWrite atomic.Pointer[func(ctx context.Context, chatID uuid.UUID)]

// handle is the route's decision (spec "Algorithm" steps 2–7): it
// decides on the view its Read read (view.go) and queues the writes, which
// the transaction's writer makes before the commit (writer.go). The
// runtime owns the transaction, the idempotency mark, the offset and what
// a returned code means; the effects outside the transaction (metrics) are
// registered with AfterCommit.
func (h *handler) handle(ctx context.Context, v *view, m *consumer.Message) (consumer.Outcome, error) {
	log := zerolog.Ctx(ctx)
	s, err := decode(m)
	if err != nil {
		log.Warn().Err(err).Str("code", CodeInvalid.Name).Msg("failed")
		return "", err
	}
	m.LogFields(func(e *zerolog.Event) {
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

	// Step 3: the chat and its members, as Read read them.
	c := v.chats[s.LeadID]
	if c == nil {
		log.Info().Str("LeadId", s.LeadID.String()).Int64("Version", s.Version).
			Str("code", CodeChatNotProvisioned.Name).Msg("retry-not-provisioned")
		return "", CodeChatNotProvisioned.Errorf("lead %s has no chat yet", s.LeadID)
	}
	m.LogFields(func(e *zerolog.Event) { e.Str("ChatId", c.ID.String()) })

	// Step 4: version guard.
	if c.LeadMemberVersion != nil && s.Version <= *c.LeadMemberVersion {
		applied := *c.LeadMemberVersion
		m.LogFields(func(e *zerolog.Event) { e.Int64("appliedVersion", applied) })
		m.AfterCommit(h.m.stale.Inc)
		return SkippedStale, nil
	}

	rows := v.members[c.ID]
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

	// Steps 6–7, queued. The claim of the chat is the writer's first
	// statement, conditioned on the row_version read (writer.go,
	// claimChats): a concurrent writer makes it MSG_CONCURRENT_UPDATE,
	// re-run at once on a fresh read. Claiming before touching the members
	// means two writers never race on chat_participants.
	v.claim(ctx, c, s, m)
	if !d.empty() {
		v.apply(c.ID, m.MessageID, s, d, byUser)
	}
	return h.synced(m, d), nil
}

// synced records a synced message's counts: on its outcome line, and in
// the metrics once committed.
func (h *handler) synced(m *consumer.Message, d diff) consumer.Outcome {
	added, removed, roles := len(d.Add), len(d.Remove), len(d.Roles)
	m.LogFields(func(e *zerolog.Event) {
		e.Int("added", added).Int("removed", removed).Int("roleChanged", roles)
	})
	m.AfterCommit(func() {
		h.m.added.Add(float64(added))
		h.m.removed.Add(float64(removed))
	})
	return Synced
}
