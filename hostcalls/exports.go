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
// return data (see alloc.go). malloc is deliberately not exported: cpp-host
// would prefer it (it looks up malloc first), and one allocator entry point
// means Envoy, proxytest and the test host all exercise the same code.
//
//	size: i32 bytes wanted → ptr: i32 address of size writable bytes
//
//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) unsafe.Pointer {
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
