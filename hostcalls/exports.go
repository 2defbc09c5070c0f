//go:build wasip1

package hostcalls

import "unsafe"

// The callbacks (exports) of ABI v0.2.1, with the signatures cpp-host
// checks: every parameter and result is an i32 (uint32 or bool here). Each one
// forwards to the dispatcher in context.go. Actions are returned as the raw
// u32 the HTTP callbacks' types.Action holds, so values beyond the spec's
// Continue/Pause (hostcalls.ActionStopIterationNoBuffer, ...) reach the host.

// proxy_abi_version_0_2_1 announces the ABI version; the host only checks
// that it is exported.
//
//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion021() {}

// proxy_on_memory_allocate(size) → ptr is the allocator the host uses to
// return data (see alloc.go).
//
//	size: i32 bytes wanted → ptr: i32 address of size writable bytes
//
//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) unsafe.Pointer { return allocatorEntry(size) }

// malloc and free are exported for WAMR, not for the proxy-wasm ABI. WAMR
// inserts a "host-managed heap" into the linear memory of every module that
// does not export both malloc(i32)→i32 and free(i32) (WAMR-2.4.4
// core/iwasm/interpreter/wasm_runtime.c memory_instantiate; cpp-host asks
// for a 32 KiB one through wasm_instance_new): one page appended after the
// module's declared initial memory, with the heap's header in its first
// bytes. A Go module's runtime takes the memory from round_up(runtime.end,
// 64 KiB) — exactly that page — for its own heap and trusts it to be zero,
// so the first heap objects start with WAMR's header words (a host pointer
// among them); in the pass-through module they are the stream table's
// slots, whose first proxy_on_delete loads through them and traps with "out
// of bounds memory access" (docs/wamr-findings.md). With both exported WAMR
// inserts no heap and the module's memory is what it declares.
//
// cpp-host looks malloc up before proxy_on_memory_allocate (src/wasm.cc), so
// Envoy now calls malloc; it is the same allocator, so Envoy, proxytest and
// the test host still exercise the same code. free does nothing: blocks live
// until the next host call rewinds the arena (alloc.go), and no host calls
// it (cpp-host never does; WAMR only through wasm_runtime_module_free,
// which cpp-host does not use).
//
//go:wasmexport malloc
func malloc(size uint32) unsafe.Pointer { return allocatorEntry(size) }

//go:wasmexport free
func free(unsafe.Pointer) {}

// allocatorEntry is the body of both allocator exports.
func allocatorEntry(size uint32) unsafe.Pointer {
	b := allocate(size)
	if cap(b) == 0 {
		if len(arena) > 0 {
			return unsafe.Pointer(&arena[0])
		}
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(contextID, parentID uint32) { onContextCreate(contextID, parentID) }

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootID, vmConfigSize uint32) bool { return onVMStart(rootID, vmConfigSize) }

//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootID, pluginConfigSize uint32) bool {
	return onConfigure(rootID, pluginConfigSize)
}

//go:wasmexport proxy_on_tick
func proxyOnTick(rootID uint32) { onTick(rootID) }

//go:wasmexport proxy_on_queue_ready
func proxyOnQueueReady(rootID, queueID uint32) { onQueueReady(rootID, queueID) }

//go:wasmexport proxy_on_http_call_response
func proxyOnHTTPCallResponse(rootID, token, numHeaders, bodySize, numTrailers uint32) {
	onHTTPCallResponse(rootID, token, numHeaders, bodySize, numTrailers)
}

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(contextID, numHeaders uint32, endOfStream bool) uint32 {
	return uint32(onRequestHeaders(contextID, numHeaders, endOfStream))
}

//go:wasmexport proxy_on_request_body
func proxyOnRequestBody(contextID, bodySize uint32, endOfStream bool) uint32 {
	return uint32(onRequestBody(contextID, bodySize, endOfStream))
}

//go:wasmexport proxy_on_request_trailers
func proxyOnRequestTrailers(contextID, numTrailers uint32) uint32 {
	return uint32(onRequestTrailers(contextID, numTrailers))
}

//go:wasmexport proxy_on_response_headers
func proxyOnResponseHeaders(contextID, numHeaders uint32, endOfStream bool) uint32 {
	return uint32(onResponseHeaders(contextID, numHeaders, endOfStream))
}

//go:wasmexport proxy_on_response_body
func proxyOnResponseBody(contextID, bodySize uint32, endOfStream bool) uint32 {
	return uint32(onResponseBody(contextID, bodySize, endOfStream))
}

//go:wasmexport proxy_on_response_trailers
func proxyOnResponseTrailers(contextID, numTrailers uint32) uint32 {
	return uint32(onResponseTrailers(contextID, numTrailers))
}

//go:wasmexport proxy_on_log
func proxyOnLog(contextID uint32) { onLog(contextID) }

//go:wasmexport proxy_on_done
func proxyOnDone(contextID uint32) bool { return onDone(contextID) }

//go:wasmexport proxy_on_delete
func proxyOnDelete(contextID uint32) { onDelete(contextID) }
