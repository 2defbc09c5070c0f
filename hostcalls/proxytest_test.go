package hostcalls_test

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/internal/proxytestcompat"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// The second host: the basic conformance module under the SDK's proxytest
// emulator (a wazero host written independently of ours), so that a
// misreading of the ABI cannot hide in both our guest and our host.

// newProxytest starts the basic conformance module in proxytest with the
// script as plugin configuration.
func newProxytest(t *testing.T, script string) (proxytest.HostEmulator, func()) {
	return newProxytestVM(t, "", script)
}

// newProxytestVM is newProxytest with a VM configuration (a script whose
// vm_start steps run).
func newProxytestVM(t *testing.T, vmScript, script string) (proxytest.HostEmulator, func()) {
	t.Helper()
	wasm, err := proxytestcompat.RenameInitialize(wasmbuild.Module(t, "./hostcalls/internal/conformance/basic"))
	if err != nil {
		t.Fatal(err)
	}
	if missing, err := proxytestcompat.MissingImports(wasm); err != nil || len(missing) > 0 {
		t.Fatalf("MissingImports = %v, %v; want none", missing, err)
	}
	vm, err := proxytest.NewWasmVMContext(wasm)
	if err != nil {
		t.Fatalf("NewWasmVMContext: %v", err)
	}
	opt := proxytest.NewEmulatorOption().WithVMContext(vm).WithPluginConfiguration([]byte(script)).
		WithVMConfiguration([]byte(vmScript)).WithProperty([]string{"plugin_name"}, []byte("conformance"))
	host, reset := proxytest.NewHostEmulator(opt)
	return host, func() { reset(); vm.Close() }
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type step = map[string]any

func TestProxytestBasicFamilies(t *testing.T) {
	script := map[string]any{
		"on": map[string][]step{
			"configure": {
				{"call": "log", "level": "warn", "msg": "warned"},
				{"call": "define_metric", "metric": "counter", "name": "requests"},
				{"call": "increment_metric", "name": "requests", "n": 3},
				{"call": "get_metric", "name": "requests"},
				{"call": "define_metric", "metric": "gauge", "name": "level"},
				{"call": "record_metric", "name": "level", "n": 42},
				{"call": "get_shared_data", "key": "k"},
				{"call": "set_shared_data", "key": "k", "value": "v1"},
				{"call": "get_shared_data", "key": "k"},
				{"call": "set_shared_data", "key": "k", "value": "v2", "cas": 1},
				{"call": "set_shared_data", "key": "k", "value": "v3", "cas": 1},
				{"call": "get_shared_data", "key": "k"},
				{"call": "set_tick_period_milliseconds", "n": 250},
				{"call": "get_property", "path": []string{"plugin_name"}},
				{"call": "get_buffer_bytes", "buffer": "plugin_configuration", "start": 0, "max": 8},
			},
			"request_headers": {
				{"call": "get_header_map_value", "map": "request_headers", "key": ":path"},
				{"call": "get_header_map_value", "map": "request_headers", "key": "absent"},
				{"call": "add_header_map_value", "map": "request_headers", "key": "x-added", "value": "1"},
				{"call": "replace_header_map_value", "map": "request_headers", "key": "x-team", "value": "blue"},
				{"call": "remove_header_map_value", "map": "request_headers", "key": "content-length"},
				{"call": "get_header_map_pairs", "map": "request_headers"},
			},
			"request_body": {
				{"call": "get_buffer_bytes", "buffer": "request_body", "start": 0, "max": 5},
				{"call": "set_buffer_bytes", "buffer": "request_body", "start": 0, "size": 1 << 30, "value": "replaced"},
				{"call": "get_buffer_bytes", "buffer": "request_body"},
			},
			"response_headers": {
				{"call": "set_header_map_pairs", "map": "response_headers", "pairs": [][2]string{{":status", "200"}, {"x-a", "b"}}},
				{"call": "get_header_map_pairs", "map": "response_headers"},
				{"call": "send_local_response", "status": 429, "details": "over_share", "body": "slow down",
					"pairs": [][2]string{{"retry-after", "1"}}},
			},
		},
		"return": map[string]uint32{"response_headers": 1},
	}
	cfg := mustJSON(t, script)
	host, done := newProxytest(t, cfg)
	defer done()

	if st := host.StartVM(); st != types.OnVMStartStatusOK {
		t.Fatalf("StartVM = %v", st)
	}
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("StartPlugin = %v (critical logs %q)", st, host.GetCriticalLogs())
	}
	id := host.InitializeHttpContext()
	if a := host.CallOnRequestHeaders(id, [][2]string{{":path", "/v1/chat"}, {"X-Team", "red"}, {"content-length", "11"}}, false); a != types.ActionContinue {
		t.Errorf("request headers action = %v, want Continue", a)
	}
	if a := host.CallOnRequestBody(id, []byte("hello world"), true); a != types.ActionContinue {
		t.Errorf("request body action = %v, want Continue", a)
	}
	if a := host.CallOnResponseHeaders(id, [][2]string{{":status", "503"}}, false); a != types.ActionPause {
		t.Errorf("response headers action = %v, want Pause", a)
	}
	host.CompleteHttpContext(id)

	ctx := strconv.Itoa(int(id)) // proxytest numbers contexts process-wide
	want := []string{
		"on_context_create(ctx=1 parent=0)",
		"on_vm_start(vm_config_size=0)",
		"on_configure(ctx=1 config_size=" + itoa(len(cfg)) + ")",
		`log(level=warn msg="warned") -> status=OK`,
		`define_metric(metric=counter name="requests") -> id=0 status=OK`,
		`increment_metric(id=0 delta=3) -> status=OK`,
		`get_metric(id=0) -> value=3 status=OK`,
		`define_metric(metric=gauge name="level") -> id=1 status=OK`,
		`record_metric(id=1 value=42) -> status=OK`,
		`get_shared_data(key="k") -> value="" cas=0 status=NOT_FOUND`,
		`set_shared_data(key="k" value="v1" cas=0) -> status=OK`,
		`get_shared_data(key="k") -> value="v1" cas=1 status=OK`,
		`set_shared_data(key="k" value="v2" cas=1) -> status=OK`,
		`set_shared_data(key="k" value="v3" cas=1) -> status=CAS_MISMATCH`,
		`get_shared_data(key="k") -> value="v2" cas=2 status=OK`,
		`set_tick_period_milliseconds(ms=250) -> status=OK`,
		`get_property(path=["plugin_name"]) -> value="conformance" status=OK`,
		`get_buffer_bytes(buffer=plugin_configuration start=0 max=8) -> bytes=` + quote(cfg[:8]) + ` status=OK`,
		"on_context_create(ctx=" + ctx + " parent=1)",
		"on_request_headers(ctx=" + ctx + " headers=3 eos=false)",
		`get_header_map_value(map=request_headers key=":path") -> value="/v1/chat" status=OK`,
		`get_header_map_value(map=request_headers key="absent") -> value="" status=NOT_FOUND`,
		`add_header_map_value(map=request_headers key="x-added" value="1") -> status=OK`,
		`replace_header_map_value(map=request_headers key="x-team" value="blue") -> status=OK`,
		`remove_header_map_value(map=request_headers key="content-length") -> status=OK`,
		`get_header_map_pairs(map=request_headers) -> pairs=[[":path","/v1/chat"],["x-team","blue"],["x-added","1"]] status=OK`,
		"on_request_body(ctx=" + ctx + " size=11 eos=true)",
		`get_buffer_bytes(buffer=request_body start=0 max=5) -> bytes="hello" status=OK`,
		`set_buffer_bytes(buffer=request_body start=0 size=1073741824 value="replaced") -> status=OK`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="replaced" status=OK`,
		"on_response_headers(ctx=" + ctx + " headers=1 eos=false)",
		`set_header_map_pairs(map=response_headers pairs=[[":status","200"],["x-a","b"]]) -> status=OK`,
		`get_header_map_pairs(map=response_headers) -> pairs=[[":status","200"],["x-a","b"]] status=OK`,
		`send_local_response(status=429 details="over_share" body="slow down" headers=[["retry-after","1"]] grpc=-1) -> status=OK`,
		"on_stream_done(ctx=" + ctx + ")",
	}
	if got := host.GetInfoLogs(); !slices.Equal(got, want) {
		t.Errorf("transcript mismatch:\n%s", diff(got, want))
	}
	if got := host.GetWarnLogs(); !slices.Equal(got, []string{"warned"}) {
		t.Errorf("warn logs = %q, want [warned]", got)
	}

	// The host's side of the same story.
	if v, err := host.GetCounterMetric("requests"); err != nil || v != 3 {
		t.Errorf("counter requests = %d, %v; want 3", v, err)
	}
	if v, err := host.GetGaugeMetric("level"); err != nil || v != 42 {
		t.Errorf("gauge level = %d, %v; want 42", v, err)
	}
	if got := host.GetTickPeriod(); got != 250 {
		t.Errorf("tick period = %d, want 250", got)
	}
	wantReq := [][2]string{{":path", "/v1/chat"}, {"x-team", "blue"}, {"x-added", "1"}}
	if got := host.GetCurrentRequestHeaders(id); !slices.Equal(got, wantReq) {
		t.Errorf("request headers = %q, want %q", got, wantReq)
	}
	if got := string(host.GetCurrentRequestBody(id)); got != "replaced" {
		t.Errorf("request body = %q, want replaced", got)
	}
	lr := host.GetSentLocalResponse(id)
	if lr == nil {
		t.Fatal("no local response")
	}
	if lr.StatusCode != 429 || lr.StatusCodeDetail != "over_share" || string(lr.Data) != "slow down" ||
		!slices.Equal(lr.Headers, [][2]string{{"retry-after", "1"}}) || lr.GRPCStatus != -1 {
		t.Errorf("local response = %+v", *lr)
	}
}

func TestProxytestHTTPCallQueueTick(t *testing.T) {
	script := map[string]any{
		"on": map[string][]step{
			"configure": {
				{"call": "register_shared_queue", "name": "q"},
				{"call": "enqueue_shared_queue", "name": "q", "value": "item1"},
				{"call": "dequeue_shared_queue", "name": "q"},
				{"call": "dequeue_shared_queue", "name": "q"},
				{"call": "set_property", "path": []string{"wasm", "x"}, "value": "y"},
				{"call": "get_property", "path": []string{"wasm", "x"}},
			},
			"tick": {
				{"call": "log", "level": "debug", "msg": "tock"},
			},
			"request_headers": {
				{"call": "http_call", "upstream": "auth", "timeout": 500,
					"pairs": [][2]string{{":method", "GET"}, {":path", "/check"}, {":authority", "auth"}}, "body": "q"},
			},
			"http_call_response": {
				{"call": "get_header_map_value", "map": "http_call_response_headers", "key": "x-verdict"},
				{"call": "get_buffer_bytes", "buffer": "http_call_response_body"},
				{"call": "get_header_map_pairs", "map": "http_call_response_trailers"},
				{"call": "set_effective_context"},
				{"call": "continue_stream", "stream": "request"},
			},
		},
		"return": map[string]uint32{"request_headers": 1},
	}
	host, done := newProxytest(t, mustJSON(t, script))
	defer done()
	host.StartVM()
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("StartPlugin = %v (critical logs %q)", st, host.GetCriticalLogs())
	}
	host.Tick()
	id := host.InitializeHttpContext()
	if a := host.CallOnRequestHeaders(id, [][2]string{{":path", "/"}}, true); a != types.ActionPause {
		t.Fatalf("request headers action = %v, want Pause", a)
	}
	calls := host.GetCalloutAttributesFromContext(id)
	if len(calls) != 1 || calls[0].Upstream != "auth" || string(calls[0].Body) != "q" {
		t.Fatalf("callouts = %+v, want one to auth with body q", calls)
	}
	host.CallOnHttpCallResponse(calls[0].CalloutID, [][2]string{{"X-Verdict", "allow"}}, [][2]string{{"t", "1"}}, []byte("ok"))
	if a := host.GetCurrentHttpStreamAction(id); a != types.ActionContinue {
		t.Errorf("stream action after the callout = %v, want Continue (resumed)", a)
	}
	host.CompleteHttpContext(id)

	token := strconv.Itoa(int(calls[0].CalloutID))
	ctx := strconv.Itoa(int(id)) // proxytest numbers contexts process-wide
	want := []string{
		"on_context_create(ctx=1 parent=0)",
		"on_vm_start(vm_config_size=0)",
		"on_configure(ctx=1 config_size=" + itoa(len(mustJSON(t, script))) + ")",
		`register_shared_queue(name="q") -> id=0 status=OK`,
		// proxytest calls proxy_on_queue_ready from inside the enqueue host
		// call: the guest must handle the reentrant callback.
		"on_queue_ready(ctx=1 queue=0)",
		`enqueue_shared_queue(id=0 value="item1") -> status=OK`,
		`dequeue_shared_queue(id=0) -> value="item1" status=OK`,
		`dequeue_shared_queue(id=0) -> value="" status=EMPTY`,
		`set_property(path=["wasm","x"] value="y") -> status=OK`,
		`get_property(path=["wasm","x"]) -> value="y" status=OK`,
		"on_tick(ctx=1)",
		`log(level=debug msg="tock") -> status=OK`,
		"on_context_create(ctx=" + ctx + " parent=1)",
		"on_request_headers(ctx=" + ctx + " headers=1 eos=true)",
		`http_call(upstream="auth" headers=[[":method","GET"],[":path","/check"],[":authority","auth"]] body="q" trailers=[] timeout=500) -> token=` + token + ` status=OK`,
		"on_http_call_response(ctx=1 token=" + token + " headers=1 body=2 trailers=1)",
		`get_header_map_value(map=http_call_response_headers key="x-verdict") -> value="allow" status=OK`,
		`get_buffer_bytes(buffer=http_call_response_body start=0 max=max) -> bytes="ok" status=OK`,
		`get_header_map_pairs(map=http_call_response_trailers) -> pairs=[["t","1"]] status=OK`,
		`set_effective_context(ctx=` + ctx + `) -> status=OK`,
		`continue_stream(stream=request) -> status=OK`,
		"on_stream_done(ctx=" + ctx + ")",
	}
	if got := host.GetInfoLogs(); !slices.Equal(got, want) {
		t.Errorf("transcript mismatch:\n%s", diff(got, want))
	}
	if got := host.GetDebugLogs(); !slices.Equal(got, []string{"tock"}) {
		t.Errorf("debug logs = %q, want [tock]", got)
	}
}

// TestProxytestLargeDataAndGC moves results larger than the allocator's
// arena (the fallback path inside proxy_on_memory_allocate) and results
// reserved ahead of the call, with garbage collections in between, and
// checks every byte arrives.
func TestProxytestLargeDataAndGC(t *testing.T) {
	const n = 3 * hostcalls.ArenaSize // bytes of shared data and of the body
	max := n
	script := map[string]any{
		"on": map[string][]step{
			"configure": {
				{"call": "set_shared_data", "key": "big", "value": "0123456789abcdef", "repeat": n / 16, "hash": true},
				{"call": "gc", "n": 3},
				{"call": "get_shared_data", "key": "big", "hash": true},
			},
			"request_body": {
				{"call": "get_buffer_bytes", "buffer": "request_body", "hash": true},
				{"call": "gc"},
				{"call": "get_buffer_bytes", "buffer": "request_body", "max": max, "hash": true},
				{"call": "get_shared_data", "key": "big", "hash": true},
				{"call": "get_buffer_bytes", "buffer": "request_body", "start": 1, "max": 3},
			},
		},
	}
	host, done := newProxytest(t, mustJSON(t, script))
	defer done()
	host.StartVM()
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("StartPlugin = %v (critical logs %q)", st, host.GetCriticalLogs())
	}
	big := strings.Repeat("0123456789abcdef", n/16)
	body := make([]byte, n)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	const streams = 5
	for range streams {
		id := host.InitializeHttpContext()
		host.CallOnRequestBody(id, body, true)
		host.CompleteHttpContext(id)
	}
	sum := func(b []byte) string {
		h := fnv.New64a()
		h.Write(b)
		return fmt.Sprintf("len=%d %s_fnv=%016x", len(b), "%s", h.Sum64())
	}
	bigHash := fmt.Sprintf(sum([]byte(big)), "value")
	bodyHash := fmt.Sprintf(sum(body), "bytes")
	var want []string
	want = append(want,
		`set_shared_data(key="big" value_`+bigHash+` cas=0) -> status=OK`,
		`gc(n=3) -> status=OK`,
		`get_shared_data(key="big") -> value_`+bigHash+` cas=1 status=OK`)
	for range streams {
		want = append(want,
			`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes_`+bodyHash+` status=OK`,
			`gc(n=1) -> status=OK`,
			`get_buffer_bytes(buffer=request_body start=0 max=`+strconv.Itoa(max)+`) -> bytes_`+bodyHash+` status=OK`,
			`get_shared_data(key="big") -> value_`+bigHash+` cas=1 status=OK`,
			`get_buffer_bytes(buffer=request_body start=1 max=3) -> bytes="bcd" status=OK`)
	}
	got := slices.DeleteFunc(host.GetInfoLogs(), func(l string) bool { return strings.HasPrefix(l, "on_") })
	if !slices.Equal(got, want) {
		t.Errorf("transcript mismatch:\n%s", diff(got, want))
	}
}

// TestProxytestVMStartAndBadScript runs vm_start steps from the VM
// configuration, then a plugin configuration that names a call the basic
// module lacks: configure must fail with the reason at critical level.
func TestProxytestVMStartAndBadScript(t *testing.T) {
	vmScript := `{"on":{"vm_start":[{"call":"get_buffer_bytes","buffer":"vm_configuration","max":6}]}}`
	script := `{"on":{"configure":[{"call":"get_log_level"}]}}`
	host, done := newProxytestVM(t, vmScript, script)
	defer done()
	if st := host.StartVM(); st != types.OnVMStartStatusOK {
		t.Fatalf("StartVM = %v (critical logs %q)", st, host.GetCriticalLogs())
	}
	if st := host.StartPlugin(); st != types.OnPluginStartStatusFailed {
		t.Fatalf("StartPlugin = %v, want failed", st)
	}
	wantInfo := []string{
		"on_context_create(ctx=1 parent=0)",
		"on_vm_start(vm_config_size=" + itoa(len(vmScript)) + ")",
		`get_buffer_bytes(buffer=vm_configuration start=0 max=6) -> bytes=` + quote(vmScript[:6]) + ` status=OK`,
		"on_configure(ctx=1 config_size=" + itoa(len(script)) + ")",
	}
	if got := host.GetInfoLogs(); !slices.Equal(got, wantInfo) {
		t.Errorf("transcript mismatch:\n%s", diff(got, wantInfo))
	}
	want := []string{`script: on.configure[0].call: "get_log_level" is not in this module`}
	if got := host.GetCriticalLogs(); !slices.Equal(got, want) {
		t.Errorf("critical logs = %q, want %q", got, want)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func quote(s string) string { return strconv.Quote(s) }

func diff(got, want []string) string {
	var b strings.Builder
	for i := 0; i < max(len(got), len(want)); i++ {
		g, w := "<none>", "<none>"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		mark := "  "
		if g != w {
			mark = "! "
		}
		b.WriteString(mark + "got:  " + g + "\n" + mark + "want: " + w + "\n")
	}
	return b.String()
}
