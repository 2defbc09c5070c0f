package wasmlink_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
	"github.com/fairshare-wasm/fairshare/internal/wasmlink"
)

// hostWASI is, written out again here rather than read from
// wasmlink.HostWASI, the wasi_snapshot_preview1 functions every
// proxy-wasm-cpp-host has exported (before c4d7bb0, December 2024).
var hostWASI = []string{
	"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get",
	"environ_get", "environ_sizes_get", "args_get", "args_sizes_get",
	"clock_time_get", "random_get", "proc_exit", "path_open",
	"fd_prestat_get", "fd_prestat_dir_name",
}

// TestPluginImports reads the import section of plugin.wasm as it ships
// (under make test the module make build wrote, named by FAIRSHARE_WASM;
// otherwise built from the tree through the step) and fails on any
// function import other than env.* and the WASI functions every
// proxy-wasm-cpp-host exports.
func TestPluginImports(t *testing.T) {
	got := imports(t, wasmbuild.Plugin(t))
	var wasiImports int
	for _, imp := range got {
		mod, name, _ := strings.Cut(imp, ".")
		switch {
		case mod == "env":
		case mod == wasi && slices.Contains(hostWASI, name):
			wasiImports++
		default:
			t.Errorf("plugin.wasm imports %s, which not every proxy-wasm host exports", imp)
		}
	}
	if wasiImports == 0 || len(got) == wasiImports {
		t.Errorf("imports %q: want both WASI and env imports (is this plugin.wasm?)", got)
	}
	if !slices.Equal(wasmlink.HostWASI, hostWASI) {
		t.Errorf("wasmlink.HostWASI = %q, want %q", wasmlink.HostWASI, hostWASI)
	}
}

// TestPluginTransform: the linker's plugin.wasm imports the three WASI
// functions older hosts lack and fd_fdstat_get, which its _initialize
// calls where older hosts forbid it; the step removes exactly those, keeps every
// export and the order of the other imports, gives the same bytes each
// time, and is what wasmbuild hands the tests.
func TestPluginTransform(t *testing.T) {
	raw := wasmbuild.Raw(t, wasmbuild.PluginPackage)
	out := mustTransform(t, raw)
	replaced := []string{wasi + ".fd_fdstat_get", wasi + ".fd_fdstat_set_flags", wasi + ".poll_oneoff", wasi + ".sched_yield"}
	before, after := imports(t, raw), imports(t, out)
	var removed []string
	for _, imp := range before {
		if !slices.Contains(after, imp) {
			removed = append(removed, imp)
		}
	}
	slices.Sort(removed)
	if !slices.Equal(removed, replaced) {
		t.Errorf("the step removed %q, want %q", removed, replaced)
	}
	kept := slices.DeleteFunc(slices.Clone(before), func(s string) bool { return slices.Contains(replaced, s) })
	if !slices.Equal(after, kept) {
		t.Errorf("imports after the step %q, want the others in order %q", after, kept)
	}
	sameExports(t, raw, out)
	if again := mustTransform(t, raw); !bytes.Equal(again, out) {
		t.Error("two transforms of plugin.wasm differ")
	}
	if !bytes.Equal(wasmbuild.Module(t, wasmbuild.PluginPackage), out) {
		t.Error("wasmbuild.Module(plugin) is not the transform of wasmbuild.Raw(plugin)")
	}
	t.Logf("plugin.wasm: %d bytes before the step, %d after", len(raw), len(out))
}
