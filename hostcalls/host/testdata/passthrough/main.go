// Command passthrough is the smallest proxy-wasm module: it announces the
// ABI and exports an allocator; with no callbacks exported every stream
// event continues.
package main

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) *byte {
	b := make([]byte, max(size, 1))
	return &b[0]
}

func main() {}
