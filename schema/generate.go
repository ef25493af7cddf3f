// Package schema holds the ent schemas of every table the consumers own or
// touch (docs/contract.md §6). It is the only hand-written input of the generated
// ent client in ../ent and of the versioned migrations in ../migrate.
package schema

//go:generate go run ./internal/entc
