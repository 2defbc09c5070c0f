package hostcalls

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// recorder is a VM, plugin and HTTP context that records every call it
// gets, with the current context id at that moment.
type recorder struct {
	events *[]string
	action types.Action
	done   bool // OnPluginDone's answer
	noHTTP bool // NewHttpContext declines
}

func (r *recorder) add(format string, args ...any) {
	*r.events = append(*r.events, fmt.Sprintf(format, args...)+fmt.Sprintf(" @%d", CurrentContextID()))
}

func (r *recorder) OnVMStart(n int) types.OnVMStartStatus { r.add("vm_start(%d)", n); return true }
func (r *recorder) NewPluginContext(id uint32) types.PluginContext {
	r.add("new_plugin(%d)", id)
	return r
}
func (r *recorder) OnPluginStart(n int) types.OnPluginStartStatus {
	r.add("plugin_start(%d)", n)
	return true
}
func (r *recorder) OnPluginDone() bool                    { r.add("plugin_done"); return r.done }
func (r *recorder) OnQueueReady(q uint32)                 { r.add("queue_ready(%d)", q) }
func (r *recorder) OnTick()                               { r.add("tick") }
func (r *recorder) NewTcpContext(uint32) types.TcpContext { return nil }
func (r *recorder) NewHttpContext(id uint32) types.HttpContext {
	r.add("new_http(%d)", id)
	if r.noHTTP {
		return nil
	}
	return r
}
func (r *recorder) OnHttpRequestHeaders(n int, eos bool) types.Action {
	r.add("request_headers(%d,%t)", n, eos)
	return r.action
}
func (r *recorder) OnHttpRequestBody(n int, eos bool) types.Action {
	r.add("request_body(%d,%t)", n, eos)
	return r.action
}
func (r *recorder) OnHttpRequestTrailers(n int) types.Action {
	r.add("request_trailers(%d)", n)
	return r.action
}
func (r *recorder) OnHttpResponseHeaders(n int, eos bool) types.Action {
	r.add("response_headers(%d,%t)", n, eos)
	return r.action
}
func (r *recorder) OnHttpResponseBody(n int, eos bool) types.Action {
	r.add("response_body(%d,%t)", n, eos)
	return r.action
}
func (r *recorder) OnHttpResponseTrailers(n int) types.Action {
	r.add("response_trailers(%d)", n)
	return r.action
}
func (r *recorder) OnHttpStreamDone() { r.add("stream_done") }

// fresh resets the dispatcher and registers a recorder.
func fresh(t *testing.T) (*recorder, *[]string) {
	t.Helper()
	vm.ctx, vm.current = nil, 0
	clear(vm.roots)
	vm.https = streamTable{}
	clear(vm.calls)
	vm.last, vm.lastRoot, vm.free = nil, nil, nil
	events := &[]string{}
	r := &recorder{events: events, action: types.ActionPause, done: true}
	SetVMContext(r)
	t.Cleanup(func() { vm.ctx = nil })
	return r, events
}

func TestDispatchStreamEndOrders(t *testing.T) {
	tests := []struct {
		name string
		end  func(id uint32)
	}{
		{"envoy: log, done, delete", func(id uint32) { onLog(id); onDone(id); onDelete(id) }},
		{"spec: done, log, delete", func(id uint32) { onDone(id); onLog(id); onDelete(id) }},
		{"proxytest: log only", func(id uint32) { onLog(id) }},
		{"no log: done, delete", func(id uint32) { onDone(id); onDelete(id) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, events := fresh(t)
			onContextCreate(1, 0)
			if !onVMStart(1, 7) || !onConfigure(1, 9) {
				t.Fatal("start or configure failed")
			}
			onContextCreate(2, 1)
			if a := onRequestHeaders(2, 3, false); a != types.ActionPause {
				t.Errorf("onRequestHeaders = %v, want the context's Pause", a)
			}
			onRequestBody(2, 10, true)
			onRequestTrailers(2, 1)
			onResponseHeaders(2, 4, false)
			onResponseBody(2, 20, true)
			onResponseTrailers(2, 0)
			tt.end(2)
			want := []string{
				"new_plugin(1) @1", "vm_start(7) @1", "plugin_start(9) @1", "new_http(2) @2",
				"request_headers(3,false) @2", "request_body(10,true) @2", "request_trailers(1) @2",
				"response_headers(4,false) @2", "response_body(20,true) @2", "response_trailers(0) @2",
				"stream_done @2",
			}
			if !slices.Equal(*events, want) {
				t.Errorf("events:\n%q\nwant\n%q", *events, want)
			}
			if CurrentContextID() != 0 {
				t.Errorf("CurrentContextID() = %d after the callbacks, want 0", CurrentContextID())
			}
		})
	}
}

