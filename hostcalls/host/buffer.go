package host

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// buffer returns the buffer of type t in the running call's effective
// context, and whether it may be written:
//   - HTTP request/response body (0, 1): the stream's body buffer, during
//     that direction's body or trailers callback or while it is buffered;
//     everything buffered so far after StopIterationAndBuffer.
//   - HTTP call response body (4): during proxy_on_http_call_response.
//   - VM configuration (6): always. Plugin configuration (7): during
//     proxy_on_configure only (Envoy's temp_plugin_).
//
// Others (downstream/upstream data, gRPC, foreign args) are not modelled.
func (vm *VM) buffer(t hostcalls.BufferType) (buf *[]byte, mutable, ok bool) {
	switch t {
	case hostcalls.BufferHTTPRequestBody, hostcalls.BufferHTTPResponseBody:
		s := vm.cur
		if s == nil {
			return nil, false, false
		}
		d := s.dir(t == hostcalls.BufferHTTPResponseBody)
		if d.inBody || d.buffering != 0 || d.trailersMutable {
			return &d.buf, true, true
		}
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

// proxy_get_buffer_bytes(buf_type, start, max_size, ret_ptr_ptr, ret_size_ptr) → status
//
// Copies buffer[start : min(start+max_size, len)] out through the guest's
// allocator. OK (an empty range is ptr=0,size=0 without allocation);
// NOT_FOUND: the buffer is not available now; BAD_ARGUMENT: start > len
// or start+max_size overflows; INVALID_MEMORY_ACCESS.
//
//	ret_ptr_ptr   ret_size_ptr
//	  |             |
//	  v             v
//	[ ptr u32le ] [ size u32le ]
//	   +--> [ b y t e s ]   (allocated by the guest)
func init() {
	registerEnv(hostcalls.ProxyGetBufferBytes, 5, ret32, func(vm *VM, mod api.Module, stack []uint64) {
		t := hostcalls.BufferType(uint32(stack[0]))
		start, size := uint32(stack[1]), uint32(stack[2])
		vm.trace("==> %s(type=%d,start=%d,max_size=%d)", hostcalls.ProxyGetBufferBytes, t, start, size)
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
	})
}

// quoteMax quotes at most 64 bytes for the transcript.
func quoteMax(b []byte) string {
	if len(b) > 64 {
		return quote(b[:64]) + "..."
	}
	return quote(b)
}

func quote(b []byte) string { return strconvQuote(string(b)) }

// proxy_get_buffer_status(buf_type, ret_size_ptr, ret_flags_ptr) → status
//
// Writes the buffer's size and flags (always 0, as cpp-host). OK;
// NOT_FOUND: not available; INVALID_MEMORY_ACCESS.
//
//	ret_size_ptr   ret_flags_ptr
//	[ size u32le ] [ 0 u32le ]
func init() {
	registerEnv(hostcalls.ProxyGetBufferStatus, 3, ret32, func(vm *VM, mod api.Module, stack []uint64) {
		t := hostcalls.BufferType(uint32(stack[0]))
		vm.trace("==> %s(type=%d)", hostcalls.ProxyGetBufferStatus, t)
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
		vm.traceRet(st, "size=%d flags=0", n)
	})
}

// setBody applies Envoy's Buffer::copyFrom to an HTTP body:
//
//	start=0, size=0      prepend data
//	start=0, size>0      drain(size) then prepend: (0, ≥len) replaces
//	start ≥ len          append data
//	0 < start < len      BAD_ARGUMENT (no insertion in the middle)
func setBody(b []byte, start, size uint32, data []byte) ([]byte, hostcalls.Status) {
	switch {
	case start == 0:
		drop := min(int(size), len(b))
		out := make([]byte, 0, len(data)+len(b)-drop)
		out = append(out, data...)
		return append(out, b[drop:]...), hostcalls.StatusOK
	case int(start) >= len(b):
		return append(b, data...), hostcalls.StatusOK
	}
	return b, hostcalls.StatusBadArgument
}

// proxy_set_buffer_bytes(buf_type, start, size, data_ptr, data_len) → status
//
// Changes an HTTP body buffer (see setBody for the start/size cases). OK;
// BAD_ARGUMENT: 0 < start < len; NOT_FOUND: no body buffer now;
// UNIMPLEMENTED: a read-only buffer (configurations, http_call body);
// INVALID_MEMORY_ACCESS.
//
//	data_ptr
//	  |
//	  v
//	[ d a t a ]   (data_len bytes)
func init() {
	registerEnv(hostcalls.ProxySetBufferBytes, 5, ret32, func(vm *VM, mod api.Module, stack []uint64) {
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
			st = hostcalls.StatusUnimplemented
		default:
			*buf, st = setBody(*buf, start, size, data)
		}
		setStatus(stack, st)
		if ok && mutable {
			vm.traceRet(st, "len=%d", len(*buf))
		} else {
			vm.traceRet(st, "")
		}
	})
}

// view returns guest memory [ptr, ptr+size) without copying it (nil for
// size 0): valid only until the guest runs again or its memory grows.
func view(mod api.Module, ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return mod.Memory().Read(ptr, size)
}
