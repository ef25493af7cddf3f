// Package schema holds the ent schemas of every table the consumers own or
// touch (docs/contract.md §6). It is the only hand-written input of the generated
// ent client in ../ent and of the versioned migrations in ../migrate.
package schema

// The generator runs without GOEXPERIMENT (the Makefile sets jsonv2 for
// its builds): under jsonv2 json.RawMessage is an alias of jsontext.Value,
// and ent would name that type in the generated code.
//go:generate env GOEXPERIMENT= go run ./internal/entc
