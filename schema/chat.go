package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

// Chat is a messenger room. Lead chats (kind = 'Lead') are created by the
// provisioning consumer; the lead-participants consumer only keeps their
// membership and its version.
type Chat struct{ ent.Schema }

func (Chat) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entsql.Table("chats"),
		entsql.Checks(map[string]string{
			"ck_chats_row_version":         "row_version >= 0",
			"ck_chats_lead_member_version": "lead_member_version >= 1",
		}),
	}
}

func (Chat) Mixin() []ent.Mixin { return []ent.Mixin{timestamps{}} }

func (Chat) Fields() []ent.Field {
	return []ent.Field{
		idField(),
		enumText("kind"),
		field.UUID("lead_id", uuid.UUID{}).Optional().Nillable(),
		field.Int64("lead_member_version").Optional().Nillable().
			Comment("Version of the last applied lead-participants snapshot (monotonic guard)."),
		rowVersion(),
		field.Time("closed_at").Optional().Nillable(),
	}
}

func (Chat) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("participants", ChatParticipant.Type),
		edge.To("events", ChatEvent.Type),
		edge.To("updates", ChatPush.Type),
	}
}

func (Chat) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("lead_id").Unique().
			Annotations(entsql.IndexWhere("lead_id IS NOT NULL")).
			StorageKey("ux_chats_lead_id"),
	}
}

// ChatParticipant is one user's membership of a chat. A removal is soft
// (removed_at set); re-adding reactivates the same row.
type ChatParticipant struct{ ent.Schema }

func (ChatParticipant) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("chat_participants")}
}

func (ChatParticipant) Fields() []ent.Field {
	return []ent.Field{
		idField(),
		field.UUID("chat_id", uuid.UUID{}).Immutable(),
		field.UUID("user_id", uuid.UUID{}).Immutable(),
		enumText("role"),
		nowDefault("joined_at"),
		field.Time("removed_at").Optional().Nillable().
			Comment("NULL while the member is active."),
	}
}

func (ChatParticipant) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("chat", Chat.Type).Ref("participants").
			Field("chat_id").Unique().Required().Immutable(),
	}
}

func (ChatParticipant) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("chat_id", "user_id").Unique().
			StorageKey("ux_chat_participants_chat_user"),
	}
}

// ChatEvent is a system fact of a chat's feed (membership changes).
type ChatEvent struct{ ent.Schema }

func (ChatEvent) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entsql.Table("chat_events"),
		entsql.Checks(map[string]string{
			"ck_chat_events_type": "type IN ('ParticipantJoined', 'ParticipantLeft', 'ParticipantRoleChanged')",
			// previous_role is set exactly for role changes.
			"ck_chat_events_previous_role": "(type = 'ParticipantRoleChanged') = (previous_role IS NOT NULL)",
		}),
	}
}

func (ChatEvent) Fields() []ent.Field {
	return []ent.Field{
		idField(),
		field.UUID("chat_id", uuid.UUID{}).Immutable(),
		field.String("type").SchemaType(varchar32).NotEmpty().Immutable(),
		field.UUID("user_id", uuid.UUID{}).Immutable(),
		field.String("role").SchemaType(varchar32).NotEmpty().Immutable().
			Comment("The member's role after the change; for ParticipantLeft the role they had."),
		field.String("previous_role").SchemaType(varchar32).Optional().Nillable().Immutable(),
		field.Time("occurred_at").Immutable(),
		field.UUID("source_message_id", uuid.UUID{}).Immutable(),
		createdAt(),
	}
}

func (ChatEvent) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("chat", Chat.Type).Ref("events").
			Field("chat_id").Unique().Required().Immutable(),
	}
}

func (ChatEvent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("chat_id", "occurred_at").StorageKey("ix_chat_events_chat_occurred"),
	}
}
