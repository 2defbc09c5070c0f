package host

import (
	"fmt"
	"slices"
)

// Profile selects which proxy-wasm-cpp-host (and so which Envoy releases)
// the host emulates where the shipped hosts differ. What differs, read in
// proxy-wasm/proxy-wasm-cpp-host at the pinned commits (Envoy's pins are
// bazel/repository_locations.bzl, key proxy_wasm_cpp_host):
//
//   - the WASI functions exported (include/proxy-wasm/exports.h,
//     FOR_ALL_WASI_FUNCTIONS): a module importing another one fails to
//     load with "Failed to load Wasm module due to a missing import:
//     <module>.<name>" (src/v8/v8.cc, src/wamr/wamr.cc,
//     src/wasmtime/wasmtime.cc at f199214, c4d7bb0 and 94091cd alike);
//   - poll_oneoff's answer (src/exports.cc);
//   - the host functions V8 lets a guest call during _initialize
//     (src/wasm.cc WasmBase::startVm) and during proxy_on_memory_allocate
//     (include/proxy-wasm/wasm.h WasmBase::allocMemory); a call outside the
//     list traps. Only the V8 engine (Envoy's default) enforces them
//     (src/v8/v8.cc isHostFunctionAllowed); the host does as V8 does.
//
// What does not differ: the env (proxy_*) functions. FOR_ALL_HOST_FUNCTIONS
// and FOR_ALL_HOST_FUNCTIONS_ABI_SPECIFIC in include/proxy-wasm/exports.h
// are identical at b0a0594, f199214, c4d7bb0 and 94091cd, every one of
// them exists since 2020 (6bb50d0, 56204b1, a6b0f83, d1e7040), and `git
// diff b0a0594 94091cd -- src/exports.cc` removes no line and adds only
// WASI functions;
// the one change in src/context.cc (allow_on_headers_stop_iteration_,
// default false: StopIteration from a headers callback is still turned
// into StopAllIterationAndWatermark) is not visible to a 0.2.x module.
// So the env functions answer the same under every profile.
//
// The zero value is ProfileCppHost94091cd, the newest.
type Profile int

const (
	// ProfileCppHost94091cd is cpp-host 94091cd (2026-04-06, "add all wasi
	// hostcalls used by Go SDK (#533)") and later: Envoy ≥ 1.39.0 (pin
	// 09e5f8d, then f2db56a; 94091cd is an ancestor of both). The 15 WASI
	// functions of ProfileCppHostPreC4d7bb0, the 3 of
	// ProfileCppHostC4d7bb0 and ~25 more stubs, of which the host provides
	// clock_res_get and fd_pwrite. poll_oneoff answers success with
	// nevents=0 and is allowed during allocation and _initialize; the
	// _initialize list (src/wasm.cc startVm at 94091cd) adds poll_oneoff,
	// clock_res_get, fd_fdstat_get, fd_fdstat_set_flags and every WASI stub
	// to the c4d7bb0 one.
	ProfileCppHost94091cd Profile = iota
	// ProfileCppHostC4d7bb0 is cpp-host c4d7bb0 (2024-12-19, "feat(go-sdk):
	// add wasi hostcalls used by the Go SDK (#427)") up to beb8a4e: Envoy
	// 1.32.13 (its bump, envoy-openssl 7441c532fe) to 1.38.x (c4d7bb0 in
	// 1.33–1.34, 65bb78f in 1.35–1.36, c8868da in 1.37, beb8a4e in 1.38;
	// src/exports.cc unchanged for these three between them). 18 WASI
	// functions: the 15 and fd_fdstat_set_flags (ENOSYS), sched_yield (0),
	// poll_oneoff (ENOSYS, nothing written: Go's runtime then throws
	// "poll_oneoff failed" at a garbage collection). During allocation
	// only proxy_log, fd_write and clock_time_get; during _initialize the
	// older list plus fd_fdstat_get and fd_fdstat_set_flags (src/wasm.cc
	// startVm at c4d7bb0; c8868da, Envoy 1.37–1.38, also allows
	// env.emscripten_notify_memory_growth, 14fa83a: the profile keeps the
	// stricter list of 1.32.13–1.36).
	ProfileCppHostC4d7bb0
	// ProfileCppHostPreC4d7bb0 is cpp-host before c4d7bb0, from f383473
	// (2021-11-18, "wasi: export stubs for preopened files and
	// directories. (#201)") to f199214: Envoy 1.24.0 (b0a0594) to 1.32.12
	// (f199214). The 15 WASI functions fd_write, fd_read, fd_seek,
	// fd_close, fd_fdstat_get, environ_get, environ_sizes_get, args_get,
	// args_sizes_get, clock_time_get, random_get, proc_exit, path_open,
	// fd_prestat_get, fd_prestat_dir_name (exports.h at f199214): a module
	// importing sched_yield, poll_oneoff or fd_fdstat_set_flags fails to
	// load. Every pin of that range is the same for a module: exports.h's
	// lists, src/exports.cc and startVm's list are identical at b0a0594
	// (Envoy 1.24.0) and f199214. During allocation only proxy_log,
	// fd_write and clock_time_get; during _initialize only proxy_log,
	// fd_write, args_*, environ_*, fd_prestat_get, fd_prestat_dir_name,
	// clock_time_get and random_get (src/wasm.cc startVm at f199214): no
	// fd_fdstat_get, which Go's syscall init calls (internal/wasmlink
	// gives plugin.wasm its own).
	ProfileCppHostPreC4d7bb0
)

