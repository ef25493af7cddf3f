package schema

import (
	"encoding/json"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

// Lead is a CRM lead: the pair (executor agent, primary investor) has at most
// one Active lead. Leads are created by the CRM API; the selection consumer
// only appends to their feed.
type Lead struct{ ent.Schema }

func (Lead) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entsql.Table("leads"),
		entsql.Checks(map[string]string{
			"ck_leads_status":      "status IN ('Active', 'Expired', 'Archived')",
			"ck_leads_row_version": "row_version >= 0",
		}),
	}
}

func (Lead) Mixin() []ent.Mixin { return []ent.Mixin{timestamps{}} }

func (Lead) Fields() []ent.Field {
	return []ent.Field{
		idField(),
		field.UUID("tenant_id", uuid.UUID{}),
		field.UUID("executor_agent_user_id", uuid.UUID{}),
		field.UUID("primary_investor_user_id", uuid.UUID{}),
		enumText("status"),
		field.Time("last_event_at").Optional().Nillable().
			Comment("Greatest occurred_at of the lead's feed; only moves forward."),
		rowVersion(),
	}
}

func (Lead) Edges() []ent.Edge {
	return []ent.Edge{edge.To("events", LeadEvent.Type)}
}

func (Lead) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("executor_agent_user_id", "primary_investor_user_id").Unique().
			Annotations(entsql.IndexWhere("status = 'Active'")).
			StorageKey("ux_leads_active_pair"),
	}
}

// LeadEvent is an entry of a lead's append-only event feed.
type LeadEvent struct{ ent.Schema }

func (LeadEvent) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("lead_events")}
}

func (LeadEvent) Fields() []ent.Field {
	return []ent.Field{
		idField(),
		field.UUID("lead_id", uuid.UUID{}).Immutable(),
		field.UUID("tenant_id", uuid.UUID{}).Immutable(),
		field.String("type").SchemaType(varchar32).NotEmpty().Immutable().
			Comment("SelectionAttached / SelectionViewed / … (open set)."),
		field.Time("occurred_at").Immutable(),
		field.UUID("source_message_id", uuid.UUID{}).Optional().Nillable().Immutable().
			Comment("MessageId of the event that appended the row; NULL for rows written by the API."),
		field.JSON("payload", json.RawMessage{}).Immutable(),
		field.UUID("created_by_user_id", uuid.UUID{}).Optional().Nillable().Immutable().
			Comment("NULL: written by a consumer."),
		createdAt(),
	}
}

func (LeadEvent) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("lead", Lead.Type).Ref("events").
			Field("lead_id").Unique().Required().Immutable(),
	}
}

func (LeadEvent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("source_message_id").Unique().
			Annotations(entsql.IndexWhere("source_message_id IS NOT NULL")).
			StorageKey("ux_lead_events_source_message_id"),
		index.Fields("lead_id", "occurred_at").StorageKey("ix_lead_events_lead_occurred"),
	}
}