func TestDispatchDeletedAndUnknownStreamsPassThrough(t *testing.T) {
	_, events := fresh(t)
	onContextCreate(1, 0)
	onContextCreate(2, 1)
	onLog(2)
	onDone(2)
	onDelete(2)
	n := len(*events)
	if a := onRequestHeaders(2, 1, true); a != types.ActionContinue {
		t.Errorf("deleted stream: action %v, want Continue", a)
	}
	if a := onResponseBody(42, 1, true); a != types.ActionContinue {
		t.Errorf("unknown stream: action %v, want Continue", a)
	}
	onLog(2)
	onDone(42)
	if len(*events) != n {
		t.Errorf("callbacks of deleted/unknown streams reached the context: %q", (*events)[n:])
	}
	if onConfigure(7, 0) {
		t.Errorf("onConfigure of an unknown root = true, want false")
	}
}

func TestDispatchDeclinedStream(t *testing.T) {
	r, events := fresh(t)
	r.noHTTP = true
	onContextCreate(1, 0)
	onContextCreate(2, 1)
	if a := onRequestHeaders(2, 1, false); a != types.ActionContinue {
		t.Errorf("declined stream: action %v, want Continue", a)
	}
	onLog(2)
	want := []string{"new_plugin(1) @1", "new_http(2) @2"}
	if !slices.Equal(*events, want) {
		t.Errorf("events = %q, want %q", *events, want)
	}
}

func TestDispatchRootCallbacks(t *testing.T) {
	r, events := fresh(t)
	onContextCreate(1, 0)
	onTick(1)
	onQueueReady(1, 5)
	var got []string
	vm.calls[9] = httpCall{root: 1, callback: func(h, b, tr int) {
		got = append(got, fmt.Sprintf("call(%d,%d,%d) @%d", h, b, tr, CurrentContextID()))
	}}
	onHTTPCallResponse(1, 9, 2, 3, 4)
	onHTTPCallResponse(1, 9, 2, 3, 4) // a token answers once
	if want := []string{"call(2,3,4) @1"}; !slices.Equal(got, want) {
		t.Errorf("http call callbacks = %q, want %q", got, want)
	}
	r.done = false
	if onDone(1) {
		t.Errorf("onDone(root) = true, want OnPluginDone's false")
	}
	vm.calls[10] = httpCall{root: 1}
	onDelete(1)
	if len(vm.calls) != 0 || len(vm.roots) != 0 {
		t.Errorf("onDelete(root) left calls %v roots %v", vm.calls, vm.roots)
	}
	want := []string{"new_plugin(1) @1", "tick @1", "queue_ready(5) @1", "plugin_done @1"}
	if !slices.Equal(*events, want) {
		t.Errorf("events = %q, want %q", *events, want)
	}
}

func TestDispatchReentrantCallbackRestoresCurrent(t *testing.T) {
	_, _ = fresh(t)
	onContextCreate(1, 0)
	onContextCreate(2, 1)
	prev := enter(2)
	onQueueReady(1, 0) // a host that calls back from inside a host call
	if CurrentContextID() != 2 {
		t.Errorf("CurrentContextID() = %d after a nested callback, want 2", CurrentContextID())
	}
	leave(prev)
	if rootOf(2) != 1 || rootOf(1) != 1 || rootOf(3) != 0 {
		t.Errorf("rootOf = %d %d %d, want 1 1 0", rootOf(2), rootOf(1), rootOf(3))
	}
}

