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

// errno sets the WASI result e and traces it.
func errno(vm *VM, stack []uint64, e uint32) {
	stack[0] = uint64(e)
	if vm.tracing {
		vm.wtrace("<== errno=%d", e)
	}
}

// The WASI of proxy-wasm-cpp-host (src/exports.cc), registered from
// wasiFunctions (functions.go). Implemented: fd_write (stdout → info log,
// stderr → error log, line by line), environ_get/environ_sizes_get
// (Options.Env), args_get/args_sizes_get (no arguments), clock_time_get
// (realtime and monotonic both read the host Clock), random_get (≤ 64 KiB;
// deterministic when Options.Seed is set), fd_fdstat_get (fds 1 and 2: a
// filetype 0 (unknown) with the fd_write right; others EBADF), sched_yield
// (0). Stubs: fd_read, fd_prestat_dir_name, fd_fdstat_set_flags → ENOSYS;
// fd_prestat_get → EBADF; path_open → ENOENT; fd_seek, fd_close → 0;
// proc_exit logs. poll_oneoff → ENOSYS (ProfileCppHostC4d7bb0) or 0 with
// nevents=0 (ProfileCppHost94091cd). Which functions a module may import
// is the Profile's (wasiProvides): ProfileCppHostPreC4d7bb0 lacks
// sched_yield, poll_oneoff and fd_fdstat_set_flags, only
// ProfileCppHost94091cd has clock_res_get and fd_pwrite; the ~25 further file and socket stubs of cpp-host ≥
// 94091cd are not provided (a module importing them fails to load, as it
// would on older Envoy). Every function's transcript lines need
// Options.TranscriptWASI too.

// argsGet is args_get(argv_ptr, argv_buf_ptr) → errno: no arguments,
// nothing written. Always 0.
func argsGet(vm *VM, _ api.Module, stack []uint64) {
	vm.wtrace("==> args_get()")
	errno(vm, stack, errnoSuccess)
}

// argsSizesGet is args_sizes_get(argc_ptr, argv_buf_size_ptr) → errno:
// no arguments. 0; EINVAL: a pointer out of range.
//
//	argc_ptr       argv_buf_size_ptr
//	[ 0 u32le ]    [ 0 u32le ]
func argsSizesGet(vm *VM, mod api.Module, stack []uint64) {
	vm.wtrace("==> args_sizes_get()")
	if !writeU32(mod, uint32(stack[0]), 0) || !writeU32(mod, uint32(stack[1]), 0) {
		errno(vm, stack, errnoInval)
		return
	}
	errno(vm, stack, errnoSuccess)
}

// environGet is environ_get(environ_ptr, environ_buf_ptr) → errno: writes
// Options.Env as sorted "K=V" strings, NUL-terminated, and a pointer to
// each. 0; EINVAL: out of range.
//
//	environ_ptr                       environ_buf_ptr
//	[ p0 u32le | p1 u32le | ... ]      [ K = V \0 K = V \0 ... ]
//	   p0 ---------------------------> ^
func environGet(vm *VM, mod api.Module, stack []uint64) {
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
}

// environSizesGet is environ_sizes_get(count_ptr, buf_size_ptr) → errno:
// the number of variables of Options.Env and the bytes environ_get
// writes. 0; EINVAL: out of range.
//
//	count_ptr        buf_size_ptr
//	[ n u32le ]      [ Σ(len(K=V)+1) u32le ]
func environSizesGet(vm *VM, mod api.Module, stack []uint64) {
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
}

// clockTimeGet is clock_time_get(id, i64 precision, time_ptr) → errno:
// the host Clock's Unix time in nanoseconds for realtime (0) and
// monotonic (1) alike (a monotonic 0 is written as 1: Go's runtime
// throws on a zero nanotime). 0; EINVAL: another clock, or out of range.
//
//	time_ptr
//	[ unix ns u64le ]
func clockTimeGet(vm *VM, mod api.Module, stack []uint64) {
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
}

