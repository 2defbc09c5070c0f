package hostcalls_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// compileCache lets the tests of this file compile the conformance module once.
var compileCache = wazero.NewCompilationCache()

// miniHost is the smallest host that runs the conformance module's
// configure steps: plugin configuration, logging, get/set_shared_data, plus
// whatever a test adds in extra; every other env import answers
// UNIMPLEMENTED. It counts poll_oneoff calls, and those made while the
// guest's allocator runs.
type miniHost struct {
	extra        map[string]api.GoModuleFunc
	config       []byte
	shared       map[string][]byte
	logs         []string
	inAlloc      bool
	polls        int
	pollsInAlloc int
	allocs       int
}

// alloc calls the guest allocator the way cpp-host does and copies data in.
func (h *miniHost) alloc(ctx context.Context, m api.Module, data []byte, ptrPtr, sizePtr uint32) {
	if len(data) == 0 {
		m.Memory().WriteUint32Le(ptrPtr, 0)
		m.Memory().WriteUint32Le(sizePtr, 0)
		return
	}
	h.inAlloc = true
	res, err := m.ExportedFunction(hostcalls.ExportMemoryAllocate).Call(ctx, uint64(len(data)))
	h.inAlloc = false
	h.allocs++
	if err != nil {
		panic(err)
	}
	p := uint32(res[0])
	m.Memory().Write(p, data)
	m.Memory().WriteUint32Le(ptrPtr, p)
	m.Memory().WriteUint32Le(sizePtr, uint32(len(data)))
}

func (h *miniHost) str(m api.Module, p, n uint64) string {
	b, _ := m.Memory().Read(uint32(p), uint32(n))
	return string(b)
}

func (h *miniHost) instantiate(t *testing.T, ctx context.Context, r wazero.Runtime, wasm []byte) api.Module {
	t.Helper()
	// WASI as Envoy >= 1.39 has it: poll_oneoff succeeds with no events.
	wasi := r.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(wasi)
	wasi.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, in, out, nsub, neventsPtr uint32) uint32 {
		h.polls++
		if h.inAlloc {
			h.pollsInAlloc++
		}
		m.Memory().WriteUint32Le(neventsPtr, 0)
		return 0
	}).Export("poll_oneoff")
	if _, err := wasi.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	env := r.NewHostModuleBuilder(hostcalls.HostModule)
	impl := map[string]api.GoModuleFunc{
		hostcalls.ProxyLog: func(ctx context.Context, m api.Module, s []uint64) {
			h.logs = append(h.logs, h.str(m, s[1], s[2]))
			s[0] = 0
		},
		hostcalls.ProxyGetBufferBytes: func(ctx context.Context, m api.Module, s []uint64) {
			if hostcalls.BufferType(s[0]) != hostcalls.BufferPluginConfiguration {
				s[0] = uint64(hostcalls.StatusNotFound)
				return
			}
			h.alloc(ctx, m, h.config, uint32(s[3]), uint32(s[4]))
			s[0] = 0
		},
		hostcalls.ProxyGetSharedData: func(ctx context.Context, m api.Module, s []uint64) {
			v, ok := h.shared[h.str(m, s[0], s[1])]
			if !ok {
				s[0] = uint64(hostcalls.StatusNotFound)
				return
			}
			h.alloc(ctx, m, v, uint32(s[2]), uint32(s[3]))
			m.Memory().WriteUint32Le(uint32(s[4]), 1)
			s[0] = 0
		},
		hostcalls.ProxySetSharedData: func(ctx context.Context, m api.Module, s []uint64) {
			b, _ := m.Memory().Read(uint32(s[2]), uint32(s[3]))
			h.shared[h.str(m, s[0], s[1])] = append([]byte(nil), b...)
			s[0] = 0
		},
	}
	for name, fn := range h.extra {
		impl[name] = fn
	}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != hostcalls.HostModule {
			continue
		}
		fn, ok := impl[name]
		if !ok {
			fn = func(ctx context.Context, m api.Module, s []uint64) { s[0] = uint64(hostcalls.StatusUnimplemented) }
		}
		env.NewFunctionBuilder().WithGoModuleFunction(fn, f.ParamTypes(), f.ResultTypes()).Export(name)
	}
	if _, err := env.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithStartFunctions(hostcalls.ExportInitialize))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// configure runs context_create, vm_start and configure of root context 1.
