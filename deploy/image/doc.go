// Package image tests the consumers' container image (the Containerfile,
// `make image`) end to end: `make image-test` runs its test, built with the
// tag image, with PIN_IMAGE naming the image and PIN_CONTAINER the engine
// command (podman or docker, with the host's flags). Against the test
// PostgreSQL and an in-process broker on the host network, the image's
// pinctl migrates a fresh database, and its rewards consumer applies an
// event, dead-letters a poison message, answers /readyz and exits 0 on
// stop within its drain time; both run with a read-only root filesystem,
// no capabilities, as the image's non-root user. It has no code.
package image
