package host

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// buffer returns the buffer of type t in the running call's effective
// context, and whether it may be written, as Envoy's Context::getBuffer
// has it (source/extensions/common/wasm/context.cc):
//   - HTTP request/response body (0, 1), in any context: during that
//     direction's body callback, the body so far (everything buffered plus
//     this chunk); after a body callback returned StopIterationAndBuffer
//     and until the stream is resumed, the buffered body (so also in the
//     trailers callback that follows), readable and writable from any later
//     callback with the stream effective (Envoy's buffering_request_body_
//     → modifyDecodingBuffer: a tick, on_queue_ready, an http_call
//     answer, another stream's callback). Otherwise (root context with no
//     stream effective, headers callbacks, a body that was passed on or
//     held with StopIterationAndWatermark/NoBuffer) Envoy hands out an
//     empty buffer that cannot be written: reads are OK and empty,
//     writes BAD_ARGUMENT. Envoy never answers NOT_FOUND for a body.
//   - HTTP call response body (4): during proxy_on_http_call_response,
//     read-only.
//   - VM configuration (6): always, read-only. Plugin configuration (7):
//     during proxy_on_configure only (Envoy's temp_plugin_), read-only.
//
// Others (downstream/upstream data, gRPC, foreign args) are not modelled
// (ok false).
func (vm *VM) buffer(t hostcalls.BufferType) (buf *[]byte, mutable, ok bool) {
	switch t {
	case hostcalls.BufferHTTPRequestBody, hostcalls.BufferHTTPResponseBody:
		if s := vm.cur; s != nil {
			d := s.dir(t == hostcalls.BufferHTTPResponseBody)
			if d.inBody || d.buffering == StopIterationAndBuffer {
				return &d.buf, true, true
			}
		}
		var empty []byte
		return &empty, false, true
	case hostcalls.BufferHTTPCallResponseBody:
		if vm.callResp != nil {
			return &vm.callResp.body, false, true
		}
	case hostcalls.BufferVMConfiguration:
		b := vm.h.opts.VMConfig
		return &b, false, true
	case hostcalls.BufferPluginConfiguration:
		if vm.inConfigure {
			b := vm.configuring
			return &b, false, true
		}
	}
	return nil, false, false
}

// proxyGetBufferBytes is proxy_get_buffer_bytes(buf_type, start, max_size,
// ret_ptr_ptr, ret_size_ptr) → status.
//
// Copies buffer[start : min(start+max_size, len)] out through the guest's
// allocator. OK (an empty range is ptr=0,size=0 without allocation; an
// HTTP body that is not available now reads as empty, see VM.buffer);
// NOT_FOUND: the buffer is not available now (http_call body, plugin
// configuration); BAD_ARGUMENT: start > len or start+max_size overflows;
// INVALID_MEMORY_ACCESS.
//
//	ret_ptr_ptr   ret_size_ptr
//	  |             |
//	  v             v
//	[ ptr u32le ] [ size u32le ]
//	   +--> [ b y t e s ]   (allocated by the guest)
func proxyGetBufferBytes(vm *VM, mod api.Module, stack []uint64) {
	t := hostcalls.BufferType(uint32(stack[0]))
	start, size := uint32(stack[1]), uint32(stack[2])
	if vm.tracing {
		vm.trace("==> %s(type=%d,start=%d,max_size=%d)", hostcalls.ProxyGetBufferBytes, t, start, size)
	}
	buf, _, ok := vm.buffer(t)
	if !ok {
		setStatus(stack, hostcalls.StatusNotFound)
		vm.traceRet(hostcalls.StatusNotFound, "")
		return
	}
	b := *buf
	if uint64(start)+uint64(size) > 0xffffffff || int(start) > len(b) {
		setStatus(stack, hostcalls.StatusBadArgument)
		vm.traceRet(hostcalls.StatusBadArgument, "")
		return
	}
	end := min(int(start)+int(size), len(b))
	data := b[start:end]
	st := vm.copyOut(mod, data, uint32(stack[3]), uint32(stack[4]))
	setStatus(stack, st)
	if vm.tracing { // quoteMax costs even when the transcript is off
		vm.traceRet(st, "data=%s", quoteMax(data))
	}
}

// quoteMax quotes at most 64 bytes for the transcript.
func quoteMax(b []byte) string {
	if len(b) > 64 {
		return quote(b[:64]) + "..."
	}
	return quote(b)
}

func quote(b []byte) string { return strconvQuote(string(b)) }

