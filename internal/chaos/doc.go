// Package chaos is `make chaos`: the consumers under the faults
// production brings, checked against a model of what they were fed.
//
// A run starts a private PostgreSQL (migrate/localpg), kfake (franz-go's
// Kafka-protocol fake, in process, three brokers) and each consumer's real
// binary, several instances per group. It produces a seeded stream per
// service (rewards.go, messenger.go, crm.go): valid traffic with duplicates
// (the same MessageId again), older versions after newer ones, late chats
// and leads, and poison of every kind the specs know, each poison message's
// DLQ code recorded. Meanwhile the seed's faults play (faults.go): kill -9
// of consumers, a PostgreSQL crash and restart, a read-only window (a
// statement trigger raising 25006, switched with CREATE OR REPLACE
// FUNCTION), and kfake's broker faults.
//
// Once every group has committed its topic's high watermarks and nothing
// waits parked, the run reads the topics back and applies the specs' rules
// to the records in partition order (model*): the rows, feed entries and
// idempotency marks the database must hold, and the DLQ code of every
// poison message. A chat provisioned late may take its snapshots in
// another order than the partition's; its feed is checked as a history
// instead: each snapshot with facts must state exactly the change from the
// one before, and the chat must end at the newest. The comparison counts
// what is lost, doubled or wrong, and the poison found in the DLQ
// (verdict.go).
package chaos
