package messenger

import (
	"context"
	"fmt"
	"maps"
	"time"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/chat"
	"github.com/pin-platform/pin/ent/chatparticipant"
	"github.com/pin-platform/pin/schema/uuidarray"
)

// writes are the writes a transaction's handlers queued on its view, after
// claiming a chat; write makes them, a statement per kind.
type writes struct {
	claims     map[uuid.UUID]*claim               // the chats the transaction writes, by id
	inserts    map[uuid.UUID]*ent.ChatParticipant // new member rows, by id
	updates    map[uuid.UUID]*ent.ChatParticipant // changed member rows, by id
	events     []queuedFact
	pushes     []queuedPush
	lastPushAt time.Time // created_at of the last queued push
	notify     []string  // chat_updates ids, in order
}

func newWrites() writes {
	return writes{
		claims:  map[uuid.UUID]*claim{},
		inserts: map[uuid.UUID]*ent.ChatParticipant{},
		updates: map[uuid.UUID]*ent.ChatParticipant{},
	}
}

// claim is the transaction's write of one chat, for all of its events of
// the chat at once.
type claim struct {
	chat    *ent.Chat // as the view sees it (moved by each event)
	read    int64     // the row_version read: the update's condition
	n       int64     // events of the chat: row_version moves by n
	version int64     // lead_member_version after the transaction
	// The first of the chat's events: a lost race is its failure, logged
	// as the spec's "failed" line with its logger and payload Version.
	first        *consumer.Message
	firstLog     *zerolog.Logger
	firstVersion int64
	lead         uuid.UUID
}

// claim queues the chat's update for snapshot s of message m (ctx is the
// handler's): the chat moves in the view (row_version + 1,
// lead_member_version), write writes it, conditioned on the row_version
// read.
func (v *view) claim(ctx context.Context, c *ent.Chat, s snapshot, m *consumer.Message) {
	cl := v.claims[c.ID]
	if cl == nil {
		cl = &claim{chat: c, read: c.RowVersion, first: m, firstLog: zerolog.Ctx(ctx), firstVersion: s.Version, lead: s.LeadID}
		v.claims[c.ID] = cl
	}
	cl.n++
	cl.version = s.Version
	c.RowVersion++
	version := s.Version
	c.LeadMemberVersion = &version
}

// apply queues a non-empty diff of the chat, applied for snapshot s
// (message messageID): the members (step 5) change in the view, the feed
// facts and the realtime outbox row with its notification (step 6) are
// queued.
func (v *view) apply(chatID, messageID uuid.UUID, s snapshot, d diff, byUser map[uuid.UUID]*ent.ChatParticipant) {
	now := time.Now()
	changed := func(r *ent.ChatParticipant) {
		if _, ok := v.inserts[r.ID]; !ok {
			v.updates[r.ID] = r
		}
	}
	// Add: reactivate the member's row when there is one (MSG-4: one row
	// per chat and user, soft-removed and brought back; joined_at then
	// marks the current membership's start, the feed keeps the earlier
	// ones), else insert.
	for _, a := range d.Add {
		if r, ok := byUser[a.UserID]; ok {
			r.Role, r.RemovedAt, r.JoinedAt = a.Role, nil, now
			changed(r)
			continue
		}
		r := &ent.ChatParticipant{ID: uuid.New(), ChatID: chatID, UserID: a.UserID, Role: a.Role, JoinedAt: now}
		v.members[chatID] = append(v.members[chatID], r)
		v.inserts[r.ID] = r
	}
	for _, rm := range d.Remove { // soft (MSG-5): the row and the chat's history stay
		r := byUser[rm.UserID]
		t := now
		r.RemovedAt = &t
		changed(r)
	}
	for _, rc := range d.Roles {
		r := byUser[rc.UserID]
		r.Role = rc.To
		changed(r)
	}
	for _, f := range d.facts() { // one fact per change (MSG-6)
		v.events = append(v.events, queuedFact{chatID, messageID, s.ChangedAt, f})
	}
	id := uuid.New()
	// created_at orders a chat's updates for the pusher: strictly
	// increasing within the transaction (the rows of one multi-row INSERT
	// would otherwise share a microsecond), as they are between
	// transactions.
	at := time.Now().Truncate(time.Microsecond)
	if !at.After(v.lastPushAt) {
		at = v.lastPushAt.Add(time.Microsecond)
	}
	v.lastPushAt = at
	v.pushes = append(v.pushes, queuedPush{id, chatID, at, userIDs(s.Target), userIDs(d.Remove)})
	v.notify = append(v.notify, id.String())
}

