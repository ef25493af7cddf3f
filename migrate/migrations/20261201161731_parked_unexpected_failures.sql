-- Modify "parked_messages" table
ALTER TABLE "parked_messages" ADD CONSTRAINT "ck_parked_messages_unexpected" CHECK (unexpected_failures >= 0), ADD COLUMN "unexpected_failures" bigint NOT NULL DEFAULT 0;
