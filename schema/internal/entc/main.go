// Command entc generates the ent client in ent/ from the schemas in schema/.
// It is run by `go generate ./...` (see schema/generate.go); nothing under
// ent/ is written by hand.
package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
)

func main() {
	err := entc.Generate("./", &gen.Config{
		Target:  "../ent",
		Package: "github.com/pin-platform/pin/ent",
		Features: []gen.Feature{
			gen.FeatureUpsert,
			gen.FeatureLock,
			gen.FeatureVersionedMigration,
			gen.FeatureExecQuery,
			gen.FeatureModifier,
		},
	})
	if err != nil {
		log.Fatalf("entc: %v", err)
	}
}
