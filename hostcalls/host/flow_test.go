package host

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// Holding a request at the gateway and dispatching it later (flow control,
// FLOW-NOTES.md): the conformance module holds the body with
// StopIterationAndBuffer and a tick or on_queue_ready resumes, rewrites or
// answers it. Each test pins one thing Envoy refuses (or ignores) that a
// laxer host would let through, next to the case Envoy allows.

// postReq is a request with a 4-byte body.
var postReq = [][2]string{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "example"}, {"content-length", "4"}}

// flowHost runs the conformance module with script on a virtual clock
// (ticks only when the test says so).
func flowHost(t *testing.T, script string, opts Options) *Host {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = NewVirtualClock(time.Unix(1700000000, 0))
	}
	return conformanceRun(t, script, opts)
}

// tickVM runs proxy_on_tick on VM i alone (its timer must be armed).
func tickVM(t *testing.T, h *Host, i int) {
	t.Helper()
	vm := h.VMs()[i]
	vm.mu.Lock()
	vm.nextTick = h.Now()
	vm.mu.Unlock()
	if !vm.tickIfDue() {
		t.Fatalf("VM %d did not tick (timer not armed)", i)
	}
}

// since returns the lines of VM vm's log after the first n, that start
// with one of prefixes.
func since(h *Host, vm, n int, prefixes ...string) []string {
	all := messages(h, vm)
	var out []string
	for _, l := range all[min(n, len(all)):] {
		for _, p := range prefixes {
			if len(l) >= len(p) && l[:len(p)] == p {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// holdAndResume holds every request body and, from a tick, rewrites and
// resumes stream 2 of the VM; it also tries to change the request headers.
const holdAndResume = `{"on":{
	"configure":[{"call":"set_tick_period_milliseconds","n":10}],
	"request_headers":[{"call":"remove_header_map_value","map":"request_headers","key":"content-length"}],
	"tick":[{"call":"set_effective_context","ctx":2},
	        {"call":"get_buffer_bytes","buffer":"request_body","start":0},
	        {"call":"set_buffer_bytes","buffer":"request_body","start":0,"size":2147483647,"value":"{\"priority\":1}"},
	        {"call":"replace_header_map_value","map":"request_headers","key":"x-fairshare","value":"1"},
	        {"call":"continue_stream","stream":"request"},
	        {"call":"get_buffer_bytes","buffer":"request_body","start":0}]},
	"return":{"request_body":1}}`

var tickLines = []string{"on_tick", "set_effective_context", "get_buffer_bytes", "set_buffer_bytes", "replace_header_map_value", "continue_stream"}

// TestHeldRequestResumedFromTick: a body held by StopIterationAndBuffer is
// read, replaced and resumed from a later tick with the stream effective;
// the continue takes effect when the tick returns, so the rewrite made in
// the same tick is what goes upstream. Headers that went through on
// on_request_headers' Continue stay frozen (Envoy: BAD_ARGUMENT), so
// content-length had to go there. Once resumed, the body is no longer
// writable (BAD_ARGUMENT; reads are empty), and once the stream has ended
// its id is unknown (BAD_ARGUMENT) and the calls fall back to the root.
func TestHeldRequestResumedFromTick(t *testing.T) {
	h := flowHost(t, holdAndResume, Options{Transcript: true})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(postReq, false), Continue)
	equal(t, "chunk 1", s.RequestBody([]byte("ab"), false), StopIterationAndBuffer)
	equal(t, "chunk 2", s.RequestBody([]byte("cd"), true), StopIterationAndBuffer)
	equal(t, "held: nothing upstream", []any{string(s.ForwardedRequestBody()), s.RequestDone()}, []any{"", false})

	n := len(messages(h, 0))
	tickVM(t, h, 0)
	equal(t, "tick 1", since(h, 0, n, tickLines...), []string{
		`on_tick(ctx=1)`,
		`set_effective_context(ctx=2) -> status=OK`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="abcd" status=OK`,
		`set_buffer_bytes(buffer=request_body start=0 size=2147483647 value="{\"priority\":1}") -> status=OK`,
		`replace_header_map_value(map=request_headers key="x-fairshare" value="1") -> status=BAD_ARGUMENT`,
		`continue_stream(stream=request) -> status=OK`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="{\"priority\":1}" status=OK`,
	})
	equal(t, "upstream body", string(s.ForwardedRequestBody()), `{"priority":1}`)
	equal(t, "request done", s.RequestDone(), true)
	equal(t, "headers upstream", s.RequestHeaderMap(), [][2]string{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "example"}})

	n = len(messages(h, 0))
	tickVM(t, h, 0)
	equal(t, "tick 2 (resumed)", since(h, 0, n, tickLines...), []string{
		`on_tick(ctx=1)`,
		`set_effective_context(ctx=2) -> status=OK`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="" status=OK`,
		`set_buffer_bytes(buffer=request_body start=0 size=2147483647 value="{\"priority\":1}") -> status=BAD_ARGUMENT`,
		`replace_header_map_value(map=request_headers key="x-fairshare" value="1") -> status=BAD_ARGUMENT`,
		`continue_stream(stream=request) -> status=OK`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="" status=OK`,
	})
	equal(t, "upstream body unchanged", string(s.ForwardedRequestBody()), `{"priority":1}`)

	s.Complete()
	n = len(messages(h, 0))
	tickVM(t, h, 0)
	equal(t, "tick 3 (ended)", since(h, 0, n, tickLines...), []string{
		`on_tick(ctx=1)`,
		`set_effective_context(ctx=2) -> status=BAD_ARGUMENT`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="" status=OK`,
		`set_buffer_bytes(buffer=request_body start=0 size=2147483647 value="{\"priority\":1}") -> status=BAD_ARGUMENT`,
		`replace_header_map_value(map=request_headers key="x-fairshare" value="1") -> status=BAD_ARGUMENT`,
		`continue_stream(stream=request) -> status=OK`,
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="" status=OK`,
	})
	equal(t, "transcript notes", grep(h.Transcript(0), "nothing resumed"), []string{"<== OK (no HTTP stream effective: nothing resumed)"})
}

// TestBodyNotBufferedFromTick: from a tick, a stream whose body was passed
// on (its body callback returned Continue) or has not arrived has no
// writable body: Envoy's getBuffer hands out an empty read-only buffer
// (reads OK and empty, writes BAD_ARGUMENT), and continue_stream resumes
// nothing.
func TestBodyNotBufferedFromTick(t *testing.T) {
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"tick":[{"call":"set_effective_context","ctx":2},
		        {"call":"get_buffer_status","buffer":"request_body"},
		        {"call":"set_buffer_bytes","buffer":"request_body","start":0,"size":2147483647,"value":"new"},
		        {"call":"continue_stream","stream":"request"}]}}`, Options{})
	s := h.NewStream(0)
	s.RequestHeaders(postReq, false)
	for _, step := range []struct {
		name string
		body string
	}{{"before the body", ""}, {"after the body passed", "abcd"}} {
		if step.body != "" {
			equal(t, "body", s.RequestBody([]byte(step.body), true), Continue)
		}
		n := len(messages(h, 0))
		tickVM(t, h, 0)
		equal(t, step.name, since(h, 0, n, "set_", "get_", "continue"), []string{
			`set_effective_context(ctx=2) -> status=OK`,
			`get_buffer_status(buffer=request_body) -> size=0 flags=0 status=OK`,
			`set_buffer_bytes(buffer=request_body start=0 size=2147483647 value="new") -> status=BAD_ARGUMENT`,
			`continue_stream(stream=request) -> status=OK`,
		})
	}
	equal(t, "upstream body", string(s.ForwardedRequestBody()), "abcd")
}

// TestStreamOfAnotherVM: context ids are per VM; a tick on VM 1 cannot
// reach the stream VM 0 holds (set_effective_context BAD_ARGUMENT,
// continue then acts on VM 1's root and resumes nothing); VM 0's own tick
// can.
func TestStreamOfAnotherVM(t *testing.T) {
	h := flowHost(t, holdAndResume, Options{VMs: 2})
	s := h.NewStream(0)
	s.RequestHeaders(postReq, false)
	s.RequestBody([]byte("abcd"), true)
	tickVM(t, h, 1)
	equal(t, "VM 1", messages(h, 1, "set_effective_context", "continue_stream"), []string{
		`set_effective_context(ctx=2) -> status=BAD_ARGUMENT`,
		`continue_stream(stream=request) -> status=OK`,
	})
	equal(t, "still held", s.RequestDone(), false)
	tickVM(t, h, 0)
	equal(t, "resumed by its own VM", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{true, `{"priority":1}`})
}

// TestContinueInOwnCallbackIsAHostError: a module that calls
// proxy_continue_stream from the body callback that returns
// StopIterationAndBuffer is caught: the call answers OK, as cpp-host
// does, but it is a host error (HostErrors: ErrContinueInOwnCallback,
// and a critical log line) because Envoy asserts on it in a debug build;
// as in a release build it resumes nothing, so the request stays held
// with no continue pending, until a later callback (here a tick) resumes
// it. The same call in on_request_headers returning Continue is caught
// too (the filter is not stopped: the assertion fires), and the request
// goes on with the callback's Continue.
func TestContinueInOwnCallbackIsAHostError(t *testing.T) {
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"request_body":[{"call":"continue_stream","stream":"request"}],
		"tick":[{"call":"set_effective_context","ctx":2},{"call":"continue_stream","stream":"request"}]},
		"return":{"request_body":1}}`, Options{Transcript: true})
	s := h.NewStream(0)
	s.RequestHeaders(postReq, false)
	equal(t, "no host error before", len(h.HostErrors()), 0)
	equal(t, "body", s.RequestBody([]byte("abcd"), true), StopIterationAndBuffer)
	equal(t, "log", messages(h, 0, "continue_stream"), []string{`continue_stream(stream=request) -> status=OK`})
	equal(t, "stuck", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{false, ""})
	errs := h.HostErrors()
	if len(errs) != 1 || !errors.Is(errs[0], ErrContinueInOwnCallback) {
		t.Fatalf("HostErrors = %v, want one ErrContinueInOwnCallback", errs)
	}
	critical := 0
	for _, l := range h.Logs() {
		if l.Level == hostcalls.LogLevelCritical && strings.Contains(l.Message, "Attempting to continue iteration while the IterationState is already Continue") {
			critical++
		}
	}
	equal(t, "critical log lines", critical, 1)
	equal(t, "transcript note", grep(h.Transcript(0), "own callback"), []string{"(proxy_continue_stream during the stream's own callback: host error, dropped)"})
	tickVM(t, h, 0)
	equal(t, "resumed from the tick", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{true, "abcd"})
	equal(t, "the tick's continue is no host error", len(h.HostErrors()), 1)

	h = flowHost(t, `{"on":{"request_headers":[{"call":"continue_stream","stream":"request"}]}}`, Options{})
	s = h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(postReq, false), Continue)
	if errs := h.HostErrors(); len(errs) != 1 || !errors.Is(errs[0], ErrContinueInOwnCallback) {
		t.Fatalf("headers: HostErrors = %v, want one ErrContinueInOwnCallback", errs)
	}
	s.RequestBody([]byte("abcd"), true)
	equal(t, "headers: the request goes on", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{true, "abcd"})
}

