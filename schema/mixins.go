package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/mixin"
	"github.com/google/uuid"
)

// varchar32 is the column type of every enum-like text column: the value's
// name as text (docs/contract.md §6).
var varchar32 = map[string]string{dialect.Postgres: "varchar(32)"}

// enumText is an enum-like varchar(32) column holding the value's name.
func enumText(name string) ent.Field {
	return field.String(name).SchemaType(varchar32).NotEmpty()
}

// idField is an "id uuid PRIMARY KEY DEFAULT gen_random_uuid()" column. The
// database default serves rows inserted by other components and by hand;
// ent fills the value client-side with a version 7 (time-ordered) UUID, as
// the consumers' set-based inserts do (consumer.NewRowID): new rows land
// at the right edge of the primary key's index, not on a random leaf.
func idField() ent.Field {
	return field.UUID("id", uuid.UUID{}).
		Default(NewRowID).
		Immutable().
		Annotations(entsql.DefaultExpr("gen_random_uuid()"))
}

// nowDefault is a timestamptz column with DEFAULT now().
func nowDefault(name string) ent.Field {
	return field.Time(name).
		Default(time.Now).
		Annotations(entsql.DefaultExpr("now()"))
}

// createdAt is an immutable created_at timestamptz DEFAULT now().
func createdAt() ent.Field {
	return field.Time("created_at").
		Default(time.Now).
		Immutable().
		Annotations(entsql.DefaultExpr("now()"))
}

// timestamps adds created_at and updated_at, both DEFAULT now().
type timestamps struct{ mixin.Schema }

func (timestamps) Fields() []ent.Field {
	return []ent.Field{
		createdAt(),
		field.Time("updated_at").
			Default(time.Now).
			UpdateDefault(time.Now).
			Annotations(entsql.DefaultExpr("now()")),
	}
}

// rowVersion is the optimistic-lock column: every write of the row moves it
// by one and is conditioned on the value read.
func rowVersion() ent.Field {
	return field.Int64("row_version").
		Default(0).
		Annotations(entsql.Default("0"))
}

// NewRowID is a new row's primary key: a version 7 UUID, whose leading 48
// bits are the time in milliseconds.
func NewRowID() uuid.UUID { return uuid.Must(uuid.NewV7()) }
