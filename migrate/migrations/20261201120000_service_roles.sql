-- Least privilege: one NOLOGIN group role per service, which a DBA grants
-- to the service's login user (README, "Database roles"). Each role can read
-- and write its own tables, and its own rows of processed_messages and
-- parked_messages (row-level security on their source topic: a service is
-- the topic it consumes, whatever its group, so a replay under a new group
-- still finds the marks of the old one); no DDL, nothing of another
-- service. The migrations run as the objects' owner, which
-- needs CREATEROLE for the roles and their settings (or a DBA creates the
-- roles first: then only the settings and grants run here).
DO $$
DECLARE
  r text;
  s text;
  attempt int;
BEGIN
  FOREACH r IN ARRAY ARRAY['pin_messenger', 'pin_rewards', 'pin_crm'] LOOP
    -- Roles and their settings are the cluster's, shared by its databases:
    -- two databases migrated at once meet here (duplicate_object, or
    -- "tuple concurrently updated"). Each change is made only when missing,
    -- and a lost race is tried again.
    FOR attempt IN 1..20 LOOP
      BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
          EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
        -- Session defaults of the role. PostgreSQL applies a role's
        -- settings to sessions that log in as it, not as a member: a login
        -- user copies them (README, "Database roles"; pinctl dev and the
        -- tests do).
        FOREACH s IN ARRAY ARRAY['statement_timeout=30s', 'lock_timeout=10s', 'idle_in_transaction_session_timeout=60s'] LOOP
          IF NOT EXISTS (SELECT FROM pg_db_role_setting d JOIN pg_roles ro ON ro.oid = d.setrole
                         WHERE ro.rolname = r AND d.setdatabase = 0 AND s = ANY (d.setconfig)) THEN
            EXECUTE format('ALTER ROLE %I SET %s = %L', r, split_part(s, '=', 1), split_part(s, '=', 2));
          END IF;
        END LOOP;
        EXIT;
      EXCEPTION WHEN duplicate_object OR unique_violation OR internal_error THEN
        PERFORM pg_sleep(0.05 * attempt);
      END;
    END LOOP;
  END LOOP;
END
$$;
-- messenger: lead chats' membership, its feed and the persisted pushes.
GRANT SELECT, UPDATE ON "chats" TO pin_messenger;
GRANT SELECT, INSERT, UPDATE ON "chat_participants" TO pin_messenger;
GRANT SELECT, INSERT ON "chat_events" TO pin_messenger;
GRANT SELECT, INSERT ON "chat_updates" TO pin_messenger;
-- rewards: the referral bond replica.
GRANT SELECT, INSERT, UPDATE ON "referral_bond_replicas" TO pin_rewards;
-- crm: the leads' event feed.
GRANT SELECT, UPDATE ON "leads" TO pin_crm;
GRANT SELECT, INSERT ON "lead_events" TO pin_crm;
-- Every service: its idempotency marks and parked messages, the rows of
-- its own source topic only.
GRANT SELECT, INSERT, UPDATE ON "processed_messages" TO pin_messenger, pin_rewards, pin_crm;
GRANT SELECT, INSERT, UPDATE, DELETE ON "parked_messages" TO pin_messenger, pin_rewards, pin_crm;
ALTER TABLE "processed_messages" ENABLE ROW LEVEL SECURITY;
ALTER TABLE "parked_messages" ENABLE ROW LEVEL SECURITY;
CREATE POLICY "messenger_own_marks" ON "processed_messages" TO pin_messenger
  USING (topic = 'pin.crm.lead-participants-changed.v1') WITH CHECK (topic = 'pin.crm.lead-participants-changed.v1');
CREATE POLICY "rewards_own_marks" ON "processed_messages" TO pin_rewards
  USING (topic = 'pin.referral.bonds.v1') WITH CHECK (topic = 'pin.referral.bonds.v1');
CREATE POLICY "crm_own_marks" ON "processed_messages" TO pin_crm
  USING (topic = 'pin.selections.selection-shared.v1') WITH CHECK (topic = 'pin.selections.selection-shared.v1');
CREATE POLICY "messenger_own_parked" ON "parked_messages" TO pin_messenger
  USING (topic = 'pin.crm.lead-participants-changed.v1') WITH CHECK (topic = 'pin.crm.lead-participants-changed.v1');
CREATE POLICY "rewards_own_parked" ON "parked_messages" TO pin_rewards
  USING (topic = 'pin.referral.bonds.v1') WITH CHECK (topic = 'pin.referral.bonds.v1');
CREATE POLICY "crm_own_parked" ON "parked_messages" TO pin_crm
  USING (topic = 'pin.selections.selection-shared.v1') WITH CHECK (topic = 'pin.selections.selection-shared.v1');
-- The schema gate reads the migration history (the revision table the
-- migration tool keeps, absent when a directory is replayed on a dev
-- database).
DO $$
DECLARE
  t regclass := coalesce(to_regclass('atlas_schema_revisions.atlas_schema_revisions'), to_regclass('atlas_schema_revisions'));
BEGIN
  IF t IS NOT NULL THEN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO pin_messenger, pin_rewards, pin_crm',
      (SELECT nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = t));
    EXECUTE format('GRANT SELECT ON %s TO pin_messenger, pin_rewards, pin_crm', t);
  END IF;
END
$$;