// TestLocalReplyFromTick: a held request answered from a tick (429 with
// Retry-After) once the stream is effective; the same call with no
// stream effective answers OK and sends nothing.
func TestLocalReplyFromTick(t *testing.T) {
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"tick":[{"call":"send_local_response","status":429,"details":"queue timeout","body":"busy","pairs":[["retry-after","2"]]},
		        {"call":"set_effective_context","ctx":2},
		        {"call":"send_local_response","status":429,"details":"queue timeout","body":"busy","pairs":[["retry-after","2"]]}]},
		"return":{"request_body":1}}`, Options{Transcript: true})
	s := h.NewStream(0)
	s.RequestHeaders(postReq, false)
	s.RequestBody([]byte("abcd"), true)
	tickVM(t, h, 0)
	equal(t, "log", messages(h, 0, "send_local_response"), []string{
		`send_local_response(status=429 details="queue timeout" body="busy" headers=[["retry-after","2"]] grpc=-1) -> status=OK`,
		`send_local_response(status=429 details="queue timeout" body="busy" headers=[["retry-after","2"]] grpc=-1) -> status=OK`,
	})
	equal(t, "transcript note", grep(h.Transcript(0), "nothing sent"), []string{"<== OK (no HTTP stream effective: nothing sent)"})
	lr := s.LocalReply()
	if lr == nil {
		t.Fatal("no local reply")
	}
	equal(t, "reply", *lr, LocalReply{Status: 429, Details: "queue_timeout", Body: []byte("busy"), Headers: [][2]string{{"retry-after", "2"}}, GRPCStatus: -1})
	equal(t, "nothing upstream", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{false, ""})
}

// TestClientAbortWhileHeld: the client goes away while its request is
// held: on_log, on_done and on_delete run, the context id is gone, and a
// later resume is refused (BAD_ARGUMENT).
func TestClientAbortWhileHeld(t *testing.T) {
	h := flowHost(t, holdAndResume, Options{Transcript: true})
	s := h.NewStream(0)
	s.RequestHeaders(postReq, false)
	s.RequestBody([]byte("abcd"), true)
	s.Reset()
	s.Complete()
	equal(t, "end callbacks", grep(h.Transcript(0), "--> proxy_on_log", "--> proxy_on_done", "--> proxy_on_delete"),
		[]string{"--> proxy_on_log(ctx=2)", "--> proxy_on_done(ctx=2)", "--> proxy_on_delete(ctx=2)"})
	tickVM(t, h, 0)
	equal(t, "resume refused", messages(h, 0, "set_effective_context"), []string{`set_effective_context(ctx=2) -> status=BAD_ARGUMENT`})
	equal(t, "nothing upstream", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{false, ""})
}

// TestHeadersStoppedChangeableFromTick: the other way to hold: stop at the
// headers (StopIteration, run as StopAllIterationAndWatermark). Then the
// headers can still be changed from a tick and the body is held by the
// host, not readable by the filter (reads are empty) until the continue
// delivers it to on_request_body.
func TestHeadersStoppedChangeableFromTick(t *testing.T) {
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"tick":[{"call":"set_effective_context","ctx":2},
		        {"call":"get_buffer_bytes","buffer":"request_body","start":0},
		        {"call":"remove_header_map_value","map":"request_headers","key":"content-length"},
		        {"call":"add_header_map_value","map":"request_headers","key":"x-priority","value":"1"},
		        {"call":"continue_stream","stream":"request"}]},
		"return":{"request_headers":1}}`, Options{})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(postReq, false), StopAllIterationAndWatermark)
	equal(t, "body", s.RequestBody([]byte("abcd"), true), Held)
	tickVM(t, h, 0)
	equal(t, "tick", messages(h, 0, "get_buffer_bytes", "remove_header", "add_header", "on_request_body"), []string{
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="" status=OK`,
		`remove_header_map_value(map=request_headers key="content-length") -> status=OK`,
		`add_header_map_value(map=request_headers key="x-priority" value="1") -> status=OK`,
		`on_request_body(ctx=2 size=4 eos=true)`,
	})
	equal(t, "headers upstream", s.RequestHeaderMap(), [][2]string{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "example"}, {"x-priority", "1"}})
	equal(t, "body upstream", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{true, "abcd"})
}

// TestStreamTypeStatuses: continue_stream and close_stream statuses as
// cpp-host and Envoy give them: DOWNSTREAM is OK (nothing to do for an
// HTTP filter), UPSTREAM is UNIMPLEMENTED for continue and OK for close,
// anything above is BAD_ARGUMENT; with no stream effective both are OK
// and do nothing; send_local_response likewise.
func TestStreamTypeStatuses(t *testing.T) {
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxyContinueStream), envImport(hostcalls.ProxyCloseStream),
		envImport(hostcalls.ProxySendLocalResponse)}, -1, Options{})
	s := h.NewStream(0)
	s.RequestHeaders(postReq, false)
	for _, c := range []struct {
		fn   string
		typ  uint64
		s    *Stream
		want hostcalls.Status
	}{
		{hostcalls.ProxyContinueStream, 2, s, hostcalls.StatusOK},
		{hostcalls.ProxyContinueStream, 3, s, hostcalls.StatusUnimplemented},
		{hostcalls.ProxyContinueStream, 4, s, hostcalls.StatusBadArgument},
		{hostcalls.ProxyContinueStream, 0, nil, hostcalls.StatusOK},
		{hostcalls.ProxyCloseStream, 3, s, hostcalls.StatusOK},
		{hostcalls.ProxyCloseStream, 4, s, hostcalls.StatusBadArgument},
		{hostcalls.ProxyCloseStream, 0, nil, hostcalls.StatusOK},
	} {
		if got := hostcalls.Status(callIn(t, h, c.s, c.fn, c.typ)); got != c.want {
			t.Errorf("%s(%d) with stream %v = %v, want %v", c.fn, c.typ, c.s != nil, got, c.want)
		}
	}
	write(t, mem, 16, []byte("busy"))
	equal(t, "local reply on the root", hostcalls.Status(callIn(t, h, nil, hostcalls.ProxySendLocalResponse, 429, 16, 4, 16, 4, 0, 0, 0xffffffff)), hostcalls.StatusOK)
	equal(t, "stream untouched", []any{s.Ended(), s.LocalReply() == nil}, []any{false, true})
}

// queueTok normalises queue ids (process-wide) in log lines.
var queueTok = regexp.MustCompile(`(id|queue)=\d+`)

func normQueue(lines []string) []string {
	for i, l := range lines {
		lines[i] = queueTok.ReplaceAllString(l, "${1}=Q")
	}
	return lines
}

// TestQueueWakesHoldingVM: every VM registers queue "q" (the last, VM 1,
// owns it); VM 1 holds a request; a request on VM 0 enqueues, and VM 1's
// root gets on_queue_ready — after VM 0's callback returned, never on
// VM 0 — and resumes the held stream from there. An enqueue by VM 1
// itself is delivered after its own callback returns, not inside it.
func TestQueueWakesHoldingVM(t *testing.T) {
	h := flowHost(t, `{"on":{
		"configure":[{"call":"register_shared_queue","name":"q"},{"call":"resolve_shared_queue","vm_id":"","name":"q"}],
		"request_headers":[{"call":"enqueue_shared_queue","name":"q","value":"wake"}],
		"queue_ready":[{"call":"dequeue_shared_queue","name":"q"},
		               {"call":"set_effective_context","ctx":2},
		               {"call":"set_buffer_bytes","buffer":"request_body","start":0,"size":2147483647,"value":"dispatched"},
		               {"call":"continue_stream","stream":"request"}]},
		"return":{"request_body":1}}`, Options{VMs: 2, Transcript: true})
	reg := messages(h, 0, "register_shared_queue", "resolve_shared_queue")
	equal(t, "register and resolve in the own vm_id", normQueue(append([]string(nil), reg...)), []string{
		`register_shared_queue(name="q") -> id=Q status=OK`, `resolve_shared_queue(vm_id="" name="q") -> id=Q status=OK`})
	id := queueTok.FindString(reg[0])[len("id="):]
	equal(t, "same id", queueTok.FindString(reg[1]), "id="+id)

	held := h.NewStream(1)
	held.RequestHeaders(postReq, false) // enqueues: VM 1 wakes with nothing to resume yet
	tr := grep(h.Transcript(1), "--> proxy_on_request_headers", "<-- ", "--> proxy_on_queue_ready")
	equal(t, "on_queue_ready after the callback returned", tr[len(tr)-3:], []string{
		"--> proxy_on_request_headers(ctx=2,headers=4,eos=0)", "<-- 0", "--> proxy_on_queue_ready(root=1,queue=" + id + ")"})
	equal(t, "body", held.RequestBody([]byte("abcd"), true), StopIterationAndBuffer)
	equal(t, "held", held.RequestDone(), false)

	waker := h.NewStream(0)
	waker.RequestHeaders(postReq, true)
	equal(t, "VM 0 never notified", messages(h, 0, "on_queue_ready"), []string(nil))
	equal(t, "VM 1", normQueue(messages(h, 1, "on_queue_ready", "dequeue", "set_effective_context", "set_buffer_bytes")), []string{
		`on_queue_ready(ctx=1 queue=Q)`, // its own enqueue: stream 2's body not there yet
		`dequeue_shared_queue(id=Q) -> value="wake" status=OK`,
		`set_effective_context(ctx=2) -> status=OK`,
		`set_buffer_bytes(buffer=request_body start=0 size=2147483647 value="dispatched") -> status=BAD_ARGUMENT`,
		`on_queue_ready(ctx=1 queue=Q)`, // VM 0's enqueue: stream 2 held

		`dequeue_shared_queue(id=Q) -> value="wake" status=OK`,
		`set_effective_context(ctx=2) -> status=OK`,
		`set_buffer_bytes(buffer=request_body start=0 size=2147483647 value="dispatched") -> status=OK`,
	})
	equal(t, "resumed", []any{held.RequestDone(), string(held.ForwardedRequestBody())}, []any{true, "dispatched"})
}

// TestQueueGoneWithItsVMID: a queue lives while a VM of its vm_id does;
// once the last Host of that vm_id closes, an enqueue with its token from
// another vm_id is NOT_FOUND (cpp-host SharedQueue::deleteByVmId), where a
// lax host would keep accepting items nobody can ever read.
func TestQueueGoneWithItsVMID(t *testing.T) {
	owner := flowHost(t, `{"on":{"configure":[{"call":"register_shared_queue","name":"q"}]}}`, Options{})
	id := queueTok.FindString(messages(owner, 0, "register_shared_queue")[0])[len("id="):]
	other := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"tick":[{"call":"enqueue_shared_queue","id":`+id+`,"value":"x"}]}}`, Options{})
	tickVM(t, other, 0)
	if err := owner.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	tickVM(t, other, 0)
	equal(t, "enqueues", messages(other, 0, "enqueue_shared_queue"), []string{
		`enqueue_shared_queue(id=` + id + ` value="x") -> status=OK`,
		`enqueue_shared_queue(id=` + id + ` value="x") -> status=NOT_FOUND`,
	})
}

