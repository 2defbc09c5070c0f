package host

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// The WASI module names cpp-host registers (both with the same functions).
const (
	wasiModule   = "wasi_snapshot_preview1"
	wasiUnstable = "wasi_unstable"
)

// WASI errno values used by cpp-host.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoInval   = 28
	errnoNoent   = 44
	errnoNosys   = 52
)

// maxRandom is cpp-host's limit on one random_get (64 KiB).
const maxRandom = 64 << 10

func registerWASI(name string, params []api.ValueType, fixedOnly bool, fn func(vm *VM, mod api.Module, stack []uint64)) {
	wasiFuncs[name] = hostFunc{params: params, results: ret32, fn: fn, fixedOnly: fixedOnly}
}

func errno(vm *VM, stack []uint64, e uint32) {
	stack[0] = uint64(e)
	if vm.tracing {
		vm.wtrace("<== errno=%d", e)
	}
}

// The WASI of proxy-wasm-cpp-host (src/exports.cc). Implemented:
// fd_write (stdout → info log, stderr → error log, line by line),
// environ_get/environ_sizes_get (Options.Env), args_get/args_sizes_get (no
// arguments), clock_time_get (realtime and monotonic both read the host
// Clock), random_get (≤ 64 KiB; deterministic when Options.Seed is set),
// fd_fdstat_get (fds 1 and 2: a character device with the fd_write right;
// others EBADF), sched_yield (0). Stubs: fd_read, fd_prestat_dir_name,
// fd_fdstat_set_flags → ENOSYS; fd_prestat_get → EBADF; path_open →
// ENOENT; fd_seek, fd_close → 0; proc_exit logs. poll_oneoff → ENOSYS
// (WASILegacy) or 0 with nevents=0 (WASIFixed). WASIFixed adds
// clock_res_get and fd_pwrite; the ~25 further file and socket stubs of
// cpp-host ≥ 94091cd are not provided (a module importing them fails to
// load, as it would on older Envoy).
func init() {
	registerWASI("args_get", sig(2), false, func(vm *VM, _ api.Module, stack []uint64) {
		vm.wtrace("==> args_get()")
		errno(vm, stack, errnoSuccess)
	})
	//	argc_ptr       argv_buf_size_ptr
	//	[ 0 u32le ]    [ 0 u32le ]
	registerWASI("args_sizes_get", sig(2), false, func(vm *VM, mod api.Module, stack []uint64) {
		vm.wtrace("==> args_sizes_get()")
		if !writeU32(mod, uint32(stack[0]), 0) || !writeU32(mod, uint32(stack[1]), 0) {
			errno(vm, stack, errnoInval)
			return
		}
		errno(vm, stack, errnoSuccess)
	})
	//	environ_ptr                       environ_buf_ptr
	//	[ p0 u32le | p1 u32le | ... ]      [ K = V \0 K = V \0 ... ]
	//	   p0 ---------------------------> ^
	registerWASI("environ_get", sig(2), false, func(vm *VM, mod api.Module, stack []uint64) {
		vm.wtrace("==> environ_get()")
		ptrs, buf := uint32(stack[0]), uint32(stack[1])
		for _, kv := range vm.h.environ() {
			if !writeU32(mod, ptrs, buf) || !mod.Memory().Write(buf, append([]byte(kv), 0)) {
				errno(vm, stack, errnoInval)
				return
			}
			ptrs += 4
			buf += uint32(len(kv) + 1)
		}
		errno(vm, stack, errnoSuccess)
	})
	//	count_ptr        buf_size_ptr
	//	[ n u32le ]      [ Σ(len(K=V)+1) u32le ]
	registerWASI("environ_sizes_get", sig(2), false, func(vm *VM, mod api.Module, stack []uint64) {
		vm.wtrace("==> environ_sizes_get()")
		env := vm.h.environ()
		size := 0
		for _, kv := range env {
			size += len(kv) + 1
		}
		if !writeU32(mod, uint32(stack[0]), uint32(len(env))) || !writeU32(mod, uint32(stack[1]), uint32(size)) {
			errno(vm, stack, errnoInval)
			return
		}
		errno(vm, stack, errnoSuccess)
	})
	//	time_ptr
	//	[ unix ns u64le ]
	registerWASI("clock_time_get", []api.ValueType{i32, i64, i32}, false, func(vm *VM, mod api.Module, stack []uint64) {
		id := uint32(stack[0])
		if vm.tracing {
			vm.wtrace("==> clock_time_get(id=%d)", id)
		}
		if id > 1 {
			errno(vm, stack, errnoInval)
			return
		}
		ns := uint64(vm.h.opts.Clock.Now().UnixNano())
		if id == 1 && ns == 0 {
			// Go's runtime throws "nanotime returning zero" on a zero
			// monotonic time (a VirtualClock at the Unix epoch).
			ns = 1
		}
		if !mod.Memory().WriteUint64Le(uint32(stack[2]), ns) {
			errno(vm, stack, errnoInval)
			return
		}
		errno(vm, stack, errnoSuccess)
	})
	//	res_ptr
	//	[ 1 u64le ]   (nanosecond resolution)
	registerWASI("clock_res_get", sig(2), true, func(vm *VM, mod api.Module, stack []uint64) {
		if vm.tracing {
			vm.wtrace("==> clock_res_get(id=%d)", uint32(stack[0]))
		}
		if uint32(stack[0]) > 1 {
			errno(vm, stack, errnoInval)
			return
		}
		if !mod.Memory().WriteUint64Le(uint32(stack[1]), 1) {
			errno(vm, stack, errnoInval)
			return
		}
		errno(vm, stack, errnoSuccess)
	})
	//	buf_ptr
	//	[ random bytes × len ]
	registerWASI("random_get", sig(2), false, func(vm *VM, mod api.Module, stack []uint64) {
		ptr, n := uint32(stack[0]), uint32(stack[1])
		if vm.tracing {
			vm.wtrace("==> random_get(len=%d)", n)
		}
		if n > maxRandom {
			errno(vm, stack, errnoInval)
			return
		}
		b := make([]byte, n)
		if vm.rnd != nil {
			for i := 0; i < len(b); i += 8 {
				var w [8]byte
				binary.LittleEndian.PutUint64(w[:], vm.rnd.next())
				copy(b[i:], w[:])
			}
		} else {
			rand.Read(b)
		}
		if !mod.Memory().Write(ptr, b) {
			errno(vm, stack, errnoInval)
			return
		}
		errno(vm, stack, errnoSuccess)
	})
	registerWASI("fd_write", sig(4), false, func(vm *VM, mod api.Module, stack []uint64) {
		fdWrite(vm, mod, stack, uint32(stack[3]))
	})
	registerWASI("fd_pwrite", []api.ValueType{i32, i32, i32, i64, i32}, true, func(vm *VM, mod api.Module, stack []uint64) {
		fdWrite(vm, mod, stack, uint32(stack[4]))
	})
	//	buf_ptr (24 bytes)
	//	[ filetype u8 = 2 | pad | flags u16 = 0 | pad | rights_base u64le = 64 | rights_inheriting u64le = 0 ]
	registerWASI("fd_fdstat_get", sig(2), false, func(vm *VM, mod api.Module, stack []uint64) {
		fd := uint32(stack[0])
		if vm.tracing {
			vm.wtrace("==> fd_fdstat_get(fd=%d)", fd)
		}
		if fd != 1 && fd != 2 {
			errno(vm, stack, errnoBadf)
			return
		}
		var st [24]byte
		st[0] = 2 // character device
		binary.LittleEndian.PutUint64(st[8:], 64)
		if !mod.Memory().Write(uint32(stack[1]), st[:]) {
			errno(vm, stack, errnoInval)
			return
		}
		errno(vm, stack, errnoSuccess)
	})
	registerWASI("sched_yield", nil, false, func(vm *VM, _ api.Module, stack []uint64) {
		vm.wtrace("==> sched_yield()")
		stack[0] = errnoSuccess
		vm.wtrace("<== errno=0")
	})
	stub := func(name string, params []api.ValueType, e uint32, fixedOnly bool) {
		registerWASI(name, params, fixedOnly, func(vm *VM, _ api.Module, stack []uint64) {
			if vm.tracing {
				vm.wtrace("==> %s(...)", name)
			}
			errno(vm, stack, e)
		})
	}
	stub("fd_read", sig(4), errnoNosys, false)
	stub("fd_prestat_dir_name", sig(3), errnoNosys, false)
	stub("fd_fdstat_set_flags", sig(2), errnoNosys, false)
	stub("fd_prestat_get", sig(2), errnoBadf, false)
	stub("path_open", []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, errnoNoent, false)
	stub("fd_seek", []api.ValueType{i32, i64, i32, i32}, errnoSuccess, false)
	stub("fd_close", sig(1), errnoSuccess, false)
	wasiFuncs["proc_exit"] = hostFunc{params: sig(1), fn: func(vm *VM, _ api.Module, stack []uint64) {
		if vm.tracing {
			vm.wtrace("==> proc_exit(code=%d)", uint32(stack[0]))
		}
		vm.h.addLog(hostcalls.LogLevelInfo, vm.index, fmt.Sprintf("proc_exit(%d)", uint32(stack[0])))
	}}
	// poll_oneoff(in, out, nsubscriptions, nevents_ptr) → errno
	//
	// WASILegacy: ENOSYS (52), nothing written — Go's runtime then throws
	// "poll_oneoff failed". WASIFixed: 0 and nevents=0.
	//
	//	nevents_ptr
	//	[ 0 u32le ]   (fixed only)
	registerWASI("poll_oneoff", sig(4), false, func(vm *VM, mod api.Module, stack []uint64) {
		if vm.tracing {
			vm.wtrace("==> poll_oneoff(nsubscriptions=%d)", uint32(stack[2]))
		}
		if vm.h.opts.WASI == WASILegacy {
			errno(vm, stack, errnoNosys)
			return
		}
		if !writeU32(mod, uint32(stack[3]), 0) {
			errno(vm, stack, errnoInval)
			return
		}
		errno(vm, stack, errnoSuccess)
	})
}

