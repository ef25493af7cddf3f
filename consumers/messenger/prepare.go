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

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/chat"
	"github.com/pin-platform/pin/ent/chatparticipant"
)

// batch is what prepare read for a batch — the chats of the batch's leads
// and all their member rows — and the writes its handlers queued after
// claiming a chat. The handler keeps the chats and the member rows in step
// with its writes, so a lead met twice in one batch sees the first event's
// effect.
type batch struct {
	tx      *ent.Tx
	chats   map[uuid.UUID]*ent.Chat // by lead
	loaded  map[uuid.UUID]bool      // chats whose members were read
	members map[uuid.UUID][]*ent.ChatParticipant

	claims     map[uuid.UUID]*claim               // the chats the batch writes, by id
	inserts    map[uuid.UUID]*ent.ChatParticipant // new member rows, by id
	updates    map[uuid.UUID]*ent.ChatParticipant // changed member rows, by id
	events     []*ent.ChatEventCreate
	pushes     []*ent.ChatPushCreate
	lastPushAt time.Time // created_at of the last queued push
	notify     []string  // chat_updates ids, in order
}

// claim is the batch's write of one chat: what a handler's chat update
// would do, for all of the batch's events of the chat at once.
type claim struct {
	chat    *ent.Chat         // as the batch sees it (moved by each event)
	read    int64             // the row_version read: the update's condition
	n       int64             // events of the chat: row_version moves by n
	first   *consumer.Message // the first of them: a lost race is its
	version int64             // lead_member_version after the batch
}

type batchKey struct{}

