package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
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

// TestHandlerAfterCloseAnswers: a request that reaches the Handler after
// Host.Close gets a 503 instead of spinning forever looking for a VM.
func TestHandlerAfterCloseAnswers(t *testing.T) {
	h := start(t, rawGuestPkg, Options{})
	u, _ := url.Parse("http://127.0.0.1:1")
	hd := h.Handler(u)
	h.Close(t.Context())
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	equal(t, "status", rec.Code, 503)
}

// TestHandlerFailedVMNotReplaceable: when a failed VM cannot be replaced
// (the new VM's on_configure fails), the Handler serves the request on
// the failed VM, which answers 503 wasm_fail_stream (fail closed), as
// replaceFailed documents, instead of retrying forever.
func TestHandlerFailedVMNotReplaceable(t *testing.T) {
	h := start(t, rawGuestPkg, Options{})
	if _, err := h.Call(0, "crash"); err == nil {
		t.Fatal("crash did not trap")
	}
	h.mu.Lock()
	h.opts.PluginConfig = []byte("fail=1") // the replacement's on_configure fails
	h.mu.Unlock()
	u, _ := url.Parse("http://127.0.0.1:1")
	rec := httptest.NewRecorder()
	h.Handler(u).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	equal(t, "status", rec.Code, 503)
	equal(t, "body", strings.TrimSpace(rec.Body.String()), "wasm_fail_stream")
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

// TestHandlerForwardsLikeEnvoy: hop-by-hop headers (connection,
// keep-alive, proxy-connection, te, transfer-encoding) are not forwarded;
// Host, X-Forwarded-For and the chunked body are; the proxy adds no
// Accept-Encoding of its own (Envoy forwards the client's headers as they
// are, so the upstream sees no compression request the client did not
// make).
func TestHandlerForwardsLikeEnvoy(t *testing.T) {
	up, ch := echoUpstream(t)
	hosts := make(chan string, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		up.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	h := start(t, rawGuestPkg, Options{})
	px := proxyFor(t, h, front.URL)
	c, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /p?q=1 HTTP/1.1\r\nHost: front.example\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"+
		"Proxy-Connection: keep-alive\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	equal(t, "response", []any{resp.StatusCode, string(b)}, []any{200, "echo:abc"})
	got := <-ch
	for _, k := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Transfer-Encoding", "Accept-Encoding"} {
		if v, ok := got.header[k]; ok {
			t.Errorf("upstream got %s: %q", k, v)
		}
	}
	equal(t, "x-forwarded-for", got.header.Get("X-Forwarded-For"), "10.0.0.1")
	equal(t, "host", <-hosts, "front.example")
	equal(t, "path", got.path, "/p?q=1")
}

// TestHandlerClientDisconnectCancelsUpstream: when the client goes away
// mid-response the upstream request is cancelled too.
func TestHandlerClientDisconnectCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	}))
	t.Cleanup(up.Close)
	h := start(t, rawGuestPkg, Options{})
	px := proxyFor(t, h, up.URL)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", px.URL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	cancel()
	resp.Body.Close()
	<-cancelled
	waitLog(t, h, "delete ctx=2")
	equal(t, "on_log", messages(h, 0, "log ctx=2"), []string{"log ctx=2 path=/ status=0"})
}

// TestHandlerStreamsBodyAboveLimit: a request body larger than the buffer
// limit passes when the filter continues on each chunk (no 413).
func TestHandlerStreamsBodyAboveLimit(t *testing.T) {
	up, ch := echoUpstream(t)
	h := start(t, rawGuestPkg, Options{BufferLimit: 1024})
	px := proxyFor(t, h, up.URL)
	body := strings.Repeat("0123456789abcdef", 16<<10) // 256 KiB
	resp, err := http.Post(px.URL+"/", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	equal(t, "status", resp.StatusCode, 200)
	equal(t, "response length", len(b), len("echo:")+len(body))
	equal(t, "upstream body", (<-ch).body == body, true)
}

// TestHandlerConcurrentVMs: 50 concurrent requests through 3 VMs all get
// their own answer; every stream is deleted once and context ids are
// unique per VM.
func TestHandlerConcurrentVMs(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, "echo:"+string(b))
	}))
	t.Cleanup(up.Close)
	h := start(t, rawGuestPkg, Options{VMs: 3})
	px := proxyFor(t, h, up.URL)
	const n = 50
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		go func() {
			body := "req-" + strconv.Itoa(i)
			resp, err := http.Post(px.URL+"/", "text/plain", strings.NewReader(body))
			if err != nil {
				errs <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "echo:"+body {
				errs <- fmt.Sprintf("%d %q", resp.StatusCode, b)
				return
			}
			errs <- ""
		}()
	}
	for i := 0; i < n; i++ {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	// Streams complete just after their response is written.
	for len(messages(h, -2, "delete ctx=")) < n && !t.Failed() {
		runtime.Gosched()
	}
	total := 0
	for vm := 0; vm < 3; vm++ {
		dels := messages(h, vm, "delete ctx=")
		seen := map[string]bool{}
		for _, d := range dels {
			if seen[d] {
				t.Errorf("VM %d: %q twice", vm, d)
			}
			seen[d] = true
		}
		total += len(dels)
	}
	equal(t, "streams deleted", total, n)
}

// TestHandlerCloseWithRequestsInFlight: Host.Close while requests wait on
// the upstream lets them finish with the upstream's answer (Envoy keeps a
// VM alive while streams use it) and their streams end normally; requests
// after Close get 503.
func TestHandlerCloseWithRequestsInFlight(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "late")
	}))
	t.Cleanup(up.Close)
	h := start(t, rawGuestPkg, Options{VMs: 2})
	px := proxyFor(t, h, up.URL)
	const n = 4
	codes := make(chan int, n)
	for i := 0; i < n; i++ {
		go func() {
			resp, err := http.Get(px.URL + "/")
			if err != nil {
				codes <- -1
				return
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	for i := 0; i < n; i++ {
		<-arrived
	}
	closed := make(chan struct{})
	go func() {
		h.Close(context.Background())
		close(closed)
	}()
	for !h.isClosed() {
		runtime.Gosched()
	}
	resp, err := http.Get(px.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	equal(t, "while closing", resp.StatusCode, 503)
	close(release)
	for i := 0; i < n; i++ {
		equal(t, "in-flight request", <-codes, 200)
	}
	<-closed
	equal(t, "on_log of in-flight streams", len(messages(h, -2, "log ctx=")), n)
	resp, err = http.Get(px.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	equal(t, "after close", resp.StatusCode, 503)
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
