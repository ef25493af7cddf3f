// Package crm is the CRM's Selection Shared consumer
// (SelectionSharedConsumer, docs/specs/crm.md): it reads
// pin.selections.selection-shared.v1 and appends to the Active lead of the
// (agent, investor) pair a feed entry that an agent shared a selection of
// properties with the client (SelectionAttached) or that the client opened it
// (SelectionViewed).
//
// The package holds business logic only; the runtime (package consumer)
// owns the transaction, the idempotency mark, offsets, retries and the DLQ.
// By concern:
//
//   - payload.go: the event's payload, its validation, the Action enum and
//     the title cut (256 runes, never bytes);
//   - view.go: Read, which resolves the Active leads of a transaction's
//     pairs, without a lock, and looks for its messages in the feed (the
//     source_message_id idempotency layer): the view the handler decides
//     on;
//   - handler.go: the handler, outcomes and log fields;
//   - writer.go: the lead aggregate's one write path, set-based before
//     the commit: the feed entries (the tenant from the lead), then the
//     leads locked in id order, read again and updated in one statement
//     (CRM-1, last_event_at only forward, row_version moved from the one
//     read under the lock);
//   - events.go: the in-process LeadEventAdded domain event and its
//     Publisher;
//   - metrics.go: the metric names of the spec and the service's own
//     counter;
//   - service.go: codes, the consumer.Service definition and New.
//
// Delivery: a message is processed at least once and applied exactly once.
// Two layers guard against duplicates: the runtime's processed_messages key
// crm:selection-shared:{MessageId}, and the partial unique index
// ux_lead_events_source_message_id, which Read reads (skipped-duplicate)
// and which refuses an entry written meanwhile past the mark, a backstop
// (a lost race: the transaction runs again and finds it). An event whose lead does
// not exist yet is parked by the runtime (retry-later) and re-driven 30 s,
// 1, 2, 4, 8 and 16 min later without holding its partition: the feed is
// append-only and idempotent, so it may apply out of line.
package crm
