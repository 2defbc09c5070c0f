package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// TestLegacyWASIKillsGoOnGC: a Go module as the linker wrote it, that
// only runs runtime.GC() in a callback, under each host profile:
// ProfileCppHostC4d7bb0 (Envoy 1.32.13–1.38, poll_oneoff → ENOSYS) kills
// it with "fatal error: poll_oneoff failed" within a few collections;
// ProfileCppHost94091cd (Envoy ≥ 1.39) lets it live;
// ProfileCppHostPreC4d7bb0 (Envoy ≤ 1.32.12) does not load it, for its
// imports of poll_oneoff, sched_yield and fd_fdstat_set_flags. Built
// through the post-link step (internal/wasmlink), which gives the module
// its own poll_oneoff, it loads and survives under every profile.
func TestLegacyWASIKillsGoOnGC(t *testing.T) {
	const calls = 30
	legacy, err := rawModule(t, gcModulePkg).Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: ProfileCppHostC4d7bb0})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() { legacy.Close(context.Background()) })
	died := 0
	for i := 1; i <= calls; i++ {
		if _, err := legacy.Call(0, "gc"); err != nil {
			died = i
			break
		}
	}
	if died == 0 {
		t.Fatalf("%s: the module survived %d GCs", ProfileCppHostC4d7bb0, calls)
	}
	if got := strings.Join(messages(legacy, 0), "\n"); !strings.Contains(got, "poll_oneoff failed") {
		t.Errorf("%s: log = %q, want the runtime's poll_oneoff failure", ProfileCppHostC4d7bb0, got)
	}
	if legacy.VMs()[0].Failed() == nil {
		t.Errorf("%s: the VM is not marked failed", ProfileCppHostC4d7bb0)
	}
	t.Logf("%s: died on GC %d", ProfileCppHostC4d7bb0, died)

	fixed, err := rawModule(t, gcModulePkg).Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: ProfileCppHost94091cd})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() { fixed.Close(context.Background()) })
	for i := 1; i <= calls; i++ {
		if _, err := fixed.Call(0, "gc"); err != nil {
			t.Fatalf("%s: GC %d: %v", ProfileCppHost94091cd, i, err)
		}
	}

	_, err = rawModule(t, gcModulePkg).Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: ProfileCppHostPreC4d7bb0})
	const missing = "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1."
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("%s: Start = %v, want %q", ProfileCppHostPreC4d7bb0, err, missing+"…")
	}

	for _, p := range Profiles {
		linked := start(t, gcModulePkg, Options{Profile: p})
		for i := 1; i <= calls; i++ {
			if _, err := linked.Call(0, "gc"); err != nil {
				t.Fatalf("%s, module through the post-link step: GC %d: %v", p, i, err)
			}
		}
		if err := linked.VMs()[0].Failed(); err != nil {
			t.Errorf("%s, module through the post-link step: the VM failed: %v", p, err)
		}
	}
}