// clockResGet is clock_res_get(id, res_ptr) → errno (ProfileCppHost94091cd only):
// nanosecond resolution for clocks 0 and 1. 0; EINVAL: another clock, or
// out of range.
//
//	res_ptr
//	[ 1 u64le ]   (nanosecond resolution)
func clockResGet(vm *VM, mod api.Module, stack []uint64) {
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
}

// randomGet is random_get(buf_ptr, len) → errno: len random bytes, from
// the VM's seeded source when Options.Seed is set, else crypto/rand. 0;
// EINVAL: len > 64 KiB (cpp-host's limit), or out of range.
//
//	buf_ptr
//	[ random bytes × len ]
func randomGet(vm *VM, mod api.Module, stack []uint64) {
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
}

// fdWrite is fd_write(fd, iovs_ptr, iovs_len, nwritten_ptr) → errno; see
// writeFd for the results and the memory.
func fdWrite(vm *VM, mod api.Module, stack []uint64) {
	writeFd(vm, mod, stack, uint32(stack[3]))
}

// fdPwrite is fd_pwrite(fd, iovs_ptr, iovs_len, i64 offset, nwritten_ptr)
// → errno (ProfileCppHost94091cd only): fd_write, the offset ignored.
func fdPwrite(vm *VM, mod api.Module, stack []uint64) {
	writeFd(vm, mod, stack, uint32(stack[4]))
}

// fdFdstatGet is fd_fdstat_get(fd, buf_ptr) → errno: fds 1 and 2 are a
// filetype 0 (unknown, as cpp-host writes it: three words 0, 64, 0 in
// src/exports.cc at f199214 and 94091cd alike) with the fd_write right.
// 0; EBADF: another fd;
// EINVAL: out of range.
//
//	buf_ptr (24 bytes)
//	[ filetype u8 = 0 | pad | flags u16 = 0 | pad | rights_base u64le = 64 | rights_inheriting u64le = 0 ]
func fdFdstatGet(vm *VM, mod api.Module, stack []uint64) {
	fd := uint32(stack[0])
	if vm.tracing {
		vm.wtrace("==> fd_fdstat_get(fd=%d)", fd)
	}
	if fd != 1 && fd != 2 {
		errno(vm, stack, errnoBadf)
		return
	}
	var st [24]byte
	binary.LittleEndian.PutUint64(st[8:], 64)
	if !mod.Memory().Write(uint32(stack[1]), st[:]) {
		errno(vm, stack, errnoInval)
		return
	}
	errno(vm, stack, errnoSuccess)
}

// schedYield is sched_yield() → errno: 0.
func schedYield(vm *VM, _ api.Module, stack []uint64) {
	vm.wtrace("==> sched_yield()")
	stack[0] = errnoSuccess
	vm.wtrace("<== errno=0")
}

// Stubs: they touch no memory and answer a fixed errno.

// fdRead is fd_read(fd, iovs_ptr, iovs_len, nread_ptr) → ENOSYS.
func fdRead(vm *VM, _ api.Module, stack []uint64) { stub(vm, stack, "fd_read", errnoNosys) }

// fdPrestatDirName is fd_prestat_dir_name(fd, path_ptr, path_len) → ENOSYS.
func fdPrestatDirName(vm *VM, _ api.Module, stack []uint64) {
	stub(vm, stack, "fd_prestat_dir_name", errnoNosys)
}

// fdFdstatSetFlags is fd_fdstat_set_flags(fd, flags) → ENOSYS.
func fdFdstatSetFlags(vm *VM, _ api.Module, stack []uint64) {
	stub(vm, stack, "fd_fdstat_set_flags", errnoNosys)
}

// fdPrestatGet is fd_prestat_get(fd, prestat_ptr) → EBADF: no preopened
// directory.
func fdPrestatGet(vm *VM, _ api.Module, stack []uint64) { stub(vm, stack, "fd_prestat_get", errnoBadf) }

