package host

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// proxy_set_effective_context(ctx_id) → status
//
// Makes ctx_id the context of the following host calls of the running
// callback (e.g. an HTTP context from on_http_call_response, before
// proxy_continue_stream). OK; BAD_ARGUMENT: no such live context in this
// VM.
func init() {
	registerEnv(hostcalls.ProxySetEffectiveContext, 1, ret32, func(vm *VM, _ api.Module, stack []uint64) {
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
	})
}

// proxy_done() → status
//
// Tells the host that the root context, whose on_done returned false,
// has finished: on_delete(root) follows after the current call. OK;
// NOT_FOUND if the VM is not waiting for it.
func init() {
	registerEnv(hostcalls.ProxyDone, 0, ret32, func(vm *VM, _ api.Module, stack []uint64) {
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
	})
}

// proxy_get_status(ret_code_ptr, ret_msg_ptr_ptr, ret_msg_size_ptr) → status
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
func init() {
	registerEnv(hostcalls.ProxyGetStatus, 3, ret32, func(vm *VM, mod api.Module, stack []uint64) {
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
	})
}

// proxy_call_foreign_function(name_ptr, name_len, args_ptr, args_len, ret_ptr_ptr, ret_size_ptr) → status
//
// The host registers no foreign function: NOT_FOUND, as Envoy for an
// unknown name.
func init() {
	registerEnv("proxy_call_foreign_function", 6, ret32, func(vm *VM, mod api.Module, stack []uint64) {
		name, _ := readString(mod, uint32(stack[0]), uint32(stack[1]))
		if vm.tracing {
			vm.trace("==> proxy_call_foreign_function(name=%q)", name)
		}
		setStatus(stack, hostcalls.StatusNotFound)
		vm.traceRet(hostcalls.StatusNotFound, "")
	})
}

// gRPC is not modelled: every proxy_grpc_* call answers UNIMPLEMENTED.
func init() {
	for name, n := range map[string]int{
		"proxy_grpc_call": 12, "proxy_grpc_stream": 9, "proxy_grpc_send": 4,
		"proxy_grpc_cancel": 1, "proxy_grpc_close": 1,
	} {
		registerEnv(name, n, ret32, func(vm *VM, _ api.Module, stack []uint64) {
			if vm.tracing {
				vm.trace("==> %s(...)", name)
			}
			setStatus(stack, hostcalls.StatusUnimplemented)
			vm.traceRet(hostcalls.StatusUnimplemented, "")
		})
	}
	// Envoy's own extras.
	registerEnv("envoy_resolve_dns", 3, ret32, func(vm *VM, _ api.Module, stack []uint64) {
		vm.trace("==> envoy_resolve_dns(...)")
		setStatus(stack, hostcalls.StatusUnimplemented)
		vm.traceRet(hostcalls.StatusUnimplemented, "")
	})
	registerEnv("pthread_equal", 2, ret32, func(_ *VM, _ api.Module, stack []uint64) {
		if uint32(stack[0]) == uint32(stack[1]) {
			stack[0] = 1
		} else {
			stack[0] = 0
		}
	})
	registerEnv("emscripten_notify_memory_growth", 1, nil, func(*VM, api.Module, []uint64) {})
}
