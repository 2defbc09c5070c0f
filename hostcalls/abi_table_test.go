package hostcalls_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

type sig struct{ params, results []api.ValueType }

func i32s(n int) []api.ValueType { return slices.Repeat([]api.ValueType{i32}, n) }

// hostFunctions are the env imports Envoy (cpp-host) registers
// for ABI v0.2.1 that hostcalls may use, with their exact signatures
// (cpp-host src/exports.cc, src/wasm.cc registerCallbacks).
var hostFunctions = map[string]sig{
	hostcalls.ProxyLog:                   {i32s(3), i32s(1)},
	hostcalls.ProxyGetLogLevel:           {i32s(1), i32s(1)},
	hostcalls.ProxySetTickPeriod:         {i32s(1), i32s(1)},
	hostcalls.ProxyGetBufferBytes:        {i32s(5), i32s(1)},
	hostcalls.ProxyGetBufferStatus:       {i32s(3), i32s(1)},
	hostcalls.ProxySetBufferBytes:        {i32s(5), i32s(1)},
	hostcalls.ProxyGetHeaderMapPairs:     {i32s(3), i32s(1)},
	hostcalls.ProxySetHeaderMapPairs:     {i32s(3), i32s(1)},
	hostcalls.ProxyGetHeaderMapSize:      {i32s(2), i32s(1)},
	hostcalls.ProxyGetHeaderMapValue:     {i32s(5), i32s(1)},
	hostcalls.ProxyAddHeaderMapValue:     {i32s(5), i32s(1)},
	hostcalls.ProxyReplaceHeaderMapValue: {i32s(5), i32s(1)},
	hostcalls.ProxyRemoveHeaderMapValue:  {i32s(3), i32s(1)},
	hostcalls.ProxyContinueStream:        {i32s(1), i32s(1)},
	hostcalls.ProxyCloseStream:           {i32s(1), i32s(1)},
	hostcalls.ProxySendLocalResponse:     {i32s(8), i32s(1)},
	hostcalls.ProxyHTTPCall:              {i32s(10), i32s(1)},
	hostcalls.ProxyGetStatus:             {i32s(3), i32s(1)},
	hostcalls.ProxySetSharedData:         {i32s(5), i32s(1)},
	hostcalls.ProxyGetSharedData:         {i32s(5), i32s(1)},
	hostcalls.ProxyRegisterSharedQueue:   {i32s(3), i32s(1)},
	hostcalls.ProxyResolveSharedQueue:    {i32s(5), i32s(1)},
	hostcalls.ProxyEnqueueSharedQueue:    {i32s(3), i32s(1)},
	hostcalls.ProxyDequeueSharedQueue:    {i32s(3), i32s(1)},
	hostcalls.ProxyDefineMetric:          {i32s(4), i32s(1)},
	hostcalls.ProxyIncrementMetric:       {[]api.ValueType{i32, i64}, i32s(1)},
	hostcalls.ProxyRecordMetric:          {[]api.ValueType{i32, i64}, i32s(1)},
	hostcalls.ProxyGetMetric:             {i32s(2), i32s(1)},
	hostcalls.ProxyGetProperty:           {i32s(4), i32s(1)},
	hostcalls.ProxySetProperty:           {i32s(4), i32s(1)},
	hostcalls.ProxySetEffectiveContext:   {i32s(1), i32s(1)},
	hostcalls.ProxyDone:                  {nil, i32s(1)},
}

// callbacks are the exports cpp-host looks up (src/wasm.cc getFunctions),
// with the signatures V8 checks ("Bad function signature for: ...").
var callbacks = map[string]sig{
	hostcalls.ABIVersionExport:       {nil, nil},
	hostcalls.ExportInitialize:       {nil, nil},
	hostcalls.ExportMemoryAllocate:   {i32s(1), i32s(1)},
	hostcalls.ExportMalloc:           {i32s(1), i32s(1)}, // cpp-host prefers it; WAMR needs it and free
	hostcalls.ExportFree:             {i32s(1), nil},
	hostcalls.ExportContextCreate:    {i32s(2), nil},
	hostcalls.ExportVMStart:          {i32s(2), i32s(1)},
	hostcalls.ExportConfigure:        {i32s(2), i32s(1)},
	hostcalls.ExportTick:             {i32s(1), nil},
	hostcalls.ExportRequestHeaders:   {i32s(3), i32s(1)},
	hostcalls.ExportRequestBody:      {i32s(3), i32s(1)},
	hostcalls.ExportRequestTrailers:  {i32s(2), i32s(1)},
	hostcalls.ExportResponseHeaders:  {i32s(3), i32s(1)},
	hostcalls.ExportResponseBody:     {i32s(3), i32s(1)},
	hostcalls.ExportResponseTrailers: {i32s(2), i32s(1)},
	hostcalls.ExportHTTPCallResponse: {i32s(5), nil},
	hostcalls.ExportQueueReady:       {i32s(2), nil},
	hostcalls.ExportLog:              {i32s(1), nil},
	hostcalls.ExportDone:             {i32s(1), i32s(1)},
	hostcalls.ExportDelete:           {i32s(1), nil},
}

// envoyWASI are the wasi_snapshot_preview1 functions every Envoy since
// 1.24 provides (implemented or stubbed): FOR_ALL_WASI_FUNCTIONS in
// cpp-host's include/proxy-wasm/exports.h from f383473 (2021) to f199214
// (Envoy 1.32.12). The modules, as the tests build them (through the
// post-link step), may import nothing else; sched_yield, poll_oneoff and
// fd_fdstat_set_flags (cpp-host c4d7bb0, Envoy 1.32.13) are not among
// them.
var envoyWASI = []string{
	"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get", "environ_get",
	"environ_sizes_get", "args_get", "args_sizes_get", "clock_time_get", "random_get",
	"proc_exit", "path_open", "fd_prestat_get", "fd_prestat_dir_name",
}

