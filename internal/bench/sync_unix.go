//go:build unix

package bench

import "golang.org/x/sys/unix"

// syncDisks writes the machine's dirty pages out (sync(2)), for settle.
func syncDisks() { unix.Sync() }
