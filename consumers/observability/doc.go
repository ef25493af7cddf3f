// Package observability holds the tests that hold the three consumers to
// the observability sections of their specs, each service through the same
// test body: every code of the spec exported at 0 from the start, one
// trace per message (consume → handler → storage) on the lone and the batch
// path, and an outcome line with the spec's fields for every outcome.
package observability
