// Package messenger holds the messenger's event consumers. Today that is the
// Lead Chat Participants Sync (MessengerLeadParticipantsChangedConsumer,
// docs/specs/messenger.md): it keeps the members of a lead's
// chat equal to the lead's active participants in CRM and writes the
// membership facts into the chat's system feed.
//
// It runs on the shared runtime (package consumer); New describes it. What
// this consumer adds to the runtime's guarantees:
//
//   - Every payload is a self-sufficient snapshot (ActiveParticipants)
//     guarded by a monotonic Version stored in chats.lead_member_version.
//     A snapshot whose Version is not newer than the applied one is
//     skipped as stale, so redeliveries, replays and out-of-order
//     deliveries converge to the newest snapshot delivered, and a lost
//     delta changes nothing.
//   - The chat row is the optimistic lock: Read reads chats.row_version
//     (view.go), the handler decides on what it read, and the
//     transaction's writer (writer.go) first claims the chat with an
//     update conditioned on it (which also moves it). A writer that lost
//     the race gets MSG_CONCURRENT_UPDATE, re-runs in a fresh transaction
//     (3 times) and re-reads; an older snapshot can therefore never
//     overwrite a newer one, whichever commits first.
//   - A snapshot for a lead whose chat is not provisioned yet is parked by
//     the runtime (MSG_CHAT_NOT_PROVISIONED, retry-later class) and
//     re-driven on its backoff schedule without holding the partition:
//     other leads go on, and a later snapshot of the same lead may be
//     applied first (the parked one then becomes stale).
//   - Membership, lead_member_version, the feed facts (chat_events), the
//     realtime outbox row (chat_updates) and the idempotency mark commit in
//     one transaction; the chat_updates notification is queued in that
//     transaction with pg_notify, which PostgreSQL delivers only on commit.
package messenger
