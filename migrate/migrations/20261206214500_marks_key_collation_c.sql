-- The idempotency key compared byte by byte (COLLATE "C"). Every mark is
-- an insert into this primary key, a search of it by a key that is a
-- route's prefix and a random MessageId; under the database's collation
-- each of the search's comparisons is a strcoll (libc) or an ICU call,
-- several times a memcmp: the marks' insert cost PostgreSQL 9–19 % more
-- under C.UTF-8, 37 % more under ICU's en (bench/README.md, session 23).
-- The key is an opaque ASCII string that no reader sorts for people;
-- equality, which is all the consumers and the policies ask of it, is the
-- same under every deterministic collation.
--
-- PostgreSQL refuses to change a column a policy names: the three marks
-- policies go and come back as 20261202160000_marks_bound_to_routes.sql
-- left them, in the same transaction. The table is not rewritten; its
-- primary key is rebuilt under an ACCESS EXCLUSIVE lock, 0.6 s per
-- million marks on a 2-core machine, while the consumers' statements on
-- the table wait (docs/schema.md, "A key rebuilt").
DROP POLICY "messenger_own_marks" ON "processed_messages";
DROP POLICY "rewards_own_marks" ON "processed_messages";
DROP POLICY "crm_own_marks" ON "processed_messages";
ALTER TABLE "processed_messages" ALTER COLUMN "idempotency_key" TYPE text COLLATE "C";
CREATE POLICY "messenger_own_marks" ON "processed_messages" TO pin_messenger
  USING (topic = 'pin.crm.lead-participants-changed.v1' AND starts_with(idempotency_key, 'messenger-lead-participants:'))
  WITH CHECK (topic = 'pin.crm.lead-participants-changed.v1' AND starts_with(idempotency_key, 'messenger-lead-participants:'));
CREATE POLICY "rewards_own_marks" ON "processed_messages" TO pin_rewards
  USING (topic = 'pin.referral.bonds.v1' AND (starts_with(idempotency_key, 'rewards:bond-created:') OR starts_with(idempotency_key, 'rewards:bond-closed:')))
  WITH CHECK (topic = 'pin.referral.bonds.v1' AND (starts_with(idempotency_key, 'rewards:bond-created:') OR starts_with(idempotency_key, 'rewards:bond-closed:')));
CREATE POLICY "crm_own_marks" ON "processed_messages" TO pin_crm
  USING (topic = 'pin.selections.selection-shared.v1' AND starts_with(idempotency_key, 'crm:selection-shared:'))
  WITH CHECK (topic = 'pin.selections.selection-shared.v1' AND starts_with(idempotency_key, 'crm:selection-shared:'));