// TestRetiredVMKeepsItsHeldRequests: after a reconfiguration the old VM
// takes no new streams, but its root context lives on while streams are
// open on it (in Envoy each stream holds the plugin handle whose release
// calls on_done), so its ticks still dispatch the request it holds. Once
// its last stream completes, on_done runs: answered true, on_delete
// follows and the old VM never ticks again; answered false, the root
// keeps ticking until the guest calls proxy_done.
func TestRetiredVMKeepsItsHeldRequests(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pluginDone string
		ticksAfter []int // h.Tick() after the held stream completed, twice
	}{
		{"on_done false", `,"plugin_done":0`, []int{2, 1}},
		{"on_done true", ``, []int{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := `{"on":{
				"configure":[{"call":"set_tick_period_milliseconds","n":10}],
				"tick":[{"call":"set_effective_context","ctx":2},{"call":"continue_stream","stream":"request"},{"call":"done"}]},
				"return":{"request_body":1` + tc.pluginDone + `}}`
			h := flowHost(t, script, Options{Transcript: true})
			old := h.VMs()[0]
			rootEnd := func() []string {
				old.mu.Lock()
				defer old.mu.Unlock()
				return grep(old.transcript, "--> proxy_on_done(ctx=1)", "--> proxy_on_delete(ctx=1)")
			}
			s := h.NewStream(0)
			s.RequestHeaders(postReq, false)
			s.RequestBody([]byte("abcd"), true)
			if err := h.Reconfigure([]byte(script)); err != nil {
				t.Fatal(err)
			}
			equal(t, "old root still alive", rootEnd(), []string(nil))
			equal(t, "ticks: the new VM and the old one", h.Tick(), 2)
			equal(t, "resumed by the old VM", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{true, "abcd"})
			s.Complete()
			equal(t, "on_done once the last stream completed", rootEnd()[:1], []string{"--> proxy_on_done(ctx=1)"})
			equal(t, "ticks after", []int{h.Tick(), h.Tick()}, tc.ticksAfter)
			equal(t, "old root deleted", rootEnd(), []string{"--> proxy_on_done(ctx=1)", "--> proxy_on_delete(ctx=1)"})
			equal(t, "old instance closed", old.closed, true)
		})
	}
}

