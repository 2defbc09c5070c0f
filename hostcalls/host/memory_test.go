package host

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func sharedImports() []asmImport {
	return []asmImport{envImport(hostcalls.ProxyGetSharedData), envImport(hostcalls.ProxySetSharedData)}
}

// TestSharedDataMemory: proxy_get/set_shared_data, byte by byte, with
// Envoy's CAS rules.
func TestSharedDataMemory(t *testing.T) {
	h, mem := asmHost(t, sharedImports(), -1, Options{})
	write(t, mem, 16, []byte("key"))
	write(t, mem, 32, []byte("value"))
	write(t, mem, 48, []byte("nokey"))
	write(t, mem, 100, bytes.Repeat([]byte{0xff}, 12))
	set := func(keyPtr, keyLen, valPtr, valLen, cas uint32) uint32 {
		return callIn(t, h, nil, hostcalls.ProxySetSharedData, uint64(keyPtr), uint64(keyLen), uint64(valPtr), uint64(valLen), uint64(cas))
	}
	get := func(keyPtr, keyLen uint32) uint32 {
		return callIn(t, h, nil, hostcalls.ProxyGetSharedData, uint64(keyPtr), uint64(keyLen), 100, 104, 108)
	}

	equal(t, "get missing", get(48, 5), uint32(hostcalls.StatusNotFound))
	equal(t, "slots untouched", memAt(t, mem, 100, 12), bytes.Repeat([]byte{0xff}, 12))
	equal(t, "set missing with any cas", set(16, 3, 32, 5, 12345), uint32(hostcalls.StatusOK))
	equal(t, "get", get(16, 3), uint32(hostcalls.StatusOK))
	equal(t, "slots", memAt(t, mem, 100, 12), le32(
		heapBase, // ret_ptr: the guest's malloc returned heapBase
		5,        // ret_size
		1,        // ret_cas: the counter starts at 1
	))
	equal(t, "value", memAt(t, mem, heapBase, 5), []byte("value"))
	equal(t, "set wrong cas", set(16, 3, 32, 4, 7), uint32(hostcalls.StatusCASMismatch))
	equal(t, "set right cas", set(16, 3, 32, 4, 1), uint32(hostcalls.StatusOK))
	equal(t, "set cas 0 is unconditional", set(16, 3, 32, 3, 0), uint32(hostcalls.StatusOK))
	equal(t, "get again", get(16, 3), uint32(hostcalls.StatusOK))
	equal(t, "slots again", memAt(t, mem, 100, 12), le32(heapBase+5, 3, 3))
	equal(t, "value again", memAt(t, mem, heapBase+5, 3), []byte("val"))
	equal(t, "set empty value", set(48, 5, 0, 0, 0), uint32(hostcalls.StatusOK))
	equal(t, "get empty", get(48, 5), uint32(hostcalls.StatusOK))
	equal(t, "empty: ptr 0 size 0 no allocation", memAt(t, mem, 100, 12), le32(0, 0, 4))
	equal(t, "bad pointer", callIn(t, h, nil, hostcalls.ProxyGetSharedData, 16, 3, 70000, 104, 108), uint32(hostcalls.StatusInvalidMemoryAccess))

	equal(t, "transcript", h.Transcript(0), []string{
		`==> proxy_get_shared_data(key="nokey")`, `<== NOT_FOUND`,
		`==> proxy_set_shared_data(key="key",value="value",cas=12345)`, `<== OK`,
		`==> proxy_get_shared_data(key="key")`, `<== OK value="value" cas=1`,
		`==> proxy_set_shared_data(key="key",value="valu",cas=7)`, `<== CAS_MISMATCH`,
		`==> proxy_set_shared_data(key="key",value="valu",cas=1)`, `<== OK`,
		`==> proxy_set_shared_data(key="key",value="val",cas=0)`, `<== OK`,
		`==> proxy_get_shared_data(key="key")`, `<== OK value="val" cas=3`,
		`==> proxy_set_shared_data(key="nokey",value="",cas=0)`, `<== OK`,
		`==> proxy_get_shared_data(key="nokey")`, `<== OK value="" cas=4`,
		`==> proxy_get_shared_data(key="key")`, `<== INVALID_MEMORY_ACCESS`,
	})
	v, cas, ok := h.SharedData("key")
	equal(t, "SharedData", []any{string(v), cas, ok}, []any{"val", uint32(3), true})
}