// Profiles lists every Profile, newest first.
var Profiles = []Profile{ProfileCppHost94091cd, ProfileCppHostC4d7bb0, ProfileCppHostPreC4d7bb0}

// String returns "cpp-host-94091cd", "cpp-host-c4d7bb0" or
// "cpp-host-pre-c4d7bb0" (what ParseProfile reads).
func (p Profile) String() string {
	switch p {
	case ProfileCppHost94091cd:
		return "cpp-host-94091cd"
	case ProfileCppHostC4d7bb0:
		return "cpp-host-c4d7bb0"
	case ProfileCppHostPreC4d7bb0:
		return "cpp-host-pre-c4d7bb0"
	}
	return fmt.Sprintf("Profile(%d)", int(p))
}

// Envoy returns the Envoy releases that ship the profile's cpp-host.
func (p Profile) Envoy() string {
	switch p {
	case ProfileCppHost94091cd:
		return "Envoy ≥ 1.39.0"
	case ProfileCppHostC4d7bb0:
		return "Envoy 1.32.13–1.38"
	case ProfileCppHostPreC4d7bb0:
		return "Envoy 1.24.0–1.32.12"
	}
	return "unknown"
}

// ParseProfile returns the Profile whose String is s; "" is the zero
// value.
func ParseProfile(s string) (Profile, error) {
	if s == "" {
		return ProfileCppHost94091cd, nil
	}
	for _, p := range Profiles {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("host: unknown profile %q (want one of %v)", s, Profiles)
}

// wasiPreC4d7bb0 are the 15 WASI functions every cpp-host has exported
// since f383473 (exports.h FOR_ALL_WASI_FUNCTIONS at f199214).
var wasiPreC4d7bb0 = [...]string{
	"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get", "environ_get",
	"environ_sizes_get", "args_get", "args_sizes_get", "clock_time_get", "random_get",
	"proc_exit", "path_open", "fd_prestat_get", "fd_prestat_dir_name",
}

// wasiC4d7bb0Adds are the WASI functions c4d7bb0 adds.
var wasiC4d7bb0Adds = [...]string{"fd_fdstat_set_flags", "sched_yield", "poll_oneoff"}

// wasiProvides reports whether profile p provides the WASI function name.
func wasiProvides(p Profile, name string) bool {
	if _, ok := lookup(wasiFunctions[:], name); !ok {
		return false
	}
	switch p {
	case ProfileCppHostPreC4d7bb0:
		return slices.Contains(wasiPreC4d7bb0[:], name)
	case ProfileCppHostC4d7bb0:
		return slices.Contains(wasiPreC4d7bb0[:], name) || slices.Contains(wasiC4d7bb0Adds[:], name)
	}
	return true
}

// allowedDuringAlloc reports whether V8 under profile p lets a guest call
// name during proxy_on_memory_allocate (wasm.h allocMemory): proxy_log,
// fd_write and clock_time_get; poll_oneoff too from 94091cd.
func allowedDuringAlloc(p Profile, name string) bool {
	switch name {
	case "proxy_log", "fd_write", "clock_time_get":
		return true
	case "poll_oneoff":
		return p == ProfileCppHost94091cd
	}
	return false
}

// startAllowedPre is the _initialize list of src/wasm.cc startVm at
// f199214 (module names dropped: every WASI name is allowed under both).
var startAllowedPre = [...]string{
	"proxy_log", "fd_write", "args_sizes_get", "args_get", "environ_sizes_get", "environ_get",
	"fd_prestat_get", "fd_prestat_dir_name", "clock_time_get", "random_get",
}

// allowedDuringStart reports whether V8 under profile p lets a guest call
// name during _initialize (src/wasm.cc WasmBase::startVm): the list of
// f199214; c4d7bb0 adds fd_fdstat_get and fd_fdstat_set_flags; c8868da
// emscripten_notify_memory_growth (kept for ProfileCppHost94091cd only);
// 94091cd poll_oneoff, clock_res_get and every WASI stub (of the host's:
// fd_pwrite). proxy_get_log_level, sched_yield and proc_exit are in no
// list.
func allowedDuringStart(p Profile, name string) bool {
	if slices.Contains(startAllowedPre[:], name) {
		return true
	}
	switch name {
	case "fd_fdstat_get", "fd_fdstat_set_flags":
		return p != ProfileCppHostPreC4d7bb0
	case "poll_oneoff", "clock_res_get", "fd_pwrite", "emscripten_notify_memory_growth":
		return p == ProfileCppHost94091cd
	}
	return false
}
