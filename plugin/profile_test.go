package plugin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// TestWasmLoadsUnderEveryProfile: plugin.wasm as the Go linker wrote it
// (wasmbuild.Raw) does not load on the cpp-host of Envoy ≤ 1.32.12
// (host.ProfileCppHostPreC4d7bb0), which lacks three of its WASI imports,
// and fails with cpp-host's message; the module as it ships (through the
// post-link step) starts under every profile.
func TestWasmLoadsUnderEveryProfile(t *testing.T) {
	raw, err := host.Compile(context.Background(), wasmbuild.Raw(t, wasmbuild.PluginPackage))
	if err != nil {
		t.Fatalf("compile the linker's plugin.wasm: %v", err)
	}
	t.Cleanup(func() { raw.Close(context.Background()) })
	opts := func(p host.Profile) host.Options {
		return host.Options{Profile: p, PluginName: pluginName, VMID: t.Name() + "-" + p.String(), PluginConfig: []byte(testConfig)}
	}
	_, err = raw.Start(context.Background(), opts(host.ProfileCppHostPreC4d7bb0))
	const missing = "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1."
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("the linker's module under %s: Start = %v, want %q", host.ProfileCppHostPreC4d7bb0, err, missing+"…")
	} else {
		t.Logf("the linker's module under %s: %v", host.ProfileCppHostPreC4d7bb0, err)
	}
	for _, p := range host.Profiles {
		h, err := compiled(t).Start(context.Background(), opts(p))
		if err != nil {
			t.Errorf("plugin.wasm under %s (%s): Start = %v", p, p.Envoy(), err)
			continue
		}
		h.Close(context.Background())
	}
}
