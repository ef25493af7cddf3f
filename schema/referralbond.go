package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

// ReferralBondReplica is rewards' local replica of a referral bond: the basis
// of referral accruals. Rows are never deleted (BND-2); only a row with
// status 'Active' lets an accrual be made.
type ReferralBondReplica struct{ ent.Schema }

func (ReferralBondReplica) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entsql.Table("referral_bond_replicas"),
		PrimaryKey{Constraint: "pk_referral_bond_replicas"}, // the spec's name
		entsql.Checks(map[string]string{
			"ck_referral_bond_replicas_replica_version": "replica_version >= 1",
		}),
	}
}

func (ReferralBondReplica) Fields() []ent.Field {
	return []ent.Field{
		field.UUID("id", uuid.UUID{}).StorageKey("bond_id").Immutable().
			Comment("The bond's id in the referral service."),
		field.UUID("referred_user_id", uuid.UUID{}).Immutable(),
		field.UUID("referrer_user_id", uuid.UUID{}).Immutable(),
		field.UUID("referrer_company_id", uuid.UUID{}).Optional().Nillable().Immutable(),
		field.String("status").SchemaType(varchar32).NotEmpty().
			Comment("Active / Replaced / Revoked; an unknown value is stored as it came (fail-closed: not Active)."),
		field.Time("bound_at").Immutable(),
		field.Int64("replica_version").
			Comment("payload.Version of the last applied event (BND-1)."),
		field.Time("synced_at").
			Comment("Event time (envelope CreatedAt) of the last applied event."),
	}
}

func (ReferralBondReplica) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("referred_user_id").StorageKey("ix_referral_bond_replicas_referred"),
		// BND-3: at most one Active bond per referred user.
		index.Fields("referred_user_id").Unique().
			Annotations(entsql.IndexWhere("status = 'Active'")).
			StorageKey("ux_referral_bond_replicas_referred_active"),
	}
}
