//go:build wasip1

package hostcalls

import "syscall"

// randomGet fills b from WASI random_get.
func randomGet(b []byte) error { return syscall.RandomGet(b) }