// modules are the Wasm modules the ABI table is checked against: the
// conformance modules always, plugin.wasm once cmd/plugin has Go files.
func modules(t *testing.T) map[string][]byte {
	t.Helper()
	mods := map[string][]byte{
		"conformance": wasmbuild.Module(t, "./hostcalls/internal/conformance"),
		"basic":       wasmbuild.Module(t, "./hostcalls/internal/conformance/basic"),
	}
	if files, _ := filepath.Glob(filepath.Join("..", "cmd", "plugin", "*.go")); len(files) > 0 {
		mods["plugin"] = wasmbuild.Plugin(t)
	}
	return mods
}

func TestModulesMatchABITable(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	wasi, err := wasi_snapshot_preview1.NewBuilder(r).Compile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wasiDefs := wasi.ExportedFunctions()

	for name, wasm := range modules(t) {
		t.Run(name, func(t *testing.T) {
			t.Logf("%s.wasm: %d bytes", name, len(wasm))
			cm, err := r.CompileModule(ctx, wasm)
			if err != nil {
				t.Fatalf("CompileModule: %v", err)
			}
			defer cm.Close(ctx)
			for _, f := range cm.ImportedFunctions() {
				mod, fn, _ := f.Import()
				got := sig{f.ParamTypes(), f.ResultTypes()}
				switch mod {
				case hostcalls.HostModule:
					want, ok := hostFunctions[fn]
					if !ok {
						t.Errorf("import env.%s is not a host function of ABI v0.2.1", fn)
					} else if !sameSig(got, want) {
						t.Errorf("import env.%s%s, want %s", fn, fmtSig(got), fmtSig(want))
					}
				case wasi_snapshot_preview1.ModuleName:
					if !slices.Contains(envoyWASI, fn) {
						t.Errorf("import %s.%s is not provided by every Envoy since 1.24 (cpp-host before c4d7bb0)", mod, fn)
					}
					if d, ok := wasiDefs[fn]; !ok || !sameSig(got, sig{d.ParamTypes(), d.ResultTypes()}) {
						t.Errorf("import %s.%s%s does not match WASI", mod, fn, fmtSig(got))
					}
				default:
					t.Errorf("import %s.%s: module %q is not provided by Envoy", mod, fn, mod)
				}
			}
			exports := cm.ExportedFunctions()
			for fn, d := range exports {
				got := sig{d.ParamTypes(), d.ResultTypes()}
				want, ok := callbacks[fn]
				switch {
				case !ok && strings.HasPrefix(fn, "proxy_"):
					t.Errorf("export %s is not a callback of ABI v0.2.1", fn)
				case !ok:
					t.Errorf("unexpected export %s%s", fn, fmtSig(got))
				case !sameSig(got, want):
					t.Errorf("export %s%s, want %s", fn, fmtSig(got), fmtSig(want))
				}
			}
			// malloc and free: without both WAMR inserts its heap into
			// the Go heap's first page (exports.go, wamr_heap_test.go).
			for _, fn := range []string{hostcalls.ABIVersionExport, hostcalls.ExportMemoryAllocate, hostcalls.ExportInitialize,
				hostcalls.ExportMalloc, hostcalls.ExportFree} {
				if _, ok := exports[fn]; !ok {
					t.Errorf("export %s missing", fn)
				}
			}
			if _, ok := cm.ExportedMemories()["memory"]; !ok {
				t.Errorf("memory not exported")
			}
		})
	}
}

// TestConformanceImports checks the import lists of the two conformance
// variants: the full one imports every host function of the table (so the
// test host must provide them all), the basic one all of them but the four
// the SDK's proxytest emulator lacks.
func TestConformanceImports(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	envImports := func(wasm []byte) []string {
		cm, err := r.CompileModule(ctx, wasm)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range cm.ImportedFunctions() {
			if mod, fn, _ := f.Import(); mod == hostcalls.HostModule {
				names = append(names, fn)
			}
		}
		slices.Sort(names)
		return names
	}
	var all []string
	for fn := range hostFunctions {
		all = append(all, fn)
	}
	slices.Sort(all)
	if got := envImports(wasmbuild.Module(t, "./hostcalls/internal/conformance")); !slices.Equal(got, all) {
		t.Errorf("conformance imports %v,\nwant every host function %v", got, all)
	}
	lacking := []string{hostcalls.ProxyGetLogLevel, hostcalls.ProxyGetBufferStatus, hostcalls.ProxyGetHeaderMapSize, hostcalls.ProxyGetStatus}
	basic := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return slices.Contains(lacking, s) })
	if got := envImports(wasmbuild.Module(t, "./hostcalls/internal/conformance/basic")); !slices.Equal(got, basic) {
		t.Errorf("basic imports %v,\nwant %v", got, basic)
	}
}

func sameSig(a, b sig) bool {
	return slices.Equal(a.params, b.params) && slices.Equal(a.results, b.results)
}

func fmtSig(s sig) string {
	names := func(ts []api.ValueType) string {
		var out []string
		for _, t := range ts {
			out = append(out, api.ValueTypeName(t))
		}
		return strings.Join(out, ",")
	}
	return "(" + names(s.params) + ") -> (" + names(s.results) + ")"
}
