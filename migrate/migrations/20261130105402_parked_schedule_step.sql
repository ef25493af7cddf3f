-- Modify "parked_messages" table
ALTER TABLE "parked_messages" ADD CONSTRAINT "ck_parked_messages_schedule_step" CHECK (schedule_step >= 0), ADD COLUMN "schedule_step" bigint NOT NULL DEFAULT 0;
