package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"

	"github.com/pin-platform/pin/schema/uuidarray"
)

// ChatPush (table chat_updates) is the persisted half of persist-then-push: one row per applied
// membership change, written in the same transaction as the change, followed
// (on commit) by NOTIFY chat_updates '<id>'. The realtime pusher delivers it
// and sets pushed_at.
type ChatPush struct{ ent.Schema }

func (ChatPush) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("chat_updates")}
}

func uuidArray(name, comment string) ent.Field {
	return field.Other(name, uuidarray.UUIDs{}).
		Immutable().
		Comment(comment).
		SchemaType(map[string]string{dialect.Postgres: "uuid[]"}).
		Default(uuidarray.UUIDs{}).
		Annotations(entsql.DefaultExpr("'{}'::uuid[]"))
}

func (ChatPush) Fields() []ent.Field {
	return []ent.Field{
		idField(),
		field.UUID("chat_id", uuid.UUID{}).Immutable(),
		uuidArray("recipient_user_ids", "Active members after the change: they receive ChatUpdated."),
		uuidArray("revoked_user_ids", "Members removed by the change: their subscription is revoked."),
		createdAt(),
		field.Time("pushed_at").Optional().Nillable(),
	}
}

func (ChatPush) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("chat", Chat.Type).Ref("updates").
			Field("chat_id").Unique().Required().Immutable(),
	}
}

func (ChatPush) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("created_at").
			Annotations(entsql.IndexWhere("pushed_at IS NULL")).
			StorageKey("ix_chat_updates_unpushed"),
	}
}
