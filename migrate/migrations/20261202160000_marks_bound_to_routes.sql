-- Marks bound to their service. The key of processed_messages is global:
-- a policy on the topic alone let a role insert another service's key
-- under its own topic (the other service then took its message for a
-- duplicate) and learn from the unique conflict whether another service's
-- key exists. Each role now inserts, reads and updates only keys of its
-- own routes' prefixes (Route.KeyPrefix of its consumer.Service; a test
-- derives them from the roster). A policy rather than a CHECK tying the
-- prefix to the topic: the refusal is 42501 (the world's failure: the
-- partition waits, nothing is dead-lettered) where a CHECK's 23514 would
-- count as the message's; an INSERT's WITH CHECK runs before the row is
-- inserted, so a foreign key is refused before any unique conflict could
-- answer; and the schema (ent) has no constraint to keep in step.
-- parked_messages has no such hole: its unique key holds the topic, which
-- its policies already bind.
ALTER POLICY "messenger_own_marks" ON "processed_messages"
  USING (topic = 'pin.crm.lead-participants-changed.v1' AND starts_with(idempotency_key, 'messenger-lead-participants:'))
  WITH CHECK (topic = 'pin.crm.lead-participants-changed.v1' AND starts_with(idempotency_key, 'messenger-lead-participants:'));
ALTER POLICY "rewards_own_marks" ON "processed_messages"
  USING (topic = 'pin.referral.bonds.v1' AND (starts_with(idempotency_key, 'rewards:bond-created:') OR starts_with(idempotency_key, 'rewards:bond-closed:')))
  WITH CHECK (topic = 'pin.referral.bonds.v1' AND (starts_with(idempotency_key, 'rewards:bond-created:') OR starts_with(idempotency_key, 'rewards:bond-closed:')));
ALTER POLICY "crm_own_marks" ON "processed_messages"
  USING (topic = 'pin.selections.selection-shared.v1' AND starts_with(idempotency_key, 'crm:selection-shared:'))
  WITH CHECK (topic = 'pin.selections.selection-shared.v1' AND starts_with(idempotency_key, 'crm:selection-shared:'));
-- No role but the owner creates in schema public. PostgreSQL 15 gives
-- PUBLIC only USAGE there; up to 14 (and wherever it was granted since)
-- PUBLIC may CREATE, and so could every service role. Revoked when held;
-- a migrating role that cannot revoke it (not the schema's owner) fails
-- here rather than leave it.
DO $$
DECLARE
  held bool;
BEGIN
  held := EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
                  WHERE n.nspname = 'public' AND a.grantee = 0 AND a.privilege_type = 'CREATE');
  IF held THEN
    REVOKE CREATE ON SCHEMA public FROM PUBLIC;
    IF EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
               WHERE n.nspname = 'public' AND a.grantee = 0 AND a.privilege_type = 'CREATE') THEN
      RAISE EXCEPTION 'PUBLIC may create in schema public and % cannot revoke it: run REVOKE CREATE ON SCHEMA public FROM PUBLIC as the schema''s owner, then migrate again', current_user;
    END IF;
  END IF;
END
$$;
