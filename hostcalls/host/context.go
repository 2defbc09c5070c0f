package host

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// proxySetEffectiveContext is proxy_set_effective_context(ctx_id) → status.
//
// Makes ctx_id the context of the following host calls of the running
// callback (e.g. an HTTP context from on_http_call_response, before
// proxy_continue_stream). OK; BAD_ARGUMENT: no such live context in this
// VM. No memory is touched.
func proxySetEffectiveContext(vm *VM, _ api.Module, stack []uint64) {
	id := uint32(stack[0])
	if vm.tracing {
		vm.trace("==> %s(ctx=%d)", hostcalls.ProxySetEffectiveContext, id)
	}
	s, ok := vm.lookupContext(id)
	st := hostcalls.StatusOK
	if ok {
		vm.curID, vm.cur = id, s
	} else {
		st = hostcalls.StatusBadArgument
	}
	setStatus(stack, st)
	vm.traceRet(st, "")
}

// proxyDone is proxy_done() → status.
//
// Tells the host that the root context, whose on_done returned false,
// has finished: on_delete(root) follows after the current call. OK;
// NOT_FOUND if the VM is not waiting for it. No memory is touched.
func proxyDone(vm *VM, _ api.Module, stack []uint64) {
	if vm.tracing {
		vm.trace("==> %s()", hostcalls.ProxyDone)
	}
	st := hostcalls.StatusOK
	if vm.waitDone {
		vm.waitDone = false
		vm.deferred = append(vm.deferred, func() {
			vm.enter()
			vm.curID, vm.cur = rootContextID, nil
			vm.callback(cbDelete, 0, rootContextID)
			vm.deleteRoot()
			closeNow := vm.active.Load() == 0
			vm.exit()
			if closeNow {
				vm.closeInstance(vm.ctx)
			}
		})
	} else {
		st = hostcalls.StatusNotFound
	}
	setStatus(stack, st)
	vm.traceRet(st, "")
}

// proxyGetStatus is proxy_get_status(ret_code_ptr, ret_msg_ptr_ptr,
// ret_msg_size_ptr) → status.
//
// In on_http_call_response: the call's status — 0 and an empty message on
// success, 11 and "reset" on failure. Elsewhere: the last status set (0,
// ""). OK; INVALID_MEMORY_ACCESS.
//
//	ret_code_ptr   ret_msg_ptr_ptr   ret_msg_size_ptr
//	  |               |                 |
//	  v               v                 v
//	[ code u32le ] [ ptr u32le ]     [ size u32le ]
//	                  +--> [ m s g ]  (allocated by the guest; none if empty)
func proxyGetStatus(vm *VM, mod api.Module, stack []uint64) {
	if vm.tracing {
		vm.trace("==> %s()", hostcalls.ProxyGetStatus)
	}
	code, msg := vm.status.code, vm.status.msg
	st := hostcalls.StatusOK
	if !writeU32(mod, uint32(stack[0]), code) {
		st = hostcalls.StatusInvalidMemoryAccess
	} else {
		st = vm.copyOut(mod, []byte(msg), uint32(stack[1]), uint32(stack[2]))
	}
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "code=%d msg=%q", code, msg)
	}
}

// proxyCallForeignFunction is proxy_call_foreign_function(name_ptr,
// name_len, args_ptr, args_len, ret_ptr_ptr, ret_size_ptr) → status.
//
// The host registers no foreign function: NOT_FOUND, as Envoy for an
// unknown name. Only the name is read (for the transcript).
//
//	name_ptr
//	[ n a m e ]   (name_len bytes)
func proxyCallForeignFunction(vm *VM, mod api.Module, stack []uint64) {
	name, _ := readString(mod, uint32(stack[0]), uint32(stack[1]))
	if vm.tracing {
		vm.trace("==> proxy_call_foreign_function(name=%q)", name)
	}
	setStatus(stack, hostcalls.StatusNotFound)
	vm.traceRet(hostcalls.StatusNotFound, "")
}

// gRPC is not modelled: every proxy_grpc_* call answers UNIMPLEMENTED and
// touches no memory.

// proxyGrpcCall is proxy_grpc_call(12 × i32) → UNIMPLEMENTED.
func proxyGrpcCall(vm *VM, _ api.Module, stack []uint64) {
	unimplemented(vm, stack, "proxy_grpc_call")
}

// proxyGrpcStream is proxy_grpc_stream(9 × i32) → UNIMPLEMENTED.
func proxyGrpcStream(vm *VM, _ api.Module, stack []uint64) {
	unimplemented(vm, stack, "proxy_grpc_stream")
}

// proxyGrpcSend is proxy_grpc_send(token, msg_ptr, msg_len, end_stream) →
// UNIMPLEMENTED.
func proxyGrpcSend(vm *VM, _ api.Module, stack []uint64) {
	unimplemented(vm, stack, "proxy_grpc_send")
}

// proxyGrpcCancel is proxy_grpc_cancel(token) → UNIMPLEMENTED.
func proxyGrpcCancel(vm *VM, _ api.Module, stack []uint64) {
	unimplemented(vm, stack, "proxy_grpc_cancel")
}

// proxyGrpcClose is proxy_grpc_close(token) → UNIMPLEMENTED.
func proxyGrpcClose(vm *VM, _ api.Module, stack []uint64) {
	unimplemented(vm, stack, "proxy_grpc_close")
}

// unimplemented answers UNIMPLEMENTED for the host function name.
func unimplemented(vm *VM, stack []uint64, name string) {
	if vm.tracing {
		vm.trace("==> %s(...)", name)
	}
	setStatus(stack, hostcalls.StatusUnimplemented)
	vm.traceRet(hostcalls.StatusUnimplemented, "")
}

// Envoy's own extras.

// envoyResolveDNS is envoy_resolve_dns(dns_address_ptr, dns_address_size,
// token_ptr) → UNIMPLEMENTED. No memory is touched.
func envoyResolveDNS(vm *VM, _ api.Module, stack []uint64) {
	vm.trace("==> envoy_resolve_dns(...)")
	setStatus(stack, hostcalls.StatusUnimplemented)
	vm.traceRet(hostcalls.StatusUnimplemented, "")
}

// pthreadEqual is pthread_equal(a, b) → 1 if a == b, else 0 (Envoy's stub
// for Emscripten guests). Not traced.
func pthreadEqual(_ *VM, _ api.Module, stack []uint64) {
	if uint32(stack[0]) == uint32(stack[1]) {
		stack[0] = 1
	} else {
		stack[0] = 0
	}
}

// emscriptenNotifyMemoryGrowth is emscripten_notify_memory_growth(index):
// no result, nothing done. Not traced.
func emscriptenNotifyMemoryGrowth(*VM, api.Module, []uint64) {}
