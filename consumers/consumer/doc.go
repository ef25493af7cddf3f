// Package consumer is the runtime every PIN event consumer runs on: it reads
// one Kafka topic with confluent-kafka-go, hands each message to a service's
// handler inside an ent transaction together with the message's idempotency
// mark, and decides from one table what a failure means (DLQ, retry now,
// park and retry later, or back off while the database is away).
//
// A handler is business logic only:
//
//	func(ctx context.Context, tx *ent.Tx, m *consumer.Message) (consumer.Outcome, error)
//
// It never touches Kafka, offsets or the transaction's lifetime. It returns
// an Outcome (its log name is stored in processed_messages) or an error made
// from one of its spec's Codes, whose Class picks the behaviour.
//
// Delivery guarantees, rebalancing and shutdown are described in DESIGN.md at
// the repository root; the short version: offsets are stored only after the
// database commit (or after a confirmed DLQ publish, or after the message was
// durably parked), per partition in order, and committed right after (and
// synchronously on revoke and shutdown). Every message is
// therefore processed at least once, and the idempotency mark written in the
// same transaction makes the effect exactly once.
package consumer
