package host

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// The guest helper's conformance module (hostcalls/internal/conformance):
// script-driven calls through the typed hostcalls wrappers, logged one
// line per call. These tests run it against this host's Envoy rules.
const conformancePkg = "./hostcalls/internal/conformance"

// conformanceLines starts the conformance module with script and returns
// VM vm's log lines (CanaryVM for the canary).
func conformanceRun(t *testing.T, script string, opts Options) *Host {
	t.Helper()
	opts.PluginConfig = []byte(script)
	return start(t, conformancePkg, opts)
}

// TestConformanceSharedDataWithCanary: the canary runs on_configure first
// in the same vm_id, so the worker finds the key the canary created: the
// documented example transcript shifted by the canary's writes.
func TestConformanceSharedDataWithCanary(t *testing.T) {
	h := conformanceRun(t, `{"on":{"configure":[{"call":"get_shared_data","key":"k"},{"call":"set_shared_data","key":"k","value":"v"},{"call":"get_shared_data","key":"k"}]}}`, Options{})
	equal(t, "canary", messages(h, CanaryVM, "get_shared_data", "set_shared_data"), []string{
		`get_shared_data(key="k") -> value="" cas=0 status=NOT_FOUND`,
		`set_shared_data(key="k" value="v" cas=0) -> status=OK`,
		`get_shared_data(key="k") -> value="v" cas=1 status=OK`,
	})
	equal(t, "worker", messages(h, 0, "get_shared_data", "set_shared_data"), []string{
		`get_shared_data(key="k") -> value="v" cas=1 status=OK`,
		`set_shared_data(key="k" value="v" cas=0) -> status=OK`,
		`get_shared_data(key="k") -> value="v" cas=2 status=OK`,
	})
}

// TestConformanceStream: buffering, set_buffer_bytes and frozen headers
// through the SDK-style wrappers.
func TestConformanceStream(t *testing.T) {
	h := conformanceRun(t, `{"on":{
		"request_body":[{"call":"get_buffer_bytes","buffer":"request_body","start":0},
		                {"call":"replace_header_map_value","map":"request_headers","key":"x","value":"1"},
		                {"call":"set_buffer_bytes","buffer":"request_body","start":1,"size":0,"value":"Z"}]},
		"return":{"request_body":1}}`, Options{})
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	equal(t, "chunk 1", s.RequestBody([]byte("ab"), false), StopIterationAndBuffer)
	equal(t, "chunk 2", s.RequestBody([]byte("cd"), true), StopIterationAndBuffer)
	equal(t, "log", messages(h, 0, "on_request_body", "get_buffer_bytes", "replace_header", "set_buffer_bytes"), []string{
		`on_request_body(ctx=2 size=2 eos=false)`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="ab" status=OK`,
		`replace_header_map_value(map=request_headers key="x" value="1") -> status=BAD_ARGUMENT`,
		`set_buffer_bytes(buffer=request_body start=1 size=0 value="Z") -> status=BAD_ARGUMENT`,
		`on_request_body(ctx=2 size=4 eos=true)`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="abcd" status=OK`,
		`replace_header_map_value(map=request_headers key="x" value="1") -> status=BAD_ARGUMENT`,
		`set_buffer_bytes(buffer=request_body start=1 size=0 value="Z") -> status=BAD_ARGUMENT`,
	})
}

// TestConformanceMetrics: counter increment by 0 is BAD_ARGUMENT, record
// on a counter adds, get on a histogram is BAD_ARGUMENT.
func TestConformanceMetrics(t *testing.T) {
	h := conformanceRun(t, `{"on":{"tick":[
		{"call":"define_metric","metric":"counter","name":"c"},
		{"call":"increment_metric","name":"c","n":0},
		{"call":"increment_metric","name":"c","n":2},
		{"call":"record_metric","name":"c","n":5},
		{"call":"get_metric","name":"c"},
		{"call":"define_metric","metric":"histogram","name":"h"},
		{"call":"get_metric","name":"h"}]}}`, Options{Clock: NewVirtualClock(time.Unix(0, 0))})
	vm := h.VMs()[0]
	vm.mu.Lock() // the script arms no timer: arm one by hand, tick once
	vm.tickPeriod, vm.nextTick = time.Second, h.Now()
	vm.mu.Unlock()
	equal(t, "ticks", h.RunDue(), 1)
	got := messages(h, 0, "increment_metric", "record_metric", "get_metric")
	want := []string{
		`increment_metric(id=1 delta=0) -> status=BAD_ARGUMENT`,
		`increment_metric(id=1 delta=2) -> status=OK`,
		`record_metric(id=1 value=5) -> status=OK`,
		`get_metric(id=1) -> value=7 status=OK`,
		`get_metric(id=2) -> value=0 status=BAD_ARGUMENT`,
	}
	equal(t, "log", got, want)
}

