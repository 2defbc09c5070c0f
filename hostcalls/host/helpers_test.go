package host

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// Test modules, built once per test binary (wasmbuild fails the test if
// the go tool cannot build them).
const (
	rawGuestPkg    = "./hostcalls/host/testdata/rawguest"
	gcModulePkg    = "./hostcalls/host/testdata/gcmodule"
	passthroughPkg = "./hostcalls/host/testdata/passthrough"
)

var (
	modMu    sync.Mutex
	compiled = map[string]*Module{}
	vmIDSeq  atomic.Int64
)

// module compiles the test module pkg once per test binary.
func module(tb testing.TB, pkg string) *Module {
	tb.Helper()
	wasm := wasmbuild.Module(tb, pkg)
	modMu.Lock()
	defer modMu.Unlock()
	if m := compiled[pkg]; m != nil {
		return m
	}
	m, err := Compile(context.Background(), wasm)
	if err != nil {
		tb.Fatalf("Compile(%s) = %v", pkg, err)
	}
	compiled[pkg] = m
	return m
}

// rawModule compiles the test module pkg as the Go linker wrote it, before
// the post-link step (internal/wasmlink) that module applies, once per test
// binary.
func rawModule(tb testing.TB, pkg string) *Module {
	tb.Helper()
	wasm := wasmbuild.Raw(tb, pkg)
	modMu.Lock()
	defer modMu.Unlock()
	key := "raw " + pkg
	if m := compiled[key]; m != nil {
		return m
	}
	m, err := Compile(context.Background(), wasm)
	if err != nil {
		tb.Fatalf("Compile(raw %s) = %v", pkg, err)
	}
	compiled[key] = m
	return m
}

// uniqueVMID keeps tests' shared-data namespaces apart.
func uniqueVMID(tb testing.TB) string {
	return fmt.Sprintf("%s-%d", tb.Name(), vmIDSeq.Add(1))
}

// start starts pkg with opts (a unique VMID unless set) and closes the
// Host at the end of the test.
func start(tb testing.TB, pkg string, opts Options) *Host {
	tb.Helper()
	if opts.VMID == "" {
		opts.VMID = uniqueVMID(tb)
	}
	h, err := module(tb, pkg).Start(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Start = %v", err)
	}
	tb.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// messages returns the log messages of VM vm (all VMs if vm < -1) that
// start with one of the prefixes (all if none).
func messages(h *Host, vm int, prefixes ...string) []string {
	var out []string
	for _, e := range h.Logs() {
		if vm >= -1 && e.VM != vm {
			continue
		}
		keep := len(prefixes) == 0
		for _, p := range prefixes {
			if strings.HasPrefix(e.Message, p) {
				keep = true
			}
		}
		if keep {
			out = append(out, e.Message)
		}
	}
	return out
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s =\n\t%#v\nwant\n\t%#v", what, got, want)
	}
}

// grep returns the transcript lines containing any of the substrings.
func grep(lines []string, subs ...string) []string {
	var out []string
	for _, l := range lines {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}
