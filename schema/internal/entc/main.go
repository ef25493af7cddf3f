// Command entc generates the ent client in ent/ from the schemas in schema/.
// It is run by `go generate ./...` (see schema/generate.go); nothing under
// ent/ is written by hand.
//
// It generates in two passes. The client (package ent and the packages of
// the entities) is generated without ent's migration support, so it does
// not import ent/migrate: that package's schema engine pulls Atlas, with
// its HCL, MySQL and SQLite support, into every binary that opens a
// client, and the consumers never migrate (pinctl migrate does, from the
// versioned files). ent/migrate itself (the tables' description, from
// which `pinctl migrate diff` writes new migrations) is generated in a
// second pass with migration support, into a scratch directory, and copied
// into ent/migrate unchanged.
package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
)

const (
	target = "../ent"
	pkg    = "github.com/pin-platform/pin/ent"
)

func config(migrate bool, target string) (*gen.Config, error) {
	sql, err := gen.NewStorage("sql")
	if err != nil {
		return nil, err
	}
	storage := *sql // NewStorage returns ent's own: change a copy
	if !migrate {
		storage.SchemaMode &^= gen.Migrate
	}
	return &gen.Config{
		Target:  target,
		Package: pkg,
		Storage: &storage,
		Features: []gen.Feature{
			gen.FeatureUpsert,
			gen.FeatureLock,
			gen.FeatureVersionedMigration,
			gen.FeatureExecQuery,
			gen.FeatureModifier,
		},
	}, nil
}

func main() {
	if err := run(); err != nil {
		log.Fatalf("entc: %v", err)
	}
}

func run() error {
	client, err := config(false, target)
	if err != nil {
		return err
	}
	if err := entc.Generate("./", client); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	scratch, err := os.MkdirTemp("", "entc-migrate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	full, err := config(true, scratch)
	if err != nil {
		return err
	}
	if err := entc.Generate("./", full); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(target, "migrate"), 0o755); err != nil {
		return err
	}
	for _, name := range []string{"migrate.go", "schema.go"} {
		b, err := os.ReadFile(filepath.Join(scratch, "migrate", name))
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if err := os.WriteFile(filepath.Join(target, "migrate", name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
