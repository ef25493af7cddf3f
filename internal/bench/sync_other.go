//go:build !unix

package bench

// syncDisks does nothing where there is no sync(2).
func syncDisks() {}
