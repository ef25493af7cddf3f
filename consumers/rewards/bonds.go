package rewards

import (
	"context"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/ent"
	"github.com/pin-platform/pin/ent/referralbondreplica"
)

// ActiveBond returns the Active bond of a referred user, the basis of a
// referral accrual, or (nil, nil) when the user has none. It is the one
// place accrual code asks the replica; any status other than Active
// (Replaced, Revoked, or a value unknown to this code) is no basis.
//
// Inside a transaction, pass tx.Client().
func ActiveBond(ctx context.Context, client *ent.Client, referredUserID uuid.UUID) (*ent.ReferralBondReplica, error) {
	b, err := client.ReferralBondReplica.Query().
		Where(
			referralbondreplica.ReferredUserID(referredUserID),
			referralbondreplica.Status(string(StatusActive)),
		).
		Only(ctx) // at most one: ux_referral_bond_replicas_referred_active
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}
