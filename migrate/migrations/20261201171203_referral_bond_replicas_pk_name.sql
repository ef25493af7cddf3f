-- Rename the primary key of "referral_bond_replicas"
ALTER TABLE "referral_bond_replicas" RENAME CONSTRAINT "referral_bond_replicas_pkey" TO "pk_referral_bond_replicas";
