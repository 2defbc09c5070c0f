package host

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// TestResumedHeadersDoNotEndTheRequestEarly: the filter stops the request
// at headers (an http_call) while the whole body arrives; when it resumes,
// the headers go on but the end of stream must not: the held body reaches
// on_request_body, which stops it (StopIterationNoBuffer), so nothing of
// the body and no end of stream has gone upstream (Envoy keeps the
// upstream request open until the filter continues).
func TestResumedHeadersDoNotEndTheRequestEarly(t *testing.T) {
	// The auth answer waits until the body has arrived: otherwise the
	// stream could resume before the body and the body would reach the
	// filter directly (a different case).
	bodyIn := make(chan struct{})
	release := sync.OnceFunc(func() { close(bodyIn) })
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-bodyIn
		w.WriteHeader(204)
	}))
	t.Cleanup(auth.Close)
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("http_call=auth\nreq_body=nobuffer"),
		Clusters: map[string]string{"auth": auth.URL}})
	t.Cleanup(release) // runs first: a failed check must not leave the call hanging
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(getReq, false), StopAllIterationAndWatermark)
	equal(t, "body", s.RequestBody([]byte("abc"), true), Held)
	release()
	h.Wait()
	equal(t, "body callbacks", messages(h, 0, "request_body"), []string{"request_body size=3 eos=true body=abc"})
	if s.RequestHeaderMap() == nil {
		t.Fatal("the headers were not passed on after proxy_continue_stream")
	}
	equal(t, "request done", s.RequestDone(), false)
	equal(t, "forwarded body", string(s.ForwardedRequestBody()), "")
	s.Complete()
}

// TestPickStreamFailedVMNotReplaceable: when a failed VM cannot be
// replaced (the new VM's on_configure fails), PickStream opens the
// stream on the failed VM, which answers 503 wasm_fail_stream (fail
// closed), as replaceFailed documents, instead of retrying forever. (The
// proxy writes that reply as it is: TestHandlerLocalReply.)
func TestPickStreamFailedVMNotReplaceable(t *testing.T) {
	h := start(t, rawGuestPkg, Options{})
	if _, err := h.Call(0, "crash"); err == nil {
		t.Fatal("crash did not trap")
	}
	h.mu.Lock()
	h.opts.PluginConfig = []byte("fail=1") // the replacement's on_configure fails
	h.mu.Unlock()
	s := h.PickStream()
	s.RequestHeaders([][2]string{{":authority", "127.0.0.1:1"}, {":path", "/"}, {":method", "GET"}, {":scheme", "http"}}, true)
	s.Complete()
	lr := s.LocalReply()
	if lr == nil {
		t.Fatal("no local reply")
	}
	equal(t, "status", lr.Status, 503)
	equal(t, "body", strings.TrimSpace(string(lr.Body)), "wasm_fail_stream")
}

// TestPrometheusNameLikeEnvoy: Envoy's Prometheus output replaces every
// character outside [a-zA-Z0-9_] (':' too) with '_', and does not export
// a custom-namespace metric whose sanitised name is empty or starts with
// a digit.
func TestPrometheusNameLikeEnvoy(t *testing.T) {
	for name, want := range map[string]string{
		"app.requests":    "app_requests",
		"fair:share-q":    "fair_share_q",
		"_x9":             "_x9",
		"9lives":          "",
		"":                "",
		"team.a.inflíght": "team_a_infl_ght",
	} {
		equal(t, "PrometheusName("+name+")", PrometheusName(name), want)
	}
	h, mem := asmHost(t, []asmImport{envImport(hostcalls.ProxyDefineMetric), envImport(hostcalls.ProxyIncrementMetric)}, -1, Options{})
	write(t, mem, 16, []byte("9lives"))
	equal(t, "define", callIn(t, h, nil, hostcalls.ProxyDefineMetric, 0, 16, 6, 100), uint32(0))
	var b strings.Builder
	h.WritePrometheus(&b)
	if strings.Contains(b.String(), "lives") {
		t.Errorf("WritePrometheus exported a name starting with a digit:\n%s", b.String())
	}
}

// TestSharedDataCASWrapSkipsZero: the one CAS counter of a vm_id wraps
// from 0xffffffff to 1, never 0 (cas 0 means "unconditional").
func TestSharedDataCASWrapSkipsZero(t *testing.T) {
	h := start(t, rawGuestPkg, Options{})
	h.store.mu.Lock()
	h.store.cas = 0xfffffffe
	h.store.mu.Unlock()
	equal(t, "set a", h.SetSharedData("a", []byte("1"), 0), hostcalls.StatusOK)
	equal(t, "set b", h.SetSharedData("b", []byte("1"), 0), hostcalls.StatusOK)
	_, ca, _ := h.SharedData("a")
	_, cb, _ := h.SharedData("b")
	equal(t, "cas before and after the wrap", []uint32{ca, cb}, []uint32{0xffffffff, 1})
	equal(t, "CAS set after the wrap", h.SetSharedData("b", []byte("2"), 1), hostcalls.StatusOK)
}

// TestLocalReplyAfterResponseHeaders: send_local_response from
// on_response_body once the response headers went to the client cannot
// be sent: Envoy resets the stream; nothing more of the body is passed
// on; the end callbacks run as for any stream.
func TestLocalReplyAfterResponseHeaders(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("local_reply=resp_body"), Transcript: true})
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/a"}, {":authority", "x"}}, true)
	equal(t, "response headers", s.ResponseHeaders([][2]string{{":status", "200"}}, false), Continue)
	equal(t, "response body", s.ResponseBody([]byte("data"), false), Ended)
	equal(t, "local reply", s.LocalReply(), (*LocalReply)(nil))
	if s.ResetReason() == "" {
		t.Error("the stream was not reset")
	}
	equal(t, "response out", string(s.ResponseOut()), "")
	equal(t, "later body", s.ResponseBody([]byte("more"), true), Ended)
	s.Complete()
	equal(t, "end", grep(h.Transcript(0), "--> proxy_on_log", "--> proxy_on_done", "--> proxy_on_delete", "--> proxy_on_response_body"),
		[]string{"--> proxy_on_response_body(ctx=2,body_size=4,eos=0)", "--> proxy_on_log(ctx=2)", "--> proxy_on_done(ctx=2)", "--> proxy_on_delete(ctx=2)"})
}
