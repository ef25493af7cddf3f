-- Create "chats" table
CREATE TABLE "chats" ("id" uuid NOT NULL DEFAULT gen_random_uuid(), "created_at" timestamptz NOT NULL DEFAULT now(), "updated_at" timestamptz NOT NULL DEFAULT now(), "kind" character varying(32) NOT NULL, "lead_id" uuid NULL, "lead_member_version" bigint NULL, "row_version" bigint NOT NULL DEFAULT 0, "closed_at" timestamptz NULL, PRIMARY KEY ("id"), CONSTRAINT "ck_chats_lead_member_version" CHECK (lead_member_version >= 1), CONSTRAINT "ck_chats_row_version" CHECK (row_version >= 0));
-- Create index "ux_chats_lead_id" to table: "chats"
CREATE UNIQUE INDEX "ux_chats_lead_id" ON "chats" ("lead_id") WHERE (lead_id IS NOT NULL);
-- Create "parked_messages" table
CREATE TABLE "parked_messages" ("id" uuid NOT NULL DEFAULT gen_random_uuid(), "consumer_group" text NOT NULL, "topic" text NOT NULL, "partition" integer NOT NULL, "offset" bigint NOT NULL, "key" bytea NULL, "value" bytea NULL, "headers" jsonb NULL, "message_id" uuid NOT NULL, "event_type" text NOT NULL, "error_code" character varying(64) NOT NULL, "reason" text NOT NULL, "attempts" bigint NOT NULL, "next_attempt_at" timestamptz NOT NULL, "created_at" timestamptz NOT NULL DEFAULT now(), "updated_at" timestamptz NOT NULL DEFAULT now(), PRIMARY KEY ("id"), CONSTRAINT "ck_parked_messages_attempts" CHECK (attempts >= 1));
-- Create index "ix_parked_messages_due" to table: "parked_messages"
CREATE INDEX "ix_parked_messages_due" ON "parked_messages" ("consumer_group", "next_attempt_at");
-- Create index "ux_parked_messages_source" to table: "parked_messages"
CREATE UNIQUE INDEX "ux_parked_messages_source" ON "parked_messages" ("consumer_group", "topic", "partition", "offset");
-- Create "processed_messages" table
CREATE TABLE "processed_messages" ("idempotency_key" text NOT NULL, "consumer_group" text NOT NULL, "topic" text NOT NULL, "partition" integer NOT NULL, "offset" bigint NOT NULL, "outcome" character varying(64) NOT NULL, "processed_at" timestamptz NOT NULL DEFAULT now(), PRIMARY KEY ("idempotency_key"));
-- Create "referral_bond_replicas" table
CREATE TABLE "referral_bond_replicas" ("bond_id" uuid NOT NULL, "referred_user_id" uuid NOT NULL, "referrer_user_id" uuid NOT NULL, "referrer_company_id" uuid NULL, "status" character varying(32) NOT NULL, "bound_at" timestamptz NOT NULL, "replica_version" bigint NOT NULL, "synced_at" timestamptz NOT NULL, PRIMARY KEY ("bond_id"), CONSTRAINT "ck_referral_bond_replicas_replica_version" CHECK (replica_version >= 1));
-- Create index "ix_referral_bond_replicas_referred" to table: "referral_bond_replicas"
CREATE INDEX "ix_referral_bond_replicas_referred" ON "referral_bond_replicas" ("referred_user_id");
-- Create index "ux_referral_bond_replicas_referred_active" to table: "referral_bond_replicas"
CREATE UNIQUE INDEX "ux_referral_bond_replicas_referred_active" ON "referral_bond_replicas" ("referred_user_id") WHERE ((status)::text = 'Active'::text);
-- Create "chat_events" table
CREATE TABLE "chat_events" ("id" uuid NOT NULL DEFAULT gen_random_uuid(), "type" character varying(32) NOT NULL, "user_id" uuid NOT NULL, "role" character varying(32) NOT NULL, "previous_role" character varying(32) NULL, "occurred_at" timestamptz NOT NULL, "source_message_id" uuid NOT NULL, "created_at" timestamptz NOT NULL DEFAULT now(), "chat_id" uuid NOT NULL, PRIMARY KEY ("id"), CONSTRAINT "chat_events_chats_events" FOREIGN KEY ("chat_id") REFERENCES "chats" ("id") ON UPDATE NO ACTION ON DELETE NO ACTION, CONSTRAINT "ck_chat_events_previous_role" CHECK (((type)::text = 'ParticipantRoleChanged'::text) = (previous_role IS NOT NULL)), CONSTRAINT "ck_chat_events_type" CHECK ((type)::text = ANY ((ARRAY['ParticipantJoined'::character varying, 'ParticipantLeft'::character varying, 'ParticipantRoleChanged'::character varying])::text[])));
-- Create index "ix_chat_events_chat_occurred" to table: "chat_events"
CREATE INDEX "ix_chat_events_chat_occurred" ON "chat_events" ("chat_id", "occurred_at");
-- Create "chat_participants" table
CREATE TABLE "chat_participants" ("id" uuid NOT NULL DEFAULT gen_random_uuid(), "user_id" uuid NOT NULL, "role" character varying(32) NOT NULL, "joined_at" timestamptz NOT NULL DEFAULT now(), "removed_at" timestamptz NULL, "chat_id" uuid NOT NULL, PRIMARY KEY ("id"), CONSTRAINT "chat_participants_chats_participants" FOREIGN KEY ("chat_id") REFERENCES "chats" ("id") ON UPDATE NO ACTION ON DELETE NO ACTION);
-- Create index "ux_chat_participants_chat_user" to table: "chat_participants"
CREATE UNIQUE INDEX "ux_chat_participants_chat_user" ON "chat_participants" ("chat_id", "user_id");
-- Create "chat_updates" table
CREATE TABLE "chat_updates" ("id" uuid NOT NULL DEFAULT gen_random_uuid(), "recipient_user_ids" uuid[] NOT NULL DEFAULT '{}', "revoked_user_ids" uuid[] NOT NULL DEFAULT '{}', "created_at" timestamptz NOT NULL DEFAULT now(), "pushed_at" timestamptz NULL, "chat_id" uuid NOT NULL, PRIMARY KEY ("id"), CONSTRAINT "chat_updates_chats_updates" FOREIGN KEY ("chat_id") REFERENCES "chats" ("id") ON UPDATE NO ACTION ON DELETE NO ACTION);
-- Create index "ix_chat_updates_unpushed" to table: "chat_updates"
CREATE INDEX "ix_chat_updates_unpushed" ON "chat_updates" ("created_at") WHERE (pushed_at IS NULL);
-- Create "leads" table
CREATE TABLE "leads" ("id" uuid NOT NULL DEFAULT gen_random_uuid(), "created_at" timestamptz NOT NULL DEFAULT now(), "updated_at" timestamptz NOT NULL DEFAULT now(), "tenant_id" uuid NOT NULL, "executor_agent_user_id" uuid NOT NULL, "primary_investor_user_id" uuid NOT NULL, "status" character varying(32) NOT NULL, "last_event_at" timestamptz NULL, "row_version" bigint NOT NULL DEFAULT 0, PRIMARY KEY ("id"), CONSTRAINT "ck_leads_row_version" CHECK (row_version >= 0), CONSTRAINT "ck_leads_status" CHECK ((status)::text = ANY ((ARRAY['Active'::character varying, 'Expired'::character varying, 'Archived'::character varying])::text[])));
-- Create index "ux_leads_active_pair" to table: "leads"
CREATE UNIQUE INDEX "ux_leads_active_pair" ON "leads" ("executor_agent_user_id", "primary_investor_user_id") WHERE ((status)::text = 'Active'::text);
-- Create "lead_events" table
CREATE TABLE "lead_events" ("id" uuid NOT NULL DEFAULT gen_random_uuid(), "tenant_id" uuid NOT NULL, "type" character varying(32) NOT NULL, "occurred_at" timestamptz NOT NULL, "source_message_id" uuid NULL, "payload" jsonb NOT NULL, "created_by_user_id" uuid NULL, "created_at" timestamptz NOT NULL DEFAULT now(), "lead_id" uuid NOT NULL, PRIMARY KEY ("id"), CONSTRAINT "lead_events_leads_events" FOREIGN KEY ("lead_id") REFERENCES "leads" ("id") ON UPDATE NO ACTION ON DELETE NO ACTION);
-- Create index "ix_lead_events_lead_occurred" to table: "lead_events"
CREATE INDEX "ix_lead_events_lead_occurred" ON "lead_events" ("lead_id", "occurred_at");
-- Create index "ux_lead_events_source_message_id" to table: "lead_events"
CREATE UNIQUE INDEX "ux_lead_events_source_message_id" ON "lead_events" ("source_message_id") WHERE (source_message_id IS NOT NULL);
