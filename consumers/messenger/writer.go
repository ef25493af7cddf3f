package messenger

import (
	"context"
	"fmt"
	"maps"
	"time"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/pin-platform/pin/consumers/consumer"
	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/chatevent"
	"github.com/pin-platform/pin/ent/chatparticipant"
	"github.com/pin-platform/pin/ent/chatpush"
)

// writes are the writes a transaction's handlers queued on its view, after
// claiming a chat; write makes them in two statements: the claim, then
// the rows (rowsSQL).
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
		r := &ent.ChatParticipant{ID: consumer.NewRowID(), ChatID: chatID, UserID: a.UserID, Role: a.Role, JoinedAt: now}
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
	id := consumer.NewRowID()
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

// queuedFact is the chat_events row of fact f, of message messageID in
// chat chatID, at the snapshot's ChangedAt.
type queuedFact struct {
	chatID, messageID uuid.UUID
	at                time.Time
	f                 fact
}

// write is the service's Write: it writes what the transaction queued, in
// two round trips whatever the number of rows (each part of one text,
// consumer.InsertRows): it claims the chats (claimChats, one conditional
// UPDATE, after the marks it is given: consumer.Marks), then, in one statement (rowsSQL), upserts the new and changed
// member rows, inserts the feed facts and the chat_updates rows, and
// queues one pg_notify per chat_updates row. With the chats claimed
// nobody else writes their members meanwhile; any other surprise fails
// the transaction, whose messages the runtime then runs again in smaller
// transactions.
func write(ctx context.Context, tx *ent.Tx, v *view, marks *consumer.Marks) error {
	w := &v.writes
	if err := w.claimChats(ctx, tx, marks); err != nil {
		return err
	}
	q, args := w.rowsSQL()
	if q == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("write the transaction's %d member rows, %d feed facts and %d chat_updates rows: %w",
			len(w.inserts)+len(w.updates), len(w.events), len(w.pushes), err)
	}
	return nil
}