// TestHeaderMapMemory: header map calls on a stream: lower-cased keys,
// the first value, the pairs serialisation, and BAD_ARGUMENT once the
// filter continued.
func TestHeaderMapMemory(t *testing.T) {
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxyGetHeaderMapValue), envImport(hostcalls.ProxyGetHeaderMapPairs),
		envImport(hostcalls.ProxyAddHeaderMapValue), envImport(hostcalls.ProxyGetHeaderMapSize)}, -1, Options{})
	s := h.NewStream(0)
	s.lock()
	s.ensureCreated()
	s.req.headersSeen = true
	s.req.headers = lowerPairs([][2]string{{":path", "/"}, {"X-A", "1"}, {"x-a", "2"}})
	s.req.headersMutable = true
	s.unlock()
	write(t, mem, 16, []byte("X-A"))
	equal(t, "get value", callIn(t, h, s, hostcalls.ProxyGetHeaderMapValue, 0, 16, 3, 100, 104), uint32(0))
	equal(t, "slots", memAt(t, mem, 100, 8), le32(heapBase, 1))
	equal(t, "first value", memAt(t, mem, heapBase, 1), []byte("1"))
	equal(t, "size", callIn(t, h, s, hostcalls.ProxyGetHeaderMapSize, 0, 108), uint32(0))
	equal(t, "byteSize", memAt(t, mem, 108, 4), le32(5+1+3+1+3+1))
	equal(t, "pairs", callIn(t, h, s, hostcalls.ProxyGetHeaderMapPairs, 0, 100, 104), uint32(0))
	want := []byte{
		3, 0, 0, 0, // N
		5, 0, 0, 0, 1, 0, 0, 0, // ":path" "/"
		3, 0, 0, 0, 1, 0, 0, 0, // "x-a" "1"
		3, 0, 0, 0, 1, 0, 0, 0, // "x-a" "2"
		':', 'p', 'a', 't', 'h', 0, '/', 0,
		'x', '-', 'a', 0, '1', 0,
		'x', '-', 'a', 0, '2', 0,
	}
	equal(t, "pairs slots", memAt(t, mem, 100, 8), le32(heapBase+1, uint32(len(want))))
	equal(t, "pairs bytes", memAt(t, mem, heapBase+1, uint32(len(want))), want)
	// The filter continued: the map is gone.
	s.lock()
	s.releaseHeaders(&s.req)
	s.unlock()
	write(t, mem, 32, []byte("v"))
	equal(t, "add after continue", callIn(t, h, s, hostcalls.ProxyAddHeaderMapValue, 0, 16, 3, 32, 1), uint32(hostcalls.StatusBadArgument))
	equal(t, "get after continue", callIn(t, h, s, hostcalls.ProxyGetHeaderMapValue, 0, 16, 3, 100, 104), uint32(hostcalls.StatusBadArgument))
	equal(t, "root context", callIn(t, h, nil, hostcalls.ProxyGetHeaderMapValue, 0, 16, 3, 100, 104), uint32(hostcalls.StatusBadArgument))
	equal(t, "transcript", h.Transcript(0), []string{
		`==> proxy_get_header_map_value(type=0,key="x-a")`, `<== OK value="1"`,
		`==> proxy_get_header_map_size(type=0)`, `<== OK size=14`,
		`==> proxy_get_header_map_pairs(type=0)`, `<== OK pairs=3`,
		`==> proxy_add_header_map_value(type=0,key="x-a",value="v")`, `<== BAD_ARGUMENT`,
		`==> proxy_get_header_map_value(type=0,key="x-a")`, `<== BAD_ARGUMENT`,
		`==> proxy_get_header_map_value(type=0,key="x-a")`, `<== BAD_ARGUMENT`,
	})
}