// fdWrite gathers the iovecs and logs complete lines: fd 1 at info, fd 2 at
// error; other fds EBADF.
//
//	iovs_ptr                                  nwritten_ptr
//	[ buf0 u32le | len0 u32le | buf1 | len1 ]  [ n u32le ]
func fdWrite(vm *VM, mod api.Module, stack []uint64, nwrittenPtr uint32) {
	fd, iovs, n := uint32(stack[0]), uint32(stack[1]), uint32(stack[2])
	if fd != 1 && fd != 2 {
		if vm.tracing {
			vm.wtrace("==> fd_write(fd=%d)", fd)
		}
		errno(vm, stack, errnoBadf)
		return
	}
	mem := mod.Memory()
	total := uint32(0)
	for i := uint32(0); i < n; i++ {
		p, ok1 := mem.ReadUint32Le(iovs + 8*i)
		l, ok2 := mem.ReadUint32Le(iovs + 8*i + 4)
		b, ok3 := mem.Read(p, l)
		if !ok1 || !ok2 || !ok3 {
			errno(vm, stack, errnoInval)
			return
		}
		vm.fdbuf[fd] = append(vm.fdbuf[fd], b...)
		total += l
	}
	if vm.tracing {
		vm.wtrace("==> fd_write(fd=%d,data=%q)", fd, vm.fdbuf[fd])
	}
	level := hostcalls.LogLevelInfo
	if fd == 2 {
		level = hostcalls.LogLevelError
	}
	for {
		i := strings.IndexByte(string(vm.fdbuf[fd]), '\n')
		if i < 0 {
			break
		}
		vm.h.addLog(level, vm.index, string(vm.fdbuf[fd][:i]))
		vm.fdbuf[fd] = vm.fdbuf[fd][i+1:]
	}
	if !writeU32(mod, nwrittenPtr, total) {
		errno(vm, stack, errnoInval)
		return
	}
	errno(vm, stack, errnoSuccess)
}

// environ returns Options.Env as sorted "K=V" strings.
func (h *Host) environ() []string {
	out := make([]string, 0, len(h.opts.Env))
	for k, v := range h.opts.Env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