// queuedPush is the chat_updates row of a diff: to the active members
// (recipients), and the removed ones' revocation.
type queuedPush struct {
	id, chatID          uuid.UUID
	at                  time.Time
	recipients, revoked []uuid.UUID
}

func (p queuedPush) create(tx *ent.Tx) *ent.ChatPushCreate {
	return tx.ChatPush.Create().SetID(p.id).SetCreatedAt(p.at).SetChatID(p.chatID).
		SetRecipientUserIds(uuidarray.UUIDs(p.recipients)).
		SetRevokedUserIds(uuidarray.UUIDs(p.revoked))
}

// queuedFact is the chat_events row of fact f, of message messageID in
// chat chatID, at the snapshot's ChangedAt.
type queuedFact struct {
	chatID, messageID uuid.UUID
	at                time.Time
	f                 fact
}

func (q queuedFact) create(tx *ent.Tx) *ent.ChatEventCreate {
	return tx.ChatEvent.Create().
		SetChatID(q.chatID).
		SetType(q.f.Type).
		SetUserID(q.f.UserID).
		SetRole(q.f.Role).
		SetNillablePreviousRole(q.f.PreviousRole).
		SetOccurredAt(q.at).
		SetSourceMessageID(q.messageID)
}

// write is the service's Write: it writes what the transaction queued, a statement per kind: it
// claims the chats (claimChats, one conditional UPDATE), then writes the
// new and changed member rows (one upsert), the feed facts, the
// chat_updates rows, and one pg_notify per row (one SELECT). With the
// chats claimed nobody else writes their members meanwhile; any other
// surprise fails the transaction, whose messages the runtime then runs
// again in smaller transactions.
func write(ctx context.Context, tx *ent.Tx, v *view) error {
	w := &v.writes
	if err := w.claimChats(ctx, tx); err != nil {
		return err
	}
	if len(w.inserts)+len(w.updates) > 0 {
		// New and changed member rows in one upsert on the primary key:
		// a changed row conflicts on its id and takes the new role,
		// joined_at and removed_at; a new one is inserted (and a second
		// row for a (chat, user) pair fails the unique index, and the
		// transaction, as a plain INSERT would). Member rows are never
		// deleted (removal is soft, MSG-5); one deleted by hand meanwhile
		// would be written back as the view sees it.
		rows := make(map[uuid.UUID]*ent.ChatParticipant, len(w.inserts)+len(w.updates))
		maps.Copy(rows, w.inserts)
		maps.Copy(rows, w.updates)
		ids := consumer.SortedIDs(rows)
		creates := make([]*ent.ChatParticipantCreate, len(ids))
		for i, id := range ids {
			r := rows[id]
			creates[i] = tx.ChatParticipant.Create().
				SetID(r.ID).SetChatID(r.ChatID).SetUserID(r.UserID).SetRole(r.Role).
				SetJoinedAt(r.JoinedAt).SetNillableRemovedAt(r.RemovedAt)
		}
		for _, part := range consumer.Chunks(creates, memberParams) {
			if err := tx.ChatParticipant.CreateBulk(part...).
				OnConflictColumns(chatparticipant.FieldID).
				Update(func(u *ent.ChatParticipantUpsert) { u.UpdateRole().UpdateJoinedAt().UpdateRemovedAt() }).
				Exec(ctx); err != nil {
				return fmt.Errorf("write the transaction's %d member rows: %w", len(ids), err)
			}
		}
	}
	events := make([]*ent.ChatEventCreate, len(w.events))
	for i, q := range w.events {
		events[i] = q.create(tx)
	}
	for _, part := range consumer.Chunks(events, factParams) {
		if err := tx.ChatEvent.CreateBulk(part...).Exec(ctx); err != nil {
			return fmt.Errorf("write the transaction's %d feed facts: %w", len(w.events), err)
		}
	}
	if len(w.pushes) > 0 {
		pushes := make([]*ent.ChatPushCreate, len(w.pushes))
		for i, p := range w.pushes {
			pushes[i] = p.create(tx)
		}
		for _, part := range consumer.Chunks(pushes, pushParams) {
			if err := tx.ChatPush.CreateBulk(part...).Exec(ctx); err != nil {
				return fmt.Errorf("write the transaction's %d chat_updates rows: %w", len(w.pushes), err)
			}
		}
		// Realtime, persist-then-push: the outbox rows are written with
		// the change, and pg_notify queues "chat_updates" with each id, in
		// order. PostgreSQL delivers a notification only when its
		// transaction commits, and drops it when the transaction (or the
		// savepoint it was queued under, as in the runtime's re-drive of
		// parked messages) rolls back: listeners are never told about a
		// change that is not in the database, and the row stays for a
		// pusher that was not listening (pushed_at IS NULL).
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify('chat_updates', id) FROM unnest($1::text[]) WITH ORDINALITY AS u(id, n) ORDER BY n`,
			pq.Array(w.notify)); err != nil {
			return fmt.Errorf("notify chat_updates: %w", err)
		}
	}
	return nil
}

// claimChats writes every chat of the transaction with one conditional
// UPDATE: row_version moves by the chat's events and lead_member_version
// becomes the last one's — where row_version is still the one Read
// read. A chat that someone else changed since (committed, or committing
// while this statement waits for its row) is not updated and not
// returned: that is the spec's concurrent edit, MSG_CONCURRENT_UPDATE of
// the transaction's first event of the chat (re-run at once, it re-reads
// the chat). The rows are locked first, in id order, by a sub-select (FOR
// NO KEY UPDATE: it does not block the foreign-key checks of inserts
// referencing chats); the UPDATE's own scan would lock them in whatever
// order its plan reads them. A chat's events share a partition (the key is
// the LeadId), but an old owner still draining and the new one may
// overlap.
func (w *writes) claimChats(ctx context.Context, tx *ent.Tx) error {
	if len(w.claims) == 0 {
		return nil
	}
	ids := consumer.SortedIDs(w.claims)
	in := make([]any, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	caseOf := func(v func(*claim) any) sql.Querier {
		return consumer.CaseOf(chat.FieldID, ids, w.claims, "bigint", v)
	}
	query, args := sql.Dialect(dialect.Postgres).Update(chat.Table).
		Set(chat.FieldLeadMemberVersion, caseOf(func(cl *claim) any { return cl.version })).
		Set(chat.FieldRowVersion, sql.ExprFunc(func(sb *sql.Builder) {
			sb.Ident(chat.FieldRowVersion).WriteString(" + ").Join(caseOf(func(cl *claim) any { return cl.n }))
		})).
		Where(sql.And(
			sql.In(chat.FieldID, sql.Dialect(dialect.Postgres).Select(chat.FieldID).From(sql.Table(chat.Table)).
				Where(sql.In(chat.FieldID, in...)).OrderBy(chat.FieldID).For(sql.LockNoKeyUpdate)),
			sql.P(func(sb *sql.Builder) {
				sb.Ident(chat.FieldRowVersion).WriteString(" = ").Join(caseOf(func(cl *claim) any { return cl.read }))
			}),
		)).
		Returning(chat.FieldID).
		Query()
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("update the transaction's %d chats: %w", len(ids), err)
	}
	defer rows.Close()
	updated := make(map[uuid.UUID]bool, len(ids))
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("update the transaction's %d chats: %w", len(ids), err)
		}
		updated[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("update the transaction's %d chats: %w", len(ids), err)
	}
	for _, id := range ids {
		if cl := w.claims[id]; !updated[id] {
			err := CodeConcurrentUpdate.Errorf("chat %s moved past row_version %d since it was read", id, cl.read)
			cl.firstLog.Warn().Err(err).Str("LeadId", cl.lead.String()).Str("ChatId", id.String()).
				Int64("Version", cl.firstVersion).Str("code", CodeConcurrentUpdate.Name).Msg("failed")
			return consumer.FailMessage(cl.first, err)
		}
	}
	return nil
}

// Bind parameters per row of the bulk statements (consumer.Chunks): a
// member row (id, chat, user, role, joined_at, removed_at), a feed fact
// (with its id and every column), a chat_updates row.
const (
	memberParams = 6
	factParams   = 9
	pushParams   = 5
)