// TestBufferMemory: proxy_get_buffer_bytes ranges and availability.
func TestBufferMemory(t *testing.T) {
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxyGetBufferBytes), envImport(hostcalls.ProxyGetBufferStatus)}, -1,
		Options{VMConfig: []byte("vmcfg"), PluginConfig: []byte("p")})
	get := func(typ, start, max uint32) uint32 {
		return callIn(t, h, nil, hostcalls.ProxyGetBufferBytes, uint64(typ), uint64(start), uint64(max), 100, 104)
	}
	equal(t, "range", get(6, 1, 3), uint32(0))
	equal(t, "slots", memAt(t, mem, 100, 8), le32(heapBase, 3))
	equal(t, "bytes", memAt(t, mem, heapBase, 3), []byte("mcf"))
	equal(t, "clamped", get(6, 3, 100), uint32(0))
	equal(t, "clamped slots", memAt(t, mem, 100, 8), le32(heapBase+3, 2))
	equal(t, "at end", get(6, 5, 10), uint32(0))
	equal(t, "at end slots", memAt(t, mem, 100, 8), le32(0, 0))
	equal(t, "past end", get(6, 6, 1), uint32(hostcalls.StatusBadArgument))
	equal(t, "plugin config outside on_configure", get(7, 0, 1), uint32(hostcalls.StatusNotFound))
	// Envoy hands the root context an empty body buffer: OK, nothing.
	equal(t, "request body on the root", get(0, 0, 1), uint32(hostcalls.StatusOK))
	equal(t, "request body on the root slots", memAt(t, mem, 100, 8), le32(0, 0))
	equal(t, "status", callIn(t, h, nil, hostcalls.ProxyGetBufferStatus, 6, 108, 112), uint32(0))
	equal(t, "status slots", memAt(t, mem, 108, 8), le32(5, 0))
}

// TestClockMemory: clock_time_get (realtime and monotonic) reads the
// host's VirtualClock.
func TestClockMemory(t *testing.T) {
	clock := NewVirtualClock(time.Unix(1700000000, 123))
	h, mem := asmHost(t, []asmImport{wasiImport("clock_time_get")}, -1, Options{Clock: clock})
	for id := uint64(0); id < 2; id++ {
		equal(t, "errno", callIn(t, h, nil, "clock_time_get", id, 0, 200), uint32(0))
		equal(t, "time", binary.LittleEndian.Uint64(memAt(t, mem, 200, 8)), uint64(1700000000_000000123))
	}
	clock.Advance(time.Second)
	callIn(t, h, nil, "clock_time_get", 1, 0, 200)
	equal(t, "advanced", binary.LittleEndian.Uint64(memAt(t, mem, 200, 8)), uint64(1700000001_000000123))
	equal(t, "cputime clock", callIn(t, h, nil, "clock_time_get", 2, 0, 200), uint32(errnoInval))
}

// TestPollOneoffMemory: c4d7bb0 answers ENOSYS and writes nothing;
// 94091cd answers 0 with nevents=0.
func TestPollOneoffMemory(t *testing.T) {
	for _, tc := range []struct {
		profile Profile
		errno   uint32
		nevents []byte
	}{
		{ProfileCppHostC4d7bb0, errnoNosys, []byte{0xff, 0xff, 0xff, 0xff}},
		{ProfileCppHost94091cd, 0, []byte{0, 0, 0, 0}},
	} {
		t.Run(tc.profile.String(), func(t *testing.T) {
			h, mem := asmHost(t, []asmImport{wasiImport("poll_oneoff")}, -1, Options{Profile: tc.profile})
			write(t, mem, 300, []byte{0xff, 0xff, 0xff, 0xff})
			equal(t, "errno", callIn(t, h, nil, "poll_oneoff", 0, 0, 1, 300), tc.errno)
			equal(t, "nevents", memAt(t, mem, 300, 4), tc.nevents)
		})
	}
}

