// Package wasmlink is a post-link step for the Go linker's Wasm output: it
// replaces the wasi_snapshot_preview1 imports that older proxy-wasm hosts
// do not export with functions defined inside the module, so that the
// module instantiates on every proxy-wasm-cpp-host since it first exported
// WASI, and so that poll_oneoff can no longer fail. It also replaces
// fd_fdstat_get, which every host exports but which Go's runtime calls
// during _initialize, where cpp-host before c4d7bb0 does not let V8 call
// it (see replacements).
//
// The step is deterministic (the same input gives the same bytes), keeps
// every export (name, kind, index and code), and changes nothing but the
// import section, the function and code sections (k bodies put first), the
// function indices that refer to imports (calls, ref.func, element
// segments, exports, start, function and local names), and the sizes that
// follow from those. RATIONALE.md ("Why the module carries part of WASI
// itself") says why the module does this itself.
package wasmlink

// WASIModule is the import module name of WASI preview 1.
const WASIModule = "wasi_snapshot_preview1"

// HostWASI lists the wasi_snapshot_preview1 functions proxy-wasm-cpp-host
// exported from its commit f383473 (November 2021, "wasi: export stubs for
// preopened files and directories") until c4d7bb0 (December 2024,
// "feat(go-sdk): add wasi hostcalls used by the Go SDK"), which added
// fd_fdstat_set_flags, sched_yield and poll_oneoff: FOR_ALL_WASI_FUNCTIONS
// in include/proxy-wasm/exports.h at c4d7bb0's parent. c4d7bb0, 94091cd
// and 52a0291 (the newest commit checked) export them too. The step keeps
// these imports, except those it replaces all the same (fd_fdstat_get:
// see replacements).
var HostWASI = []string{
	"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get",
	"environ_get", "environ_sizes_get", "args_get", "args_sizes_get",
	"clock_time_get", "random_get", "proc_exit", "path_open",
	"fd_prestat_get", "fd_prestat_dir_name",
}

// WASI errno values written by the replacements (wasi-libc api.h).
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoNosys   = 52
)

// A replacement is the body of a function defined in the module in place
// of one WASI import: its signature (checked against the import's type)
// and its code (locals and instructions, the final end included).
type replacement struct {
	params  []byte
	results []byte
	body    []byte
}

const (
	i32 = 0x7f
	i64 = 0x7e
)

// replacements are the WASI functions the module defines itself, with the
// semantics of proxy-wasm-cpp-host 94091cd ("add all wasi hostcalls used by
// Go SDK", April 2026), src/exports.cc:
//
//   - poll_oneoff(in, out, nsubscriptions, nevents_ptr): "Since we are not
//     performing event polling, directly set nevents to 0": setWord(
//     nevents_ptr, 0), a 32-bit little-endian store, and 0 (ESUCCESS); if
//     the four bytes at nevents_ptr are not inside memory, 21 (EFAULT) and
//     nothing written (V8::setWord's bounds check in src/v8/v8.cc). The
//     replacement checks the bounds against memory 0's size before it
//     stores, so it answers EFAULT where the host would and never traps.
//     (Between c4d7bb0 and 94091cd cpp-host answered 52, ENOSYS, and
//     Go's runtime throws "poll_oneoff failed" on any error.)
//   - sched_yield(): 0 (ESUCCESS), unchanged since c4d7bb0.
//   - fd_fdstat_set_flags(fd, flags): 52 (ENOSYS), unchanged since
//     c4d7bb0 ("none of these flags have any effect in Proxy-Wasm"). Go's
//     syscall package then leaves stdio blocking and out of its poller.
//   - fd_fdstat_get(fd, stat_ptr): for fds 1 and 2, the 24 bytes at
//     stat_ptr become three little-endian words 0, 64, 0 (filetype 0,
//     flags 0, fs_rights_base FD_WRITE, fs_rights_inheriting 0) and the
//     answer is 0; for any other fd 8 (EBADF) and nothing written. If the
//     24 bytes are not inside memory nothing is written and the answer is
//     still 0 (cpp-host ignores setMemory's failure). Unchanged since
//     56204b1 (2020). Every host exports it, but Go's syscall package init
//     (SetNonblock on fds 0–2) calls it during _initialize, and
//     WasmBase::startVm (src/wasm.cc) lets V8 call it there only from
//     c4d7bb0 on ("Go runtime initialization"): before, on Envoy ≤
//     1.32.12, the host call traps with restricted_callback and the
//     module never starts. Defined in the module, it is no host call.
var replacements = map[string]replacement{
	"poll_oneoff": {
		params:  []byte{i32, i32, i32, i32},
		results: []byte{i32},
		body: []byte{
			0x00,             // no locals
			0x20, 0x03, 0xad, // local.get 3 (nevents_ptr); i64.extend_i32_u
			0x42, 0x04, 0x7c, // i64.const 4; i64.add
			0x3f, 0x00, 0xad, // memory.size 0; i64.extend_i32_u
			0x42, 0x10, 0x86, // i64.const 16; i64.shl (bytes in memory)
			0x56,      // i64.gt_u: the word ends past the memory
			0x04, i32, // if (result i32)
			0x41, errnoFault, // i32.const 21 (EFAULT)
			0x05,       // else
			0x20, 0x03, // local.get 3
			0x41, 0x00, // i32.const 0
			0x36, 0x02, 0x00, // i32.store align=4 offset=0 (nevents = 0)
			0x41, errnoSuccess, // i32.const 0
			0x0b, // end (if)
			0x0b, // end (function)
		},
	},
	"sched_yield": {
		results: []byte{i32},
		body:    []byte{0x00, 0x41, errnoSuccess, 0x0b},
	},
	"fd_fdstat_set_flags": {
		params:  []byte{i32, i32},
		results: []byte{i32},
		body:    []byte{0x00, 0x41, errnoNosys, 0x0b},
	},
	"fd_fdstat_get": {
		params:  []byte{i32, i32},
		results: []byte{i32},
		body: []byte{
			0x00,       // no locals
			0x02, 0x40, // block
			0x20, 0x00, 0x41, 0x01, 0x46, 0x0d, 0x00, // local.get 0 (fd); i32.const 1; i32.eq; br_if 0
			0x20, 0x00, 0x41, 0x02, 0x46, 0x0d, 0x00, // local.get 0; i32.const 2; i32.eq; br_if 0
			0x41, errnoBadf, 0x0f, // i32.const 8 (EBADF); return
			0x0b,             // end (block)
			0x20, 0x01, 0xad, // local.get 1 (stat_ptr); i64.extend_i32_u
			0x42, 0x18, 0x7c, // i64.const 24; i64.add
			0x3f, 0x00, 0xad, // memory.size 0; i64.extend_i32_u
			0x42, 0x10, 0x86, // i64.const 16; i64.shl (bytes in memory)
			0x58,       // i64.le_u: the 24 bytes are inside memory
			0x04, 0x40, // if
			0x20, 0x01, 0x42, 0x00, 0x37, 0x03, 0x00, // local.get 1; i64.const 0; i64.store align=8 offset=0
			0x20, 0x01, 0x42, 0xc0, 0x00, 0x37, 0x03, 0x08, // local.get 1; i64.const 64; i64.store offset=8
			0x20, 0x01, 0x42, 0x00, 0x37, 0x03, 0x10, // local.get 1; i64.const 0; i64.store offset=16
			0x0b,               // end (if)
			0x41, errnoSuccess, // i32.const 0
			0x0b, // end (function)
		},
	},
}