// TestResumeFromAnotherStreamsCallback: Envoy lets any callback of the VM
// select a live stream, not only the root's: a request arriving on the
// same VM can dispatch the one held before it. The selection lasts for
// that callback only.
func TestResumeFromAnotherStreamsCallback(t *testing.T) {
	h := flowHost(t, `{"on":{
		"request_headers":[{"call":"set_effective_context","ctx":2},{"call":"continue_stream","stream":"request"}],
		"request_body":[{"call":"get_buffer_bytes","buffer":"request_body","start":0}]},
		"return":{"request_body":1}}`, Options{})
	held := h.NewStream(0)
	held.RequestHeaders(postReq, false)
	held.RequestBody([]byte("abcd"), true)
	equal(t, "held", held.RequestDone(), false)
	next := h.NewStream(0)
	next.RequestHeaders(postReq, false)
	equal(t, "dispatched by the next request", []any{held.RequestDone(), string(held.ForwardedRequestBody())}, []any{true, "abcd"})
	next.RequestBody([]byte("efgh"), true)
	equal(t, "the next request's own body callback sees its own body", messages(h, 0, "get_buffer_bytes")[1],
		`get_buffer_bytes(buffer=request_body start=0 max=max) -> bytes="efgh" status=OK`)
	equal(t, "and it is held", next.RequestDone(), false)
}