// prepare reads the chats of every lead of the batch, and all their member
// rows, with two statements instead of two per event. Nothing is locked
// here: the chats are claimed at the end (flush), conditioned on the
// row_version read — the spec's optimistic concurrency — and a chat that
// someone else changed since is MSG_CONCURRENT_UPDATE of the batch's first
// event of it, as on its own. Messages whose payload does not decode, or
// has no LeadId, are left to their handlers (prepare decodes the handler's
// type, which the handler then reuses: it reports the same error).
func prepare(ctx context.Context, tx *ent.Tx, msgs []*consumer.Message) (context.Context, error) {
	seen := make(map[uuid.UUID]bool, len(msgs))
	leads := make([]uuid.UUID, 0, len(msgs))
	for _, m := range msgs {
		w, err := consumer.DecodePayload[payload](m) // the handler's, decoded once
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
	b := &batch{
		tx:      tx,
		chats:   make(map[uuid.UUID]*ent.Chat, len(chats)),
		loaded:  make(map[uuid.UUID]bool, len(chats)),
		members: make(map[uuid.UUID][]*ent.ChatParticipant, len(chats)),
		claims:  map[uuid.UUID]*claim{},
		inserts: map[uuid.UUID]*ent.ChatParticipant{},
		updates: map[uuid.UUID]*ent.ChatParticipant{},
	}
	ids := make([]uuid.UUID, 0, len(chats))
	for _, c := range chats {
		if c.LeadID == nil {
			continue
		}
		b.chats[*c.LeadID] = c // lead_id is unique (ux_chats_lead_id)
		b.loaded[c.ID] = true
		ids = append(ids, c.ID)
	}
	if len(ids) > 0 {
		rows, err := tx.ChatParticipant.Query().Where(chatparticipant.ChatIDIn(ids...)).All(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			b.members[r.ChatID] = append(b.members[r.ChatID], r)
		}
	}
	if !consumer.BeforeCommit(ctx, b.flush) {
		return ctx, nil
	}
	return context.WithValue(ctx, batchKey{}, b), nil
}

func batchOf(ctx context.Context) *batch {
	b, _ := ctx.Value(batchKey{}).(*batch)
	return b
}

// preparedChat is the lead's chat as prepare read it (and the batch's
// writes moved it), or nil.
func preparedChat(ctx context.Context, lead uuid.UUID) *ent.Chat {
	if b := batchOf(ctx); b != nil {
		return b.chats[lead]
	}
	return nil
}

// preparedMembers is the chat's member rows as the batch sees them, and
// whether prepare read them.
func preparedMembers(ctx context.Context, chatID uuid.UUID) ([]*ent.ChatParticipant, bool) {
	if b := batchOf(ctx); b != nil && b.loaded[chatID] {
		return b.members[chatID], true
	}
	return nil, false
}

// claim is the handler's conditional chat update, queued: the chat moves
// in memory (row_version + 1, lead_member_version), flush writes it.
func (b *batch) claim(c *ent.Chat, version int64, m *consumer.Message) {
	cl := b.claims[c.ID]
	if cl == nil {
		cl = &claim{chat: c, read: c.RowVersion, first: m}
		b.claims[c.ID] = cl
	}
	cl.n++
	cl.version = version
	c.RowVersion++
	v := version
	c.LeadMemberVersion = &v
}

// apply is handler.apply for a chat whose members prepare read: the member
// rows change in memory and every write is queued.
func (b *batch) apply(chatID, messageID uuid.UUID, s snapshot, d diff, byUser map[uuid.UUID]*ent.ChatParticipant) {
	now := time.Now()
	changed := func(r *ent.ChatParticipant) {
		if _, ok := b.inserts[r.ID]; !ok {
			b.updates[r.ID] = r
		}
	}
	for _, a := range d.Add {
		if r, ok := byUser[a.UserID]; ok { // reactivate (MSG-4)
			r.Role, r.RemovedAt, r.JoinedAt = a.Role, nil, now
			changed(r)
			continue
		}
		r := &ent.ChatParticipant{ID: uuid.New(), ChatID: chatID, UserID: a.UserID, Role: a.Role, JoinedAt: now}
		b.members[chatID] = append(b.members[chatID], r)
		b.inserts[r.ID] = r
	}
	for _, rm := range d.Remove { // soft (MSG-5)
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
	for _, f := range d.facts() {
		b.events = append(b.events, factRow(b.tx, chatID, messageID, s, f))
	}
	id := uuid.New()
	// created_at orders a chat's updates for the pusher: strictly
	// increasing within the batch (the rows of one multi-row INSERT would
	// otherwise share a microsecond), as they are between transactions.
	at := time.Now().Truncate(time.Microsecond)
	if !at.After(b.lastPushAt) {
		at = b.lastPushAt.Add(time.Microsecond)
	}
	b.lastPushAt = at
	b.pushes = append(b.pushes, pushRow(b.tx, chatID, s, d).SetID(id).SetCreatedAt(at))
	b.notify = append(b.notify, id.String())
}

// flush writes what the batch queued, a statement per kind: it claims the
// chats (claimChats, one conditional UPDATE), then writes the new and
// changed member rows (one upsert), the feed facts, the chat_updates rows,
// and one pg_notify per row (one SELECT). With the chats claimed nobody
// else writes their members meanwhile; any other surprise fails the batch,
// which the runtime then replays one message at a time.
func (b *batch) flush(ctx context.Context) error {
	if err := b.claimChats(ctx); err != nil {
		return err
	}
	if len(b.inserts)+len(b.updates) > 0 {
		// New and changed member rows in one upsert on the primary key:
		// a changed row conflicts on its id and takes the new role,
		// joined_at and removed_at; a new one is inserted (and a second
		// row for a (chat, user) pair fails the unique index, and the
		// batch, as a plain INSERT would). Member rows are never deleted
		// (removal is soft, MSG-5); one deleted by hand meanwhile
		// would be written back as the batch sees it.
		rows := make(map[uuid.UUID]*ent.ChatParticipant, len(b.inserts)+len(b.updates))
		maps.Copy(rows, b.inserts)
		maps.Copy(rows, b.updates)
		ids := consumer.SortedIDs(rows)
		creates := make([]*ent.ChatParticipantCreate, len(ids))
		for i, id := range ids {
			r := rows[id]
			creates[i] = b.tx.ChatParticipant.Create().
				SetID(r.ID).SetChatID(r.ChatID).SetUserID(r.UserID).SetRole(r.Role).
				SetJoinedAt(r.JoinedAt).SetNillableRemovedAt(r.RemovedAt)
		}
		for _, part := range consumer.Chunks(creates, memberParams) {
			if err := b.tx.ChatParticipant.CreateBulk(part...).
				OnConflictColumns(chatparticipant.FieldID).
				Update(func(u *ent.ChatParticipantUpsert) { u.UpdateRole().UpdateJoinedAt().UpdateRemovedAt() }).
				Exec(ctx); err != nil {
				return fmt.Errorf("write the batch's %d member rows: %w", len(ids), err)
			}
		}
	}
	if len(b.events) > 0 {
		for _, part := range consumer.Chunks(b.events, factParams) {
			if err := b.tx.ChatEvent.CreateBulk(part...).Exec(ctx); err != nil {
				return fmt.Errorf("write the batch's %d feed facts: %w", len(b.events), err)
			}
		}
	}
	if len(b.pushes) > 0 {
		for _, part := range consumer.Chunks(b.pushes, pushParams) {
			if err := b.tx.ChatPush.CreateBulk(part...).Exec(ctx); err != nil {
				return fmt.Errorf("write the batch's %d chat_updates rows: %w", len(b.pushes), err)
			}
		}
		// Persist-then-push, as on its own: queued now, delivered by
		// PostgreSQL when the transaction commits, dropped if it does not.
		if _, err := b.tx.ExecContext(ctx, `SELECT pg_notify('chat_updates', id) FROM unnest($1::text[]) WITH ORDINALITY AS u(id, n) ORDER BY n`,
			pq.Array(b.notify)); err != nil {
			return fmt.Errorf("notify chat_updates: %w", err)
		}
	}
	return nil
}

// claimChats writes every chat of the batch with one conditional UPDATE:
// row_version moves by the chat's events and lead_member_version becomes
// the last one's — where row_version is still the one prepare read, the
// condition of the per-message UPDATE. A chat that someone else changed
// since (committed, or committing while this statement waits for its row)
// is not updated and not returned: that is the spec's concurrent edit,
// MSG_CONCURRENT_UPDATE of the batch's first event of the chat (re-run at
// once on its own, it re-reads the chat). The rows are locked first, in id
// order, by a sub-select (FOR NO KEY UPDATE, as the per-message UPDATE
// takes: it does not block the foreign-key checks of inserts referencing
// chats); the UPDATE's own scan would lock them in whatever order its plan
// reads them. A chat's events share a partition (the key is the LeadId),
// but an old owner still draining and the new one may overlap.
func (b *batch) claimChats(ctx context.Context) error {
	if len(b.claims) == 0 {
		return nil
	}
	ids := consumer.SortedIDs(b.claims)
	in := make([]any, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	caseOf := func(v func(*claim) any) sql.Querier {
		return consumer.CaseOf(chat.FieldID, ids, b.claims, "bigint", v)
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
	rows, err := b.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("update the batch's %d chats: %w", len(ids), err)
	}
	defer rows.Close()
	updated := make(map[uuid.UUID]bool, len(ids))
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("update the batch's %d chats: %w", len(ids), err)
		}
		updated[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("update the batch's %d chats: %w", len(ids), err)
	}
	for _, id := range ids {
		if cl := b.claims[id]; !updated[id] {
			return consumer.FailMessage(cl.first, CodeConcurrentUpdate.Errorf("chat %s moved past row_version %d since it was read", id, cl.read))
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