func TestDispatchWithoutVMContext(t *testing.T) {
	fresh(t)
	vm.ctx = nil
	onContextCreate(1, 0)
	if !onVMStart(1, 0) || !onConfigure(1, 0) {
		t.Errorf("the default contexts must start")
	}
	onContextCreate(2, 1)
	if a := onRequestHeaders(2, 0, true); a != types.ActionContinue {
		t.Errorf("default stream action %v, want Continue", a)
	}
}

// TestNativeWrappersAreUnimplemented checks the documented native
// behaviour: every wrapper reports types.ErrorUnimplemented.
func TestNativeWrappersAreUnimplemented(t *testing.T) {
	errs := map[string]error{}
	_, errs["GetHttpRequestHeader"] = GetHttpRequestHeader(":path")
	_, errs["GetHttpResponseHeaders"] = GetHttpResponseHeaders()
	errs["SetHttpRequestHeaders"] = SetHttpRequestHeaders([][2]string{{"a", "b"}})
	_, errs["GetHttpRequestBody"] = GetHttpRequestBody(0, 10)
	errs["ReplaceHttpResponseBody"] = ReplaceHttpResponseBody([]byte("x"))
	_, _, errs["GetSharedData"] = GetSharedData("k")
	errs["SetSharedData"] = SetSharedData("k", nil, 0)
	_, errs["RegisterSharedQueue"] = RegisterSharedQueue("q")
	_, errs["DequeueSharedQueue"] = DequeueSharedQueue(1)
	errs["DefineCounterMetric"] = DefineCounterMetric("c").Increment(1)
	_, errs["GetProperty"] = GetProperty([]string{"a"})
	errs["SendHttpResponse"] = SendHttpResponse(200, nil, nil, -1)
	_, errs["DispatchHttpCall"] = DispatchHttpCall("c", nil, nil, nil, 0, nil)
	errs["ResumeHttpRequest"] = ResumeHttpRequest()
	errs["SetEffectiveContext"] = SetEffectiveContext(1)
	_, _, errs["GetStatus"] = GetStatus()
	errs["PluginDone"] = PluginDone()
	_, errs["GetLogLevel"] = GetLogLevel()
	errs["SetTickPeriodMilliSeconds"] = SetTickPeriodMilliSeconds(1)
	_, errs["GetPluginConfiguration"] = GetPluginConfiguration()
	for name, err := range errs {
		if err != types.ErrorUnimplemented {
			t.Errorf("%s: %v, want types.ErrorUnimplemented", name, err)
		}
	}
	LogInfof("native %s", "logging is a no-op") // must not panic
	if err := (Counter{}).Increment(1); err != types.ErrorStatusNotFound {
		t.Errorf("zero Counter.Increment = %v, want ErrorStatusNotFound", err)
	}
}

// streamCtx is an HTTP context of its own per stream that records its
// request headers and its deletion.
type streamCtx struct {
	types.DefaultHttpContext
	id     uint32
	events *[]string
}

func (s *streamCtx) OnHttpRequestHeaders(n int, _ bool) types.Action {
	*s.events = append(*s.events, fmt.Sprintf("headers(%d) ctx %d @%d", n, s.id, CurrentContextID()))
	return types.ActionContinue
}
func (s *streamCtx) OnHttpStreamDone() {
	*s.events = append(*s.events, fmt.Sprintf("done ctx %d", s.id))
}

// streamVM gives every stream its own streamCtx.
type streamVM struct {
	types.DefaultVMContext
	types.DefaultPluginContext
	events *[]string
}

func (v *streamVM) NewPluginContext(uint32) types.PluginContext { return v }
func (v *streamVM) NewHttpContext(id uint32) types.HttpContext {
	return &streamCtx{id: id, events: v.events}
}
func (v *streamVM) DeleteHttpContext(ctx types.HttpContext) {
	*v.events = append(*v.events, fmt.Sprintf("delete ctx %d @%d", ctx.(*streamCtx).id, CurrentContextID()))
}

