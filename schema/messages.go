package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

var text = map[string]string{dialect.Postgres: "text"}

// ProcessedMessage is the idempotency mark of a handled message, written in
// the transaction of the message's effects. Marks are kept, so that a replay
// of a topic from offset 0 stays safe.
type ProcessedMessage struct{ ent.Schema }

func (ProcessedMessage) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("processed_messages")}
}

func (ProcessedMessage) Fields() []ent.Field {
	return []ent.Field{
		// COLLATE "C" (byte order, for the searches of its primary key):
		// set by migration 20261206214500, which ent cannot declare for a
		// primary key (docs/schema.md, "A key rebuilt").
		field.String("id").StorageKey("idempotency_key").SchemaType(text).NotEmpty().Immutable().
			Comment("e.g. rewards:bond-created:{MessageId}"),
		field.String("consumer_group").SchemaType(text).Immutable(),
		field.String("topic").SchemaType(text).Immutable(),
		field.Int32("partition").Immutable(),
		field.Int64("offset").Immutable(),
		field.String("outcome").SchemaType(map[string]string{dialect.Postgres: "varchar(64)"}).Immutable().
			Comment("The outcome's log name: applied, skipped-stale, …"),
		field.Time("processed_at").Default(time.Now).Immutable().Annotations(entsql.DefaultExpr("now()")),
	}
}

// ParkedMessage is a message waiting out a retry-later error (the chat or the
// lead it needs does not exist yet). Parking commits before the source
// offset, so the wait survives restarts and does not hold the partition; any
// instance of the group re-drives due rows (FOR UPDATE SKIP LOCKED).
type ParkedMessage struct{ ent.Schema }

// Header is a Kafka header kept with a parked message.
type Header struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

func (ParkedMessage) Annotations() []schema.Annotation {
	return []schema.Annotation{
		entsql.Table("parked_messages"),
		entsql.Checks(map[string]string{
			"ck_parked_messages_attempts":      "attempts >= 1",
			"ck_parked_messages_schedule_step": "schedule_step >= 0",
			"ck_parked_messages_unexpected":    "unexpected_failures >= 0",
		}),
	}
}

func (ParkedMessage) Fields() []ent.Field {
	return []ent.Field{
		idField(),
		field.String("consumer_group").SchemaType(text).Immutable(),
		field.String("topic").SchemaType(text).Immutable(),
		field.Int32("partition").Immutable(),
		field.Int64("offset").Immutable(),
		field.Bytes("key").Optional().Nillable().Immutable(),
		field.Bytes("value").Optional().Nillable().Immutable(),
		field.JSON("headers", []Header{}).Optional().Immutable(),
		field.UUID("message_id", uuid.UUID{}).Immutable(),
		field.String("event_type").SchemaType(text).Immutable(),
		field.String("error_code").SchemaType(map[string]string{dialect.Postgres: "varchar(64)"}),
		field.String("reason").SchemaType(text),
		field.Int("attempts").Comment("Processing attempts so far, the first included."),
		field.Int("schedule_step").Default(0).Annotations(entsql.Default("0")).
			Comment("Retry-later retries used: the index of the next delay in the code's schedule."),
		field.Int("unexpected_failures").Default(0).Annotations(entsql.Default("0")).
			Comment("Re-drives that failed unexpectedly (not a code of the spec, not the world's failure): at the runtime's limit, with another message of its route committed since the last one, the message is dead-lettered as EVENT_PROCESSING_FAILED."),
		field.Time("next_attempt_at"),
		createdAt(),
		nowDefault("updated_at"),
	}
}

func (ParkedMessage) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("consumer_group", "topic", "partition", "offset").Unique().
			StorageKey("ux_parked_messages_source"),
		index.Fields("consumer_group", "next_attempt_at").StorageKey("ix_parked_messages_due"),
	}
}
