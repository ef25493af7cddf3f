package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
)

// PrimaryKey names a table's primary-key constraint. ent leaves the name to
// PostgreSQL ("<table>_pkey"); migrate.Diff gives the constraint this name
// (a RENAME CONSTRAINT on an existing table).
type PrimaryKey struct {
	Constraint string
}

// Name implements ent's schema.Annotation.
func (PrimaryKey) Name() string { return "PrimaryKey" }

// all is every schema of the package.
var all = []ent.Interface{
	Chat{}, ChatParticipant{}, ChatEvent{}, ChatPush{},
	Lead{}, LeadEvent{},
	ProcessedMessage{}, ParkedMessage{},
	ReferralBondReplica{},
}

// PrimaryKeyNames returns, by table, the primary-key constraint names the
// schemas declare with a PrimaryKey annotation.
func PrimaryKeyNames() map[string]string {
	out := map[string]string{}
	for _, s := range all {
		var table, pk string
		for _, a := range s.Annotations() {
			switch a := a.(type) {
			case *entsql.Annotation:
				if a.Table != "" {
					table = a.Table
				}
			case PrimaryKey:
				pk = a.Constraint
			}
		}
		if table != "" && pk != "" {
			out[table] = pk
		}
	}
	return out
}
