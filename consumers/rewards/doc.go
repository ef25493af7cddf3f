// Package rewards holds the rewards service's event consumers. Today that
// is Referral Bond Sync (group pin-rewards-referral-bonds): it keeps
// referral_bond_replicas, the replica of the referral service's bonds that
// referral accruals are based on, in step with pin.referral.bonds.v1
// (docs/specs/rewards.md).
//
// The consumer runs on the shared runtime (package consumer), which owns the
// transaction, the idempotency mark, offsets, retries and the DLQ. This
// package holds the business rules only:
//
//   - payload.go: the two payloads and their validation (step 2 of the
//     spec), statuses matched case-insensitively and stored in the spec's
//     spelling, an unknown one stored as it came;
//   - decide.go: Decide, the pure transition function (row × event →
//     action): the version guard BND-1, terminality BND-4, orphans,
//     the ReferredUserId check;
//   - view.go: Read, which reads and locks (FOR UPDATE, in id order,
//     one statement) the rows of a transaction's bonds and the Active
//     bonds of their referred users: the view the handlers decide on;
//   - handler.go: the two handlers, which Decide on the bond's row in the
//     view and check the single-active rule BND-3 (the partial unique
//     index) against it, then queue the write;
//   - writer.go: the transaction's writes, set-based before the commit:
//     one UPDATE, then one INSERT. Rows are never deleted (BND-2);
//   - metrics.go: the spec's metric names and the lag source max(synced_at);
//   - bonds.go: ActiveBond, the read API of accrual code;
//   - service.go: New, the consumer.Service (topic, group, DLQ, codes,
//     routes, blocking retries: per-key order matters).
//
// Delivery: at least once from Kafka, exactly once in effect (the mark and
// the row commit together); replaying the topic from offset 0 is safe and is
// how the replica is first filled or recovered after an ORPHAN_CLOSED.
package rewards