// TestConformanceGCLegacy: the conformance module's gc step, as the
// linker wrote the module, dies under ProfileCppHostC4d7bb0 and does not
// load under ProfileCppHostPreC4d7bb0 (a missing import); through the
// post-link step it survives under every profile.
func TestConformanceGCLegacy(t *testing.T) {
	script := `{"on":{"configure":[{"call":"gc","n":20}]}}`
	if _, err := rawModule(t, conformancePkg).Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: ProfileCppHostC4d7bb0, PluginConfig: []byte(script)}); err == nil {
		t.Fatalf("%s: 20 GCs in on_configure survived", ProfileCppHostC4d7bb0)
	}
	_, err := rawModule(t, conformancePkg).Start(t.Context(), Options{VMID: uniqueVMID(t), Profile: ProfileCppHostPreC4d7bb0, PluginConfig: []byte(script)})
	if err == nil || !strings.Contains(err.Error(), "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1.") {
		t.Errorf("%s: Start = %v, want a missing import", ProfileCppHostPreC4d7bb0, err)
	}
	for _, p := range Profiles {
		conformanceRun(t, script, Options{Profile: p})
	}
}

// TestConformanceQueueAcrossVMs: every VM registers queue "q" in
// on_configure (the last registrant, VM 1, owns it); a stream on VM 0
// enqueues; VM 1 gets on_queue_ready and dequeues the item.
func TestConformanceQueueAcrossVMs(t *testing.T) {
	h := conformanceRun(t, `{"on":{
		"configure":[{"call":"register_shared_queue","name":"q"}],
		"request_headers":[{"call":"enqueue_shared_queue","name":"q","value":"item"}],
		"queue_ready":[{"call":"dequeue_shared_queue","name":"q"},{"call":"dequeue_shared_queue","name":"q"}]}}`, Options{VMs: 2})
	s := h.NewStream(0)
	s.RequestHeaders(getReq, true)
	// Queue tokens are process-wide: name them Q.
	tok := regexp.MustCompile(`(id|queue)=\d+`)
	norm := func(lines []string) []string {
		for i, l := range lines {
			lines[i] = tok.ReplaceAllString(l, "${1}=Q")
		}
		return lines
	}
	equal(t, "VM 0", norm(messages(h, 0, "enqueue", "on_queue_ready", "dequeue")), []string{`enqueue_shared_queue(id=Q value="item") -> status=OK`})
	equal(t, "VM 1", norm(messages(h, 1, "on_queue_ready", "dequeue")), []string{
		`on_queue_ready(ctx=1 queue=Q)`,
		`dequeue_shared_queue(id=Q) -> value="item" status=OK`,
		`dequeue_shared_queue(id=Q) -> value="" status=EMPTY`,
	})
}

// TestConformanceRootDoneWaitsForProxyDone: at a reconfiguration the old
// root gets on_done only once its last stream has completed; when it
// returns false, on_delete waits until the guest calls proxy_done (here
// from a tick, which the old root still gets meanwhile).
func TestConformanceRootDoneWaitsForProxyDone(t *testing.T) {
	script := `{"return":{"plugin_done":0},"on":{"configure":[{"call":"set_tick_period_milliseconds","n":10}],"tick":[{"call":"done"}]}}`
	h := conformanceRun(t, script, Options{Transcript: true, Clock: NewVirtualClock(time.Unix(0, 0))})
	old := h.VMs()[0]
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	if err := h.Reconfigure([]byte(script)); err != nil {
		t.Fatal(err)
	}
	rootEnd := func() []string {
		old.mu.Lock()
		defer old.mu.Unlock()
		return grep(old.transcript, "--> proxy_on_done(ctx=1)", "--> proxy_on_delete(ctx=1)", "==> proxy_done")
	}
	equal(t, "after reconfigure, stream open", rootEnd(), []string(nil))
	h.Tick()
	equal(t, "proxy_done before on_done", rootEnd(), []string{"==> proxy_done()"})
	s.RequestBody([]byte("x"), true)
	s.Complete()
	equal(t, "after the last stream", rootEnd(), []string{"==> proxy_done()", "--> proxy_on_done(ctx=1)"})
	h.Tick()
	equal(t, "after proxy_done", rootEnd(), []string{"==> proxy_done()", "--> proxy_on_done(ctx=1)", "==> proxy_done()", "--> proxy_on_delete(ctx=1)"})
}