func (h *miniHost) configure(t *testing.T, ctx context.Context, m api.Module) {
	t.Helper()
	call := func(name string, args ...uint64) uint64 {
		t.Helper()
		res, err := m.ExportedFunction(name).Call(ctx, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(res) > 0 {
			return res[0]
		}
		return 0
	}
	call(hostcalls.ExportContextCreate, 1, 0)
	if call(hostcalls.ExportVMStart, 1, 0) != 1 || call(hostcalls.ExportConfigure, 1, uint64(len(h.config))) != 1 {
		t.Fatalf("start failed; logs %q", h.logs)
	}
}

// TestAllocatorAvoidsPollOneoff checks the poll_oneoff hardening under wazero: the
// Go runtime's poller is active (garbage collections call poll_oneoff), yet
// no poll_oneoff happens while proxy_on_memory_allocate runs, because
// results that fit the arena never reach the Go allocator there. It runs
// the module as the Go linker wrote it (wasmbuild.Raw): after the post-link
// step (internal/wasmlink) poll_oneoff is the module's own function and the
// host never sees it.
func TestAllocatorAvoidsPollOneoff(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(compileCache))
	defer r.Close(ctx)

	const rounds = 50
	steps := []map[string]any{{"call": "set_shared_data", "key": "k", "value": "0123456789abcdef", "repeat": 256, "hash": true}}
	for range rounds {
		steps = append(steps, map[string]any{"call": "gc"}, map[string]any{"call": "get_shared_data", "key": "k", "hash": true})
	}
	cfg, _ := json.Marshal(map[string]any{"on": map[string]any{"configure": steps}})
	h := &miniHost{config: cfg, shared: map[string][]byte{}}
	m := h.instantiate(t, ctx, r, wasmbuild.Raw(t, "./hostcalls/internal/conformance"))

	h.configure(t, ctx, m)
	ok := 0
	for _, l := range h.logs {
		if strings.HasPrefix(l, `get_shared_data(key="k") -> value_len=4096 `) && strings.HasSuffix(l, "cas=1 status=OK") {
			ok++
		}
	}
	if ok != rounds {
		t.Errorf("%d of %d get_shared_data lines correct; logs %q", ok, rounds, h.logs[:min(len(h.logs), 8)])
	}
	if h.allocs < rounds {
		t.Errorf("allocator called %d times, want >= %d", h.allocs, rounds)
	}
	if h.polls == 0 {
		t.Errorf("poll_oneoff never called: the test does not exercise the runtime's poller")
	}
	if h.pollsInAlloc != 0 {
		t.Errorf("poll_oneoff called %d times inside proxy_on_memory_allocate (of %d)", h.pollsInAlloc, h.polls)
	}
	t.Logf("%d allocations, %d poll_oneoff calls, none inside the allocator", h.allocs, h.polls)
}