// rowsSQL is the statement that writes the transaction's rows after the
// claim, or "" for none: each kind of row a data-modifying WITH item,
// which PostgreSQL runs to completion whether or not the query reads it,
// and the pg_notify calls the query itself, one per chat_updates row in
// their order:
//
//	WITH members AS (INSERT INTO chat_participants … ON CONFLICT (id) DO UPDATE …),
//	     facts AS (INSERT INTO chat_events …),
//	     pushes AS (INSERT INTO chat_updates …)
//	SELECT pg_notify('chat_updates', u.id) FROM unnest($n::text[]) WITH ORDINALITY AS u(id, n) ORDER BY u.n
//
// One round trip where a statement per kind took four: a transaction far
// from its database waits for each. An item of no rows is left out; the
// foreign-key checks of the three inserts run at the statement's end.
//
// The member rows, new and changed, are one upsert on the primary key, in
// id order: a changed row conflicts on its id and takes the new role,
// joined_at and removed_at; a new one is inserted (and a second row for a
// (chat, user) pair fails the unique index, and the transaction, as a
// plain INSERT would). Member rows are never deleted (removal is soft,
// MSG-5); one deleted by hand meanwhile would be written back as the view
// sees it.
//
// Realtime, persist-then-push: the outbox rows are written with the
// change, and pg_notify queues "chat_updates" with each id, in order.
// PostgreSQL delivers a notification only when its transaction commits,
// and drops it when the transaction (or the savepoint it was queued
// under, as in the runtime's re-drive of parked messages) rolls back:
// listeners are never told about a change that is not in the database,
// and the row stays for a pusher that was not listening (pushed_at IS
// NULL).
func (w *writes) rowsSQL() (string, []any) {
	var b sql.Builder
	b.SetDialect(dialect.Postgres)
	items := 0
	item := func(name string) {
		if items == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		items++
		b.WriteString(name + " AS (")
	}
	if len(w.inserts)+len(w.updates) > 0 {
		rows := make(map[uuid.UUID]*ent.ChatParticipant, len(w.inserts)+len(w.updates))
		maps.Copy(rows, w.inserts)
		maps.Copy(rows, w.updates)
		var ids, chats, users, roles, joined, removed consumer.Array
		for _, id := range consumer.SortedIDs(rows) {
			r := rows[id]
			ids.UUID(r.ID)
			chats.UUID(r.ChatID)
			users.UUID(r.UserID)
			roles.Text(r.Role)
			joined.Time(r.JoinedAt)
			if r.RemovedAt != nil {
				removed.Time(*r.RemovedAt)
			} else {
				removed.Null()
			}
		}
		item("members")
		consumer.WriteInsertRows(&b, chatparticipant.Table, []consumer.Column{
			{Name: chatparticipant.FieldID, Type: "uuid", Values: &ids},
			{Name: chatparticipant.FieldChatID, Type: "uuid", Values: &chats},
			{Name: chatparticipant.FieldUserID, Type: "uuid", Values: &users},
			{Name: chatparticipant.FieldRole, Type: "text", Values: &roles},
			{Name: chatparticipant.FieldJoinedAt, Type: "timestamptz", Values: &joined},
			{Name: chatparticipant.FieldRemovedAt, Type: "timestamptz", Values: &removed},
		}, `ON CONFLICT (id) DO UPDATE SET role = excluded.role, joined_at = excluded.joined_at, removed_at = excluded.removed_at`)
		b.WriteString(")")
	}
	if len(w.events) > 0 {
		var ids, chats, types, users, roles, previous, occurred, sources, created consumer.Array
		// created_at orders a chat's facts as they were applied: strictly
		// increasing, as ent's time.Now per row made it.
		var last time.Time
		for _, q := range w.events {
			at := time.Now().Truncate(time.Microsecond)
			if !at.After(last) {
				at = last.Add(time.Microsecond)
			}
			last = at
			created.Time(at)
			ids.UUID(consumer.NewRowID())
			chats.UUID(q.chatID)
			types.Text(q.f.Type)
			users.UUID(q.f.UserID)
			roles.Text(q.f.Role)
			if q.f.PreviousRole != nil {
				previous.Text(*q.f.PreviousRole)
			} else {
				previous.Null()
			}
			occurred.Time(q.at)
			sources.UUID(q.messageID)
		}
		item("facts")
		consumer.WriteInsertRows(&b, chatevent.Table, []consumer.Column{
			{Name: chatevent.FieldID, Type: "uuid", Values: &ids},
			{Name: chatevent.FieldChatID, Type: "uuid", Values: &chats},
			{Name: chatevent.FieldType, Type: "text", Values: &types},
			{Name: chatevent.FieldUserID, Type: "uuid", Values: &users},
			{Name: chatevent.FieldRole, Type: "text", Values: &roles},
			{Name: chatevent.FieldPreviousRole, Type: "text", Values: &previous},
			{Name: chatevent.FieldOccurredAt, Type: "timestamptz", Values: &occurred},
			{Name: chatevent.FieldSourceMessageID, Type: "uuid", Values: &sources},
			{Name: chatevent.FieldCreatedAt, Type: "timestamptz", Values: &created},
		}, "")
		b.WriteString(")")
	}
	if len(w.pushes) > 0 {
		var ids, chats, created, recipients, revoked consumer.Array
		for _, p := range w.pushes {
			ids.UUID(p.id)
			chats.UUID(p.chatID)
			created.Time(p.at)
			recipients.UUIDs(p.recipients)
			revoked.UUIDs(p.revoked)
		}
		item("pushes")
		consumer.WriteInsertRows(&b, chatpush.Table, []consumer.Column{
			{Name: chatpush.FieldID, Type: "uuid", Values: &ids},
			{Name: chatpush.FieldChatID, Type: "uuid", Values: &chats},
			{Name: chatpush.FieldCreatedAt, Type: "timestamptz", Values: &created},
			{Name: chatpush.FieldRecipientUserIds, Type: "text", Cast: "uuid[]", Values: &recipients},
			{Name: chatpush.FieldRevokedUserIds, Type: "text", Cast: "uuid[]", Values: &revoked},
		}, "")
		b.WriteString(")")
	}
	if items == 0 {
		return "", nil
	}
	if len(w.notify) == 0 {
		b.WriteString(" SELECT 1")
		return b.Query()
	}
	var notify consumer.Array
	for _, id := range w.notify {
		notify.Text(id)
	}
	b.WriteString(" SELECT pg_notify('chat_updates', u.id) FROM unnest(").Arg(&notify).
		WriteString("::text[]) WITH ORDINALITY AS u(id, n) ORDER BY u.n")
	return b.Query()
}