// proxyGetBufferStatus is proxy_get_buffer_status(buf_type, ret_size_ptr,
// ret_flags_ptr) → status.
//
// Writes the buffer's size and flags (always 0, as cpp-host). OK;
// NOT_FOUND: not available; INVALID_MEMORY_ACCESS.
//
//	ret_size_ptr   ret_flags_ptr
//	[ size u32le ] [ 0 u32le ]
func proxyGetBufferStatus(vm *VM, mod api.Module, stack []uint64) {
	t := hostcalls.BufferType(uint32(stack[0]))
	if vm.tracing {
		vm.trace("==> %s(type=%d)", hostcalls.ProxyGetBufferStatus, t)
	}
	buf, _, ok := vm.buffer(t)
	if !ok {
		setStatus(stack, hostcalls.StatusNotFound)
		vm.traceRet(hostcalls.StatusNotFound, "")
		return
	}
	n := uint32(len(*buf))
	st := hostcalls.StatusOK
	if !writeU32(mod, uint32(stack[1]), n) || !writeU32(mod, uint32(stack[2]), 0) {
		st = hostcalls.StatusInvalidMemoryAccess
	}
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "size=%d flags=0", n)
	}
}

// setBody applies Envoy's Buffer::copyFrom
// (source/extensions/common/wasm/context.cc) to an HTTP body:
//
//	start=0, size=0          prepend data
//	start=0, size ≥ len      replace the whole body with data
//	start=0, 0 < size < len  BAD_ARGUMENT (no partial drain)
//	start ≥ len              append data
//	0 < start < len          BAD_ARGUMENT (no insertion in the middle)
//
// To replace a body whose length may have grown since it was read, pass a
// size of at least its length (the Go SDK passes MaxInt32).
func setBody(b []byte, start, size uint32, data []byte) ([]byte, hostcalls.Status) {
	switch {
	case start == 0 && size == 0:
		out := make([]byte, 0, len(data)+len(b))
		out = append(out, data...)
		return append(out, b...), hostcalls.StatusOK
	case start == 0 && int(size) >= len(b):
		return append([]byte(nil), data...), hostcalls.StatusOK
	case start == 0:
		return b, hostcalls.StatusBadArgument
	case int(start) >= len(b):
		return append(b, data...), hostcalls.StatusOK
	}
	return b, hostcalls.StatusBadArgument
}

// proxySetBufferBytes is proxy_set_buffer_bytes(buf_type, start, size,
// data_ptr, data_len) → status.
//
// Changes an HTTP body buffer (see setBody for the start/size cases). OK;
// BAD_ARGUMENT: 0 < start < len or (start 0, 0 < size < len), or the
// buffer cannot be written now (an HTTP body outside its body callback
// that is not held by StopIterationAndBuffer, the configurations, the
// http_call body: Envoy's read-only buffers answer BAD_ARGUMENT);
// NOT_FOUND: the buffer is not available now; INVALID_MEMORY_ACCESS.
// With Options.BufferFault, the status the hook answers instead.
//
//	data_ptr
//	  |
//	  v
//	[ d a t a ]   (data_len bytes)
func proxySetBufferBytes(vm *VM, mod api.Module, stack []uint64) {
	t := hostcalls.BufferType(uint32(stack[0]))
	start, size := uint32(stack[1]), uint32(stack[2])
	// A view of guest memory, not a copy: setBody copies data into a
	// new or grown buffer and nothing here can grow the guest's memory.
	data, okm := view(mod, uint32(stack[3]), uint32(stack[4]))
	if !okm {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	if vm.tracing { // quoteMax costs even when the transcript is off
		vm.trace("==> %s(type=%d,start=%d,size=%d,data=%s)", hostcalls.ProxySetBufferBytes, t, start, size, quoteMax(data))
	}
	buf, mutable, ok := vm.buffer(t)
	st := hostcalls.StatusOK
	switch {
	case !ok:
		st = hostcalls.StatusNotFound
	case !mutable:
		st = hostcalls.StatusBadArgument
	default:
		if f := vm.h.opts.BufferFault; f != nil {
			st = f(vm.index, t)
		}
		if st == hostcalls.StatusOK {
			*buf, st = setBody(*buf, start, size, data)
		}
	}
	setStatus(stack, st)
	if ok && mutable {
		if vm.tracing {
			vm.traceRet(st, "len=%d", len(*buf))
		}
	} else {
		vm.traceRet(st, "")
	}
}

// view returns guest memory [ptr, ptr+size) without copying it (nil for
// size 0): valid only until the guest runs again or its memory grows.
func view(mod api.Module, ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return mod.Memory().Read(ptr, size)
}