// TestRestrictedCallbackDuringAllocation: while the guest's allocator
// runs, only proxy_log, fd_write and clock_time_get are allowed (and
// poll_oneoff from cpp-host 94091cd); anything else traps with
// restricted_callback and fails the VM.
func TestRestrictedCallbackDuringAllocation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inMalloc asmImport
		profile  Profile
		trap     bool
	}{
		{"poll_oneoff c4d7bb0", wasiImport("poll_oneoff"), ProfileCppHostC4d7bb0, true},
		{"poll_oneoff 94091cd", wasiImport("poll_oneoff"), ProfileCppHost94091cd, false},
		{"proxy_log", envImport(hostcalls.ProxyLog), ProfileCppHostPreC4d7bb0, false},
		{"set_tick_period", envImport(hostcalls.ProxySetTickPeriod), ProfileCppHost94091cd, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			imports := append([]asmImport{tc.inMalloc}, sharedImports()...)
			h, mem := asmHost(t, imports, 0, Options{Profile: tc.profile})
			h.SetSharedData("k", []byte("v"), 0)
			write(t, mem, 16, []byte("k"))
			vm := h.VMs()[0]
			vm.enter()
			_, err := vm.mod.ExportedFunction("call_"+hostcalls.ProxyGetSharedData).Call(vm.ctx, 16, 1, 100, 104, 108)
			vm.exit()
			if tc.trap {
				if err == nil || !strings.Contains(err.Error(), "restricted_callback") {
					t.Fatalf("err = %v, want a restricted_callback trap", err)
				}
			} else if err != nil {
				t.Fatalf("err = %v, want none", err)
			}
		})
	}
}

// TestMetricsMemory: Envoy's metric rules and the Prometheus text.
func TestMetricsMemory(t *testing.T) {
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxyDefineMetric), envImport(hostcalls.ProxyIncrementMetric),
		envImport(hostcalls.ProxyRecordMetric), envImport(hostcalls.ProxyGetMetric)}, -1, Options{})
	write(t, mem, 16, []byte("app.requests"))
	write(t, mem, 32, []byte("app.inflight"))
	write(t, mem, 48, []byte("app.latency_ms"))
	def := func(typ, ptr, n uint32) uint32 {
		equal(t, "define", callIn(t, h, nil, hostcalls.ProxyDefineMetric, uint64(typ), uint64(ptr), uint64(n), 100), uint32(0))
		return binary.LittleEndian.Uint32(memAt(t, mem, 100, 4))
	}
	c := def(0, 16, 12)
	equal(t, "same id for same name+type", def(0, 16, 12), c)
	g := def(1, 32, 12)
	hi := def(2, 48, 14)
	st := func(fn string, args ...uint64) uint32 { return callIn(t, h, nil, fn, args...) }
	neg := uint64(0xffffffffffffffff) // -1 as i64
	equal(t, "counter += 0", st(hostcalls.ProxyIncrementMetric, uint64(c), 0), uint32(hostcalls.StatusBadArgument))
	equal(t, "counter += -1", st(hostcalls.ProxyIncrementMetric, uint64(c), neg), uint32(hostcalls.StatusBadArgument))
	equal(t, "counter += 5", st(hostcalls.ProxyIncrementMetric, uint64(c), 5), uint32(0))
	equal(t, "counter record adds", st(hostcalls.ProxyRecordMetric, uint64(c), 3), uint32(0))
	equal(t, "get counter", st(hostcalls.ProxyGetMetric, uint64(c), 200), uint32(0))
	equal(t, "counter value", binary.LittleEndian.Uint64(memAt(t, mem, 200, 8)), uint64(8))
	equal(t, "gauge record", st(hostcalls.ProxyRecordMetric, uint64(g), 10), uint32(0))
	equal(t, "gauge -= 3", st(hostcalls.ProxyIncrementMetric, uint64(g), neg-2), uint32(0))
	st(hostcalls.ProxyGetMetric, uint64(g), 200)
	equal(t, "gauge value", binary.LittleEndian.Uint64(memAt(t, mem, 200, 8)), uint64(7))
	equal(t, "histogram record", st(hostcalls.ProxyRecordMetric, uint64(hi), 42), uint32(0))
	equal(t, "histogram increment", st(hostcalls.ProxyIncrementMetric, uint64(hi), 1), uint32(hostcalls.StatusBadArgument))
	equal(t, "histogram get", st(hostcalls.ProxyGetMetric, uint64(hi), 200), uint32(hostcalls.StatusBadArgument))
	equal(t, "unknown id", st(hostcalls.ProxyGetMetric, 99, 200), uint32(hostcalls.StatusNotFound))

	ms := h.Metrics()
	equal(t, "Metrics", ms["app.requests"].Value, int64(8))
	equal(t, "samples", ms["app.latency_ms"].Samples, []uint64{42})
	var b strings.Builder
	h.WritePrometheus(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE app_requests counter\napp_requests 8\n",
		"# TYPE app_inflight gauge\napp_inflight 7\n",
		"# TYPE app_latency_ms histogram\n",
		"app_latency_ms_bucket{le=\"25\"} 0\napp_latency_ms_bucket{le=\"50\"} 1\n",
		"app_latency_ms_sum 42\napp_latency_ms_count 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("WritePrometheus lacks %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "wasmcustom") || strings.Contains(out, "envoy_") {
		t.Errorf("WritePrometheus kept a prefix:\n%s", out)
	}
}