// pathOpen is path_open(fd, dirflags, path_ptr, path_len, oflags, i64
// rights_base, i64 rights_inheriting, fdflags, fd_ptr) → ENOENT.
func pathOpen(vm *VM, _ api.Module, stack []uint64) { stub(vm, stack, "path_open", errnoNoent) }

// fdSeek is fd_seek(fd, i64 offset, whence, newoffset_ptr) → 0, nothing
// written.
func fdSeek(vm *VM, _ api.Module, stack []uint64) { stub(vm, stack, "fd_seek", errnoSuccess) }

// fdClose is fd_close(fd) → 0.
func fdClose(vm *VM, _ api.Module, stack []uint64) { stub(vm, stack, "fd_close", errnoSuccess) }

// stub traces the WASI function name and answers e.
func stub(vm *VM, stack []uint64, name string, e uint32) {
	if vm.tracing {
		vm.wtrace("==> %s(...)", name)
	}
	errno(vm, stack, e)
}

// procExit is proc_exit(code): no result; logs "proc_exit(code)" at info
// and returns (the guest goes on).
func procExit(vm *VM, _ api.Module, stack []uint64) {
	if vm.tracing {
		vm.wtrace("==> proc_exit(code=%d)", uint32(stack[0]))
	}
	vm.h.addLog(hostcalls.LogLevelInfo, vm.index, fmt.Sprintf("proc_exit(%d)", uint32(stack[0])))
}

// pollOneoff is poll_oneoff(in_ptr, out_ptr, nsubscriptions, nevents_ptr)
// → errno as the Host's profile has it: pollOneoffNosys with
// ProfileCppHostC4d7bb0, pollOneoffFixed with ProfileCppHost94091cd
// (ProfileCppHostPreC4d7bb0 has no poll_oneoff: a module importing it
// does not load).
func pollOneoff(vm *VM, mod api.Module, stack []uint64) {
	if vm.h.opts.Profile == ProfileCppHostC4d7bb0 {
		pollOneoffNosys(vm, mod, stack)
		return
	}
	pollOneoffFixed(vm, mod, stack)
}

// pollOneoffNosys is poll_oneoff of Envoy 1.32.13–1.38
// (ProfileCppHostC4d7bb0, src/exports.cc at c4d7bb0): ENOSYS
// (52), nothing written — Go's runtime then throws "poll_oneoff failed".
func pollOneoffNosys(vm *VM, _ api.Module, stack []uint64) {
	if vm.tracing {
		vm.wtrace("==> poll_oneoff(nsubscriptions=%d)", uint32(stack[2]))
	}
	errno(vm, stack, errnoNosys)
}

// pollOneoffFixed is poll_oneoff of Envoy ≥ 1.39 (ProfileCppHost94091cd): no event,
// at once. 0; EINVAL: out of range.
//
//	nevents_ptr
//	[ 0 u32le ]
func pollOneoffFixed(vm *VM, mod api.Module, stack []uint64) {
	if vm.tracing {
		vm.wtrace("==> poll_oneoff(nsubscriptions=%d)", uint32(stack[2]))
	}
	if !writeU32(mod, uint32(stack[3]), 0) {
		errno(vm, stack, errnoInval)
		return
	}
	errno(vm, stack, errnoSuccess)
}

// writeFd gathers the iovecs and logs complete lines: fd 1 at info, fd 2
// at error (a partial line waits for the rest). 0; EBADF: another fd;
// EINVAL: out of range.
//
//	iovs_ptr                                  nwritten_ptr
//	[ buf0 u32le | len0 u32le | buf1 | len1 ]  [ n u32le ]
//	   +--> [ b y t e s ] (len0)
func writeFd(vm *VM, mod api.Module, stack []uint64, nwrittenPtr uint32) {
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
