// Command gcmodule is a minimal proxy-wasm module whose exported gc
// callback runs the Go garbage collector: under the legacy WASI of Envoy
// 1.33–1.38 (poll_oneoff → ENOSYS) it dies with "poll_oneoff failed".
package main

import "runtime"

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) *byte {
	b := make([]byte, max(size, 1))
	return &b[0]
}

// gc runs one garbage collection and nothing else.
//
//go:wasmexport gc
func gc() { runtime.GC() }

func main() {}