// TestPropertiesMemory: property encodings (strings raw, integers 8-byte
// LE) and set_property round trips through filter state "wasm.<path>".
func TestPropertiesMemory(t *testing.T) {
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxyGetProperty), envImport(hostcalls.ProxySetProperty)}, -1,
		Options{PluginName: "ns.fair", RootID: "fairshare", ClusterName: "vllm", RouteName: "r1"})
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":path", "/v1/chat?x=1"}, {":method", "POST"}, {":authority", "a"}, {"x-request-id", "rid"}}, true)
	get := func(s *Stream, path string) (uint32, []byte) {
		write(t, mem, 16, []byte(path))
		st := callIn(t, h, s, hostcalls.ProxyGetProperty, 16, uint64(len(path)), 100, 104)
		if st != 0 {
			return st, nil
		}
		p := binary.LittleEndian.Uint32(memAt(t, mem, 100, 4))
		n := binary.LittleEndian.Uint32(memAt(t, mem, 104, 4))
		if n == 0 {
			return st, nil
		}
		return st, memAt(t, mem, p, n)
	}
	for _, tc := range []struct {
		s    *Stream
		path string
		want []byte
	}{
		{nil, "plugin_name", []byte("ns.fair")},
		{nil, "plugin_root_id", []byte("fairshare")},
		{s, "request\x00path", []byte("/v1/chat?x=1")},
		{s, "request\x00url_path", []byte("/v1/chat")},
		{s, "request\x00method", []byte("POST")},
		{s, "request\x00id", []byte("rid")},
		{s, "xds\x00cluster_name", []byte("vllm")},
		{s, "xds\x00route_name", []byte("r1")},
		{s, "connection_id", binary.LittleEndian.AppendUint64(nil, s.conn)},
	} {
		st, got := get(tc.s, tc.path)
		if st != 0 || !bytes.Equal(got, tc.want) {
			t.Errorf("get_property(%q) = %d, %q; want OK, %q", tc.path, st, got, tc.want)
		}
	}
	st, _ := get(nil, "request\x00path")
	equal(t, "request.path on the root", st, uint32(hostcalls.StatusNotFound))
	write(t, mem, 16, []byte("fairshare\x00team"))
	write(t, mem, 48, []byte("search"))
	equal(t, "set_property", callIn(t, h, s, hostcalls.ProxySetProperty, 16, 14, 48, 6), uint32(0))
	equal(t, "filter state", s.FilterState(), map[string][]byte{"wasm.fairshare.team": []byte("search")})
	_, got := get(s, "fairshare\x00team")
	equal(t, "read back", string(got), "search")
}