// TestBodyWritableInTrailersOnlyWhenHeld: in the trailers callback the
// body can be changed only if the body callbacks held it
// (StopIterationAndBuffer); a body already passed on is read-only there
// (Envoy's getBuffer hands out an empty read-only buffer).
func TestBodyWritableInTrailersOnlyWhenHeld(t *testing.T) {
	for _, tc := range []struct {
		name, ret, status, upstream string
	}{
		{"passed on", `0`, "BAD_ARGUMENT", "abcd"},
		{"held", `1`, "OK", "abcdX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := flowHost(t, `{"on":{"request_trailers":[{"call":"set_buffer_bytes","buffer":"request_body","start":2147483647,"size":0,"value":"X"}]},
				"return":{"request_body":`+tc.ret+`}}`, Options{})
			s := h.NewStream(0)
			s.RequestHeaders(postReq, false)
			s.RequestBody([]byte("abcd"), false)
			s.RequestTrailers([][2]string{{"x-t", "1"}})
			equal(t, "set in trailers", messages(h, 0, "set_buffer_bytes"), []string{
				`set_buffer_bytes(buffer=request_body start=2147483647 size=0 value="X") -> status=` + tc.status})
			equal(t, "upstream", string(s.ForwardedRequestBody()), tc.upstream)
		})
	}
}

// holdAtHeaders stops at the headers (StopIteration), changes the request
// headers in the body callback, holds the body (StopIterationAndBuffer)
// and, from a tick, rewrites it and continues stream 2.
const holdAtHeaders = `{"on":{
	"configure":[{"call":"set_tick_period_milliseconds","n":10}],
	"request_body":[{"call":"remove_header_map_value","map":"request_headers","key":"content-length"},
	                {"call":"add_header_map_value","map":"request_headers","key":"x-priority","value":"1"}],
	"tick":[{"call":"set_effective_context","ctx":2},
	        {"call":"add_header_map_value","map":"request_headers","key":"x-at-dispatch","value":"1"},
	        {"call":"set_buffer_bytes","buffer":"request_body","start":0,"size":2147483647,"value":"ABCDEF"},
	        {"call":"continue_stream","stream":"request"}]},
	"return":{"request_headers":1,"request_body":1}}`

// TestHeadersStopIterationAllowed: with AllowOnHeadersStopIteration (Envoy
// ≥ 1.35 allow_on_headers_stop_iteration) a headers StopIteration is real:
// the body callbacks are delivered while nothing has gone upstream, the
// headers stay changeable there and from a tick, and the continue
// releases the headers and the buffered (rewritten) body together.
func TestHeadersStopIterationAllowed(t *testing.T) {
	h := flowHost(t, holdAtHeaders, Options{AllowOnHeadersStopIteration: true})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(postReq, false), StopIteration)
	equal(t, "body chunk", s.RequestBody([]byte("ab"), false), StopIterationAndBuffer)
	equal(t, "body end", s.RequestBody([]byte("cd"), true), StopIterationAndBuffer)
	equal(t, "body callbacks", messages(h, 0, "on_request_body", "add_header"), []string{
		`on_request_body(ctx=2 size=2 eos=false)`,
		`add_header_map_value(map=request_headers key="x-priority" value="1") -> status=OK`,
		`on_request_body(ctx=2 size=4 eos=true)`,
		`add_header_map_value(map=request_headers key="x-priority" value="1") -> status=OK`,
	})
	equal(t, "nothing upstream while held", []any{s.RequestHeaderMap(), s.ForwardedRequestBody(), s.RequestDone()}, []any{[][2]string(nil), []byte(nil), false})
	tickVM(t, h, 0)
	equal(t, "tick", since(h, 0, 0, "add_header_map_value(map=request_headers key=\"x-at", "continue_stream"), []string{
		`add_header_map_value(map=request_headers key="x-at-dispatch" value="1") -> status=OK`,
		`continue_stream(stream=request) -> status=OK`,
	})
	equal(t, "headers upstream", s.RequestHeaderMap(), [][2]string{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "example"},
		{"x-priority", "1"}, {"x-priority", "1"}, {"x-at-dispatch", "1"}})
	equal(t, "body upstream", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{true, "ABCDEF"})
}

// TestHeadersStopIterationContinuedFromBody: under
// AllowOnHeadersStopIteration a Continue from the body callback at the end
// of stream sends the stopped headers and the whole body at once, and the
// headers freeze then (BAD_ARGUMENT from a later tick).
func TestHeadersStopIterationContinuedFromBody(t *testing.T) {
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"request_body":[{"call":"add_header_map_value","map":"request_headers","key":"x-priority","value":"1"}],
		"tick":[{"call":"set_effective_context","ctx":2},
		        {"call":"add_header_map_value","map":"request_headers","key":"x-late","value":"1"}]},
		"return":{"request_headers":1}}`, Options{AllowOnHeadersStopIteration: true})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(postReq, false), StopIteration)
	equal(t, "headers held", s.RequestHeaderMap(), [][2]string(nil))
	equal(t, "body", s.RequestBody([]byte("abcd"), true), Continue)
	equal(t, "headers upstream", s.RequestHeaderMap(), [][2]string{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "example"},
		{"content-length", "4"}, {"x-priority", "1"}})
	equal(t, "body upstream", []any{s.RequestDone(), string(s.ForwardedRequestBody())}, []any{true, "abcd"})
	tickVM(t, h, 0)
	equal(t, "frozen", since(h, 0, 0, `add_header_map_value(map=request_headers key="x-late"`), []string{
		`add_header_map_value(map=request_headers key="x-late" value="1") -> status=BAD_ARGUMENT`})
}

// TestHeadersStopIterationConvertedByDefault: without the option the same
// module's StopIteration is StopAllIterationAndWatermark: no body callback
// until continue_stream (here none ever comes), the body held by the host.
func TestHeadersStopIterationConvertedByDefault(t *testing.T) {
	h := flowHost(t, `{"return":{"request_headers":1,"request_body":1}}`, Options{})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(postReq, false), StopAllIterationAndWatermark)
	equal(t, "body", s.RequestBody([]byte("abcd"), true), Held)
	equal(t, "no body callback", messages(h, 0, "on_request_body"), []string(nil))
}