// TestDispatchInterleavedStreamsAndDelete checks that the remembered
// stream entry never sends a callback to another stream's context, that
// DeleteHttpContext runs once per stream, at proxy_on_delete, after which
// nothing reaches the context, and that a deleted entry serves the next
// stream.
func TestDispatchInterleavedStreamsAndDelete(t *testing.T) {
	fresh(t)
	events := &[]string{}
	SetVMContext(&streamVM{events: events})
	onContextCreate(1, 0)
	onContextCreate(2, 1)
	onContextCreate(3, 1)
	onRequestHeaders(2, 1, false)
	onRequestHeaders(3, 2, false)
	onRequestHeaders(2, 3, false)
	onLog(2)
	onDone(2)
	onDelete(2)
	onRequestHeaders(2, 4, false) // deleted: reaches nothing
	onDelete(2)                   // twice: nothing more
	onContextCreate(4, 1)         // takes the entry stream 2 left
	onRequestHeaders(4, 5, false)
	onRequestHeaders(3, 6, false)
	onDelete(3) // without log or done: deleted all the same
	want := []string{
		"headers(1) ctx 2 @2", "headers(2) ctx 3 @3", "headers(3) ctx 2 @2",
		"done ctx 2", "delete ctx 2 @0",
		"headers(5) ctx 4 @4", "headers(6) ctx 3 @3", "delete ctx 3 @0",
	}
	if !slices.Equal(*events, want) {
		t.Errorf("events:\n%q\nwant\n%q", *events, want)
	}
	if vm.https.len() != 1 || rootOf(4) != 1 || rootOf(2) != 0 || rootOf(3) != 0 {
		t.Errorf("streams left %d, rootOf(4, 2, 3) = %d %d %d, want 1 stream and 1 0 0", vm.https.len(), rootOf(4), rootOf(2), rootOf(3))
	}
	if len(vm.free) != 1 {
		t.Errorf("%d deleted entries kept, want 1 (stream 3's)", len(vm.free))
	}
}

// taggedRoot is a plugin context that names its root in the events of
// its streams.
type taggedRoot struct {
	types.DefaultPluginContext
	id     uint32
	events *[]string
}

func (r *taggedRoot) OnTick() { *r.events = append(*r.events, fmt.Sprintf("tick root %d", r.id)) }
func (r *taggedRoot) NewHttpContext(id uint32) types.HttpContext {
	*r.events = append(*r.events, fmt.Sprintf("new stream %d of root %d", id, r.id))
	return &streamCtx{id: id, events: r.events}
}

type taggedVM struct {
	types.DefaultVMContext
	events *[]string
}

func (v *taggedVM) NewPluginContext(id uint32) types.PluginContext {
	return &taggedRoot{id: id, events: v.events}
}

// TestDispatchTwoRoots checks that with two roots (a reconfiguration runs
// the old and the new side by side) every stream and tick reaches its own
// root, also after one of them is deleted.
func TestDispatchTwoRoots(t *testing.T) {
	fresh(t)
	events := &[]string{}
	SetVMContext(&taggedVM{events: events})
	onContextCreate(1, 0)
	onContextCreate(2, 0)
	onContextCreate(3, 1)
	onContextCreate(4, 2)
	onTick(1)
	onTick(2)
	onContextCreate(5, 1)
	onDelete(1)
	onTick(1) // deleted: reaches nothing
	onContextCreate(6, 1)
	onContextCreate(7, 2)
	onTick(2)
	want := []string{
		"new stream 3 of root 1", "new stream 4 of root 2", "tick root 1", "tick root 2",
		"new stream 5 of root 1", "new stream 7 of root 2", "tick root 2",
	}
	if !slices.Equal(*events, want) {
		t.Errorf("events:\n%q\nwant\n%q", *events, want)
	}
	if rootOf(3) != 1 || rootOf(4) != 2 || rootOf(1) != 0 || rootOf(2) != 2 {
		t.Errorf("rootOf(3, 4, 1, 2) = %d %d %d %d, want 1 2 0 2", rootOf(3), rootOf(4), rootOf(1), rootOf(2))
	}
}
