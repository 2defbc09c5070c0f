package host

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// proxyLog is proxy_log(level, msg_ptr, msg_len) → status.
//
// Records the message (Host.Logs, Options.Logger) if level ≥
// Options.LogLevel. OK; BAD_ARGUMENT: level > CRITICAL;
// INVALID_MEMORY_ACCESS. Allowed during allocation and _initialize.
//
//	msg_ptr
//	  |
//	  v
//	[ m e s s a g e ]   (msg_len bytes, no NUL)
func proxyLog(vm *VM, mod api.Module, stack []uint64) {
	level := hostcalls.LogLevel(uint32(stack[0]))
	msg, ok := readString(mod, uint32(stack[1]), uint32(stack[2]))
	if !ok {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	if vm.tracing {
		vm.trace("==> %s(level=%d,msg=%q)", hostcalls.ProxyLog, level, msg)
	}
	st := hostcalls.StatusOK
	if level > hostcalls.LogLevelCritical {
		st = hostcalls.StatusBadArgument
	} else if level >= vm.h.opts.LogLevel {
		vm.h.addLog(level, vm.index, msg)
	}
	setStatus(stack, st)
	vm.traceRet(st, "")
}

// proxyGetLogLevel is proxy_get_log_level(ret_level_ptr) → status.
//
// Writes Options.LogLevel as u32 LE. OK; INVALID_MEMORY_ACCESS.
//
//	ret_level_ptr
//	  |
//	  v
//	[ level u32le ]
func proxyGetLogLevel(vm *VM, mod api.Module, stack []uint64) {
	if vm.tracing {
		vm.trace("==> %s()", hostcalls.ProxyGetLogLevel)
	}
	st := hostcalls.StatusOK
	if !writeU32(mod, uint32(stack[0]), uint32(vm.h.opts.LogLevel)) {
		st = hostcalls.StatusInvalidMemoryAccess
	}
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "level=%d", vm.h.opts.LogLevel)
	}
}