// TestGuestMemoryLayout checks the bytes the guest hands to the host and
// reads back, for the header-map serialisation in both directions and for
// the empty maps of send_local_response and http_call.
func TestGuestMemoryLayout(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(compileCache))
	defer r.Close(ctx)
	steps := []map[string]any{
		{"call": "set_header_map_pairs", "map": "response_headers", "pairs": [][2]string{{"a", "bc"}}},
		{"call": "get_header_map_pairs", "map": "request_headers"},
		{"call": "send_local_response", "status": 429, "details": "d"},
		{"call": "http_call", "upstream": "u", "pairs": [][2]string{{":path", "/"}}, "timeout": 7},
	}
	cfg, _ := json.Marshal(map[string]any{"on": map[string]any{"configure": steps}})
	seen := map[string][]byte{}
	read := func(m api.Module, name string, p, n uint64) {
		b, _ := m.Memory().Read(uint32(p), uint32(n))
		seen[name] = append([]byte(nil), b...)
	}
	h := &miniHost{config: cfg, shared: map[string][]byte{}}
	h.extra = map[string]api.GoModuleFunc{
		hostcalls.ProxySetHeaderMapPairs: func(ctx context.Context, m api.Module, s []uint64) {
			read(m, "set_header_map_pairs", s[1], s[2])
			s[0] = 0
		},
		hostcalls.ProxyGetHeaderMapPairs: func(ctx context.Context, m api.Module, s []uint64) {
			h.alloc(ctx, m, []byte{
				0x02, 0, 0, 0, // N = 2
				0x05, 0, 0, 0, // key 0: 5 bytes
				0x01, 0, 0, 0, // value 0: 1 byte
				0x01, 0, 0, 0, // key 1: 1 byte
				0x00, 0, 0, 0, // value 1: empty
				':', 'p', 'a', 't', 'h', 0, '/', 0, // ":path\0/\0"
				'x', 0, 0, // "x\0\0"
			}, uint32(s[1]), uint32(s[2]))
			s[0] = 0
		},
		hostcalls.ProxySendLocalResponse: func(ctx context.Context, m api.Module, s []uint64) {
			read(m, "details", s[1], s[2])
			read(m, "local_response_headers", s[5], s[6])
			s[0] = uint64(hostcalls.StatusOK)
			if int32(uint32(s[7])) != -1 { // grpc_status: no grpc-status
				s[0] = uint64(hostcalls.StatusBadArgument)
			}
		},
		hostcalls.ProxyHTTPCall: func(ctx context.Context, m api.Module, s []uint64) {
			read(m, "upstream", s[0], s[1])
			read(m, "http_call_headers", s[2], s[3])
			read(m, "http_call_trailers", s[6], s[7])
			if s[8] != 7 {
				s[0] = uint64(hostcalls.StatusBadArgument)
				return
			}
			m.Memory().WriteUint32Le(uint32(s[9]), 42) // token
			s[0] = 0
		},
	}
	m := h.instantiate(t, ctx, r, wasmbuild.Module(t, "./hostcalls/internal/conformance"))
	h.configure(t, ctx, m)

	want := map[string][]byte{
		"set_header_map_pairs": {
			0x01, 0, 0, 0, // N = 1
			0x01, 0, 0, 0, // key length 1
			0x02, 0, 0, 0, // value length 2
			'a', 0, // "a\0"
			'b', 'c', 0, // "bc\0"
		},
		"details":                {'d'},
		"local_response_headers": {0, 0, 0, 0}, // empty map sent as N = 0, not ptr=0 size=0
		"upstream":               {'u'},
		"http_call_headers": {
			0x01, 0, 0, 0, 0x05, 0, 0, 0, 0x01, 0, 0, 0, ':', 'p', 'a', 't', 'h', 0, '/', 0,
		},
		"http_call_trailers": {0, 0, 0, 0},
	}
	for name, w := range want {
		if got := seen[name]; !bytes.Equal(got, w) {
			t.Errorf("%s: guest passed % x, want % x", name, got, w)
		}
	}
	wantLogs := []string{
		`set_header_map_pairs(map=response_headers pairs=[["a","bc"]]) -> status=OK`,
		`get_header_map_pairs(map=request_headers) -> pairs=[[":path","/"],["x",""]] status=OK`,
		`send_local_response(status=429 details="d" body="" headers=[] grpc=-1) -> status=OK`,
		`http_call(upstream="u" headers=[[":path","/"]] body="" trailers=[] timeout=7) -> token=42 status=OK`,
	}
	var got []string
	for _, l := range h.logs {
		if !strings.HasPrefix(l, "on_") {
			got = append(got, l)
		}
	}
	if !slices.Equal(got, wantLogs) {
		t.Errorf("transcript:\n%s", diff(got, wantLogs))
	}
}