// claimSQL writes every chat of a transaction with one conditional UPDATE:
// $1 the chats' ids in id order, then, chat by chat, its
// lead_member_version after the transaction, its events (row_version
// moves by as many) and the row_version read. The CTE locks the chats in
// id order; counted in an InitPlan, it runs once, whole, before the
// UPDATE's scan (as a semi-join's inner side it ran again, locking anew,
// for every chat: quadratic in the transaction's chats, 13-34 ms for 227
// of them where this takes 4-7).
//
// With the marks (claimWithMarks), their insert is a WITH item before
// locked, which waits for it: the marks are in before the first lock.
var claimSQL = fmt.Sprintf(claimSQLf, "", "")

// claimSQLf is claimSQL with room for the marks' WITH item and its gate.
const claimSQLf = `WITH %slocked AS (SELECT id FROM chats WHERE id = ANY($1::uuid[])%s ORDER BY id FOR NO KEY UPDATE)
UPDATE chats AS c SET lead_member_version = u.version, row_version = c.row_version + u.n
FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(id, version, n, read)
WHERE c.id = u.id AND c.row_version = u.read AND (SELECT count(*) FROM locked) >= 0
RETURNING c.id`

// claimWithMarks is claimSQL inserting marks first, with their arguments
// (after claimSQL's four); claimSQL and none without marks.
func claimWithMarks(marks *consumer.Marks) (string, []any) {
	var b sql.Builder
	b.SetDialect(dialect.Postgres)
	b.SetTotal(4)
	if !marks.Item(&b) {
		return claimSQL, nil
	}
	item, args := b.Query()
	return fmt.Sprintf(claimSQLf, item+", ", " AND "+marks.Gate()), args
}

// claimChats writes every chat of the transaction with one conditional
// UPDATE (claimSQL): row_version moves by the chat's events and
// lead_member_version becomes the last one's — where row_version is still
// the one Read read. A chat that someone else changed since (committed,
// or committing while this statement waits for its row) is not updated
// and not returned: that is the spec's concurrent edit,
// MSG_CONCURRENT_UPDATE of the transaction's first event of the chat
// (re-run at once, it re-reads the chat). The rows are locked first, in id
// order, by the statement's CTE (FOR NO KEY UPDATE: it does not block the
// foreign-key checks of inserts referencing chats); the UPDATE's own scan
// would lock them in whatever order its plan reads them. A chat's events
// share a partition (the key is the LeadId), but an old owner still
// draining and the new one may overlap.
func (w *writes) claimChats(ctx context.Context, tx *ent.Tx, marks *consumer.Marks) error {
	if len(w.claims) == 0 {
		return nil
	}
	ids := consumer.SortedIDs(w.claims)
	var versions, ns, reads consumer.Array
	for _, id := range ids {
		cl := w.claims[id]
		versions.Int(cl.version)
		ns.Int(cl.n)
		reads.Int(cl.read)
	}
	q, marksArgs := claimWithMarks(marks)
	rows, err := tx.QueryContext(ctx, q, append([]any{consumer.UUIDArray(ids), &versions, &ns, &reads}, marksArgs...)...)
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