// TestProfileImports: each profile accepts exactly the WASI imports of its
// cpp-host (include/proxy-wasm/exports.h FOR_ALL_WASI_FUNCTIONS at
// f199214, c4d7bb0, 94091cd) and refuses any other with cpp-host's
// message; the env functions are the same under every profile.
func TestProfileImports(t *testing.T) {
	for _, tc := range []struct {
		profile Profile
		want    int // how many of wasiFunctions it provides
		lacks   []string
	}{
		{ProfileCppHostPreC4d7bb0, 15, []string{"sched_yield", "poll_oneoff", "fd_fdstat_set_flags", "clock_res_get", "fd_pwrite"}},
		{ProfileCppHostC4d7bb0, 18, []string{"clock_res_get", "fd_pwrite"}},
		{ProfileCppHost94091cd, len(wasiFunctions), nil},
	} {
		t.Run(tc.profile.String(), func(t *testing.T) {
			n := 0
			for _, f := range wasiFunctions {
				if wasiProvides(tc.profile, f.name) {
					n++
				}
			}
			equal(t, "WASI functions provided", n, tc.want)
			for _, name := range tc.lacks {
				m, err := Compile(t.Context(), assemble([]asmImport{wasiImport(name)}, -1))
				if err != nil {
					t.Fatal(err)
				}
				_, err = m.Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: tc.profile})
				want := "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1." + name
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("import %s: Start = %v, want %q", name, err, want)
				}
				m.Close(t.Context())
			}
			var env []asmImport
			for _, f := range envFunctions {
				env = append(env, envImport(f.name))
			}
			m, err := Compile(t.Context(), assemble(env, -1))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: tc.profile}); err != nil {
				t.Errorf("importing every env function: Start = %v", err)
			}
			m.Close(t.Context())
		})
	}
	for _, p := range Profiles {
		if q, err := ParseProfile(p.String()); err != nil || q != p {
			t.Errorf("ParseProfile(%q) = %v, %v", p, q, err)
		}
	}
	if _, err := ParseProfile("envoy-1.20"); err == nil {
		t.Error("ParseProfile(envoy-1.20): no error")
	}
}

// TestProfileStartRestrictions: during _initialize V8 lets a guest call
// only the host functions of startVm's list (src/wasm.cc), which grows
// with each cpp-host: fd_fdstat_get from c4d7bb0, poll_oneoff from
// 94091cd; proxy_get_log_level and sched_yield under none.
func TestProfileStartRestrictions(t *testing.T) {
	for _, tc := range []struct {
		name string
		pre  bool // allowed under ProfileCppHostPreC4d7bb0
		c4d  bool // ProfileCppHostC4d7bb0
		new  bool // ProfileCppHost94091cd
	}{
		{"fd_write", true, true, true},
		{"random_get", true, true, true},
		{"fd_fdstat_get", false, true, true},
		{"fd_fdstat_set_flags", false, true, true},
		{"poll_oneoff", false, false, true},
		{"clock_res_get", false, false, true},
		{"sched_yield", false, false, false},
		{"proc_exit", false, false, false},
		{hostcalls.ProxyGetLogLevel, false, false, false},
	} {
		for p, want := range map[Profile]bool{ProfileCppHostPreC4d7bb0: tc.pre, ProfileCppHostC4d7bb0: tc.c4d, ProfileCppHost94091cd: tc.new} {
			if got := allowedDuringStart(p, tc.name); got != want {
				t.Errorf("%s: %s allowed during _initialize = %v, want %v", p, tc.name, got, want)
			}
		}
	}
	// A module whose _initialize calls fd_fdstat_get, as Go's syscall
	// package init does: it traps under ProfileCppHostPreC4d7bb0 (as on
	// Envoy ≤ 1.32.12 with V8) and starts under the newer ones.
	for _, p := range Profiles {
		m, err := Compile(t.Context(), assembleInit([]asmImport{wasiImport("fd_fdstat_get")}, -1, 0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: p})
		const trap = "restricted_callback: fd_fdstat_get is not allowed during _initialize"
		if p == ProfileCppHostPreC4d7bb0 {
			if err == nil || !strings.Contains(err.Error(), trap) {
				t.Errorf("%s: Start = %v, want %q", p, err, trap)
			}
		} else if err != nil {
			t.Errorf("%s: Start = %v", p, err)
		}
		m.Close(t.Context())
	}
}

// TestGuestTimeIsHostClock: a Go guest's time.Now reads the host's
// VirtualClock through WASI clock_time_get.
func TestGuestTimeIsHostClock(t *testing.T) {
	clock := NewVirtualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	h := start(t, rawGuestPkg, Options{Clock: clock})
	for _, d := range []time.Duration{0, 90 * time.Minute} {
		clock.Advance(d)
		res, err := h.Call(0, "now_unix_ms")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "guest time.Now", int64(res[0]), clock.Now().UnixMilli())
	}
}
