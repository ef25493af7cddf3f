-- atlas:txmode none

-- A parked row is the message at its coordinates with its message id: after
-- a topic is recreated (or a replay puts another message at an offset a
-- parked row still holds), the other message is parked beside the stale
-- row instead of being taken for it (consumers/consumer/park.go).
-- The new index is built first, without blocking writes; the old one goes
-- after. Binaries built before this file park with ON CONFLICT on the old
-- four columns: once it is gone, their parks fail (42P10, the world's
-- failure: the partition waits, nothing is lost) until they are replaced.
-- Its columns hold those of a unique index: it cannot meet duplicates.
-- atlas:nolint data_depend
CREATE UNIQUE INDEX CONCURRENTLY "ux_parked_messages_source_message" ON "parked_messages" ("consumer_group", "topic", "partition", "offset", "message_id");
DROP INDEX CONCURRENTLY "ux_parked_messages_source";
