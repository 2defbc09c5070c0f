package host

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLegacyWASIKillsGoOnGC: under the WASI of Envoy 1.33–1.38
// (poll_oneoff → ENOSYS) a Go module as the linker wrote it, that only runs
// runtime.GC() in a callback, dies with "fatal error: poll_oneoff failed"
// within a few collections; under the fixed WASI (Envoy ≥ 1.39) it
// survives. Built through the post-link step (internal/wasmlink), which
// gives the module its own poll_oneoff, it survives the legacy WASI too.
func TestLegacyWASIKillsGoOnGC(t *testing.T) {
	const calls = 30
	legacy, err := rawModule(t, gcModulePkg).Start(t.Context(), Options{VMID: uniqueVMID(t), WASI: WASILegacy})
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
		t.Fatalf("legacy WASI: the module survived %d GCs", calls)
	}
	if got := strings.Join(messages(legacy, 0), "\n"); !strings.Contains(got, "poll_oneoff failed") {
		t.Errorf("legacy WASI: log = %q, want the runtime's poll_oneoff failure", got)
	}
	if legacy.VMs()[0].Failed() == nil {
		t.Error("legacy WASI: the VM is not marked failed")
	}
	t.Logf("legacy WASI: died on GC %d", died)

	fixed, err := rawModule(t, gcModulePkg).Start(t.Context(), Options{VMID: uniqueVMID(t), WASI: WASIFixed})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() { fixed.Close(context.Background()) })
	for i := 1; i <= calls; i++ {
		if _, err := fixed.Call(0, "gc"); err != nil {
			t.Fatalf("fixed WASI: GC %d: %v", i, err)
		}
	}

	linked := start(t, gcModulePkg, Options{WASI: WASILegacy})
	for i := 1; i <= calls; i++ {
		if _, err := linked.Call(0, "gc"); err != nil {
			t.Fatalf("legacy WASI, module through the post-link step: GC %d: %v", i, err)
		}
	}
	if err := linked.VMs()[0].Failed(); err != nil {
		t.Errorf("legacy WASI, module through the post-link step: the VM failed: %v", err)
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