// TestSharedQueueMemory: register, resolve, enqueue, dequeue.
func TestSharedQueueMemory(t *testing.T) {
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxyRegisterSharedQueue), envImport(hostcalls.ProxyResolveSharedQueue),
		envImport(hostcalls.ProxyEnqueueSharedQueue), envImport(hostcalls.ProxyDequeueSharedQueue)}, -1, Options{VMID: "queue-test-vm"})
	write(t, mem, 16, []byte("q1"))
	write(t, mem, 32, []byte("queue-test-vm"))
	write(t, mem, 64, []byte("hello"))
	equal(t, "register", callIn(t, h, nil, hostcalls.ProxyRegisterSharedQueue, 16, 2, 100), uint32(0))
	token := binary.LittleEndian.Uint32(memAt(t, mem, 100, 4))
	equal(t, "resolve", callIn(t, h, nil, hostcalls.ProxyResolveSharedQueue, 32, 13, 16, 2, 104), uint32(0))
	equal(t, "same token", binary.LittleEndian.Uint32(memAt(t, mem, 104, 4)), token)
	equal(t, "resolve unknown", callIn(t, h, nil, hostcalls.ProxyResolveSharedQueue, 32, 13, 64, 5, 104), uint32(hostcalls.StatusNotFound))
	equal(t, "dequeue empty", callIn(t, h, nil, hostcalls.ProxyDequeueSharedQueue, uint64(token), 108, 112), uint32(hostcalls.StatusEmpty))
	equal(t, "enqueue", callIn(t, h, nil, hostcalls.ProxyEnqueueSharedQueue, uint64(token), 64, 5), uint32(0))
	equal(t, "dequeue", callIn(t, h, nil, hostcalls.ProxyDequeueSharedQueue, uint64(token), 108, 112), uint32(0))
	equal(t, "slots", memAt(t, mem, 108, 8), le32(heapBase, 5))
	equal(t, "item", memAt(t, mem, heapBase, 5), []byte("hello"))
	equal(t, "unknown token", callIn(t, h, nil, hostcalls.ProxyEnqueueSharedQueue, 9999, 64, 5), uint32(hostcalls.StatusNotFound))
}

// TestRandomSeeded: random_get is deterministic per (Seed, VM) when
// seeded, and refuses more than 64 KiB.
func TestRandomSeeded(t *testing.T) {
	draw := func(seed uint64) []byte {
		h, mem := asmHost(t, []asmImport{wasiImport("random_get")}, -1, Options{Seed: seed})
		equal(t, "errno", callIn(t, h, nil, "random_get", 200, 16), uint32(0))
		equal(t, "too much", callIn(t, h, nil, "random_get", 200, 64<<10+1), uint32(errnoInval))
		return memAt(t, mem, 200, 16)
	}
	a, b, c := draw(7), draw(7), draw(8)
	equal(t, "same seed", a, b)
	if bytes.Equal(a, c) {
		t.Error("different seeds gave the same bytes")
	}
}

// TestSetHeaderMapPairsMemory: a whole-map replacement lower-cases keys;
// a malformed serialisation is refused (Envoy would wipe the map).
func TestSetHeaderMapPairsMemory(t *testing.T) {
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxySetHeaderMapPairs)}, -1, Options{})
	s := h.NewStream(0)
	s.lock()
	s.ensureCreated()
	s.req.headersSeen, s.req.headersMutable = true, true
	s.req.headers = [][2]string{{":path", "/"}}
	s.unlock()
	good := hostcalls.EncodePairs([][2]string{{"A", "1"}, {":path", "/x"}})
	write(t, mem, 16, good)
	equal(t, "set", callIn(t, h, s, hostcalls.ProxySetHeaderMapPairs, 0, 16, uint64(len(good))), uint32(0))
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] = 'x' // the last NUL is missing
	write(t, mem, 16, bad)
	equal(t, "malformed", callIn(t, h, s, hostcalls.ProxySetHeaderMapPairs, 0, 16, uint64(len(bad))), uint32(hostcalls.StatusBadArgument))
	s.lock()
	got := clonePairs(s.req.headers)
	s.unlock()
	equal(t, "headers", got, [][2]string{{"a", "1"}, {":path", "/x"}})
}
