package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// proxyFor starts the proxy of h in front of upstream.
func proxyFor(t testing.TB, h *host.Host, upstream string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(h, u))
	t.Cleanup(srv.Close)
	return srv
}

// waitLog waits until a log message with prefix appears, however long
// that takes; the 2-minute deadline only stops a hung test.
func waitLog(t *testing.T, h *host.Host, prefix string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a guard against a hang, not a speed check
	for len(messages(h, -2, prefix)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no log %q; have %q", prefix, messages(h, -2))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type seen struct {
	body          string
	contentLength int64
	header        http.Header
	path          string
}

func echoUpstream(t *testing.T) (*httptest.Server, chan seen) {
	ch := make(chan seen, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- seen{string(b), r.ContentLength, r.Header.Clone(), r.URL.RequestURI()}
		w.Header().Set("X-Upstream", "1")
		io.WriteString(w, "echo:"+string(b))
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

// TestHandlerPassThrough: a request goes through the filter to the
// upstream and back; the filter's response header is added; the stream
// ends on_log → on_done → on_delete.
func TestHandlerPassThrough(t *testing.T) {
	up, ch := echoUpstream(t)
	h := start(t, rawGuestPkg, host.Options{VMs: 2})
	px := proxyFor(t, h, up.URL)
	resp, err := http.Post(px.URL+"/v1/x?q=1", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	equal(t, "status", resp.StatusCode, 200)
	equal(t, "body", string(b), "echo:hello")
	equal(t, "filter header", resp.Header.Get("X-Rawguest"), "1")
	equal(t, "upstream header", resp.Header.Get("X-Upstream"), "1")
	got := <-ch
	equal(t, "upstream saw", []any{got.body, got.contentLength, got.path}, []any{"hello", int64(5), "/v1/x?q=1"})
	if got.header.Get("X-Request-Id") == "" {
		t.Error("no x-request-id generated")
	}
	waitLog(t, h, "delete ctx=2")
	var end []string
	for _, m := range messages(h, -2, "log ctx=2", "done ctx=2", "delete ctx=2") {
		end = append(end, strings.Fields(m)[0])
	}
	equal(t, "end order", end, []string{"log", "done", "delete"})
}

// TestHandlerBodyRewrite: the filter buffers the body, replaces it and
// removed content-length: the upstream gets the new body chunked.
func TestHandlerBodyRewrite(t *testing.T) {
	up, ch := echoUpstream(t)
	h := start(t, rawGuestPkg, host.Options{PluginConfig: []byte("req_body=buffer\nreq_eos_op=replace:NEWBODY\nremove_cl=1")})
	px := proxyFor(t, h, up.URL)
	resp, err := http.Post(px.URL+"/", "text/plain", strings.NewReader("old body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	equal(t, "body", string(b), "echo:NEWBODY")
	got := <-ch
	equal(t, "upstream body", got.body, "NEWBODY")
	equal(t, "upstream content-length (chunked)", got.contentLength, int64(-1))
}

// TestHandlerLocalReply: a local reply from on_request_headers answers
// the client; the upstream is never called.
func TestHandlerLocalReply(t *testing.T) {
	up, ch := echoUpstream(t)
	h := start(t, rawGuestPkg, host.Options{PluginConfig: []byte("local_reply=req_headers")})
	px := proxyFor(t, h, up.URL)
	resp, err := http.Get(px.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	equal(t, "reply", []any{resp.StatusCode, string(b), resp.Header.Get("X-Why")}, []any{403, "nope", "test"})
	select {
	case <-ch:
		t.Fatal("the upstream was called")
	default:
	}
}

// TestHandlerPayloadTooLarge: buffering past the limit gives 413.
func TestHandlerPayloadTooLarge(t *testing.T) {
	up, _ := echoUpstream(t)
	h := start(t, rawGuestPkg, host.Options{PluginConfig: []byte("req_body=buffer"), BufferLimit: 1024})
	px := proxyFor(t, h, up.URL)
	resp, err := http.Post(px.URL+"/", "text/plain", strings.NewReader(strings.Repeat("x", 64<<10)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	equal(t, "status", resp.StatusCode, 413)
}

// TestHandlerStreamsSSE: each upstream chunk reaches the client through
// on_response_body before the upstream sends the next one.
func TestHandlerStreamsSSE(t *testing.T) {
	next := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
			w.(http.Flusher).Flush()
			<-next
		}
	}))
	t.Cleanup(up.Close)
	h := start(t, rawGuestPkg, host.Options{})
	px := proxyFor(t, h, up.URL)
	resp, err := http.Get(px.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "event", line, "data: "+string(rune('a'+i))+"\n")
		r.ReadString('\n')
		next <- struct{}{}
	}
	waitLog(t, h, "response_body size=0 eos=true")
	if n := len(messages(h, 0, "response_body size=9 eos=false")); n != 3 {
		t.Errorf("on_response_body per event = %d calls, want 3", n)
	}
}

// TestHandlerUpstreamDown: a connection failure becomes Envoy's 503
// "upstream connect error", which passes the response callbacks; on_log,
// on_done and on_delete run.
func TestHandlerUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	h := start(t, rawGuestPkg, host.Options{})
	px := proxyFor(t, h, deadURL)
	resp, err := http.Get(px.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	equal(t, "status", resp.StatusCode, 503)
	if !strings.HasPrefix(string(b), "upstream connect error") {
		t.Errorf("body = %q", b)
	}
	waitLog(t, h, "delete ctx=2")
	equal(t, "callbacks", messages(h, 0, "response_headers", "log ctx", "done ctx=2"), []string{
		"response_headers ctx=2 status=503", "log ctx=2 path=/ status=0", "done ctx=2"})
}

// TestHandlerClientDisconnect: the client goes away mid-response: the
// stream is reset, on_log, on_done and on_delete run.
func TestHandlerClientDisconnect(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); up.Close() })
	h := start(t, rawGuestPkg, host.Options{})
	px := proxyFor(t, h, up.URL)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", px.URL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	r.ReadString('\n')
	cancel()
	resp.Body.Close()
	waitLog(t, h, "delete ctx=2")
	equal(t, "on_log", messages(h, 0, "log ctx=2"), []string{"log ctx=2 path=/ status=0"})
	equal(t, "on_done", messages(h, 0, "done ctx=2"), []string{"done ctx=2"})
}

// TestFailedVM: a trap in a stream callback fails the VM and ends the
// stream with 503 wasm_fail_stream (fail closed); the Handler replaces a
// failed VM with a new one for the next request.
func TestFailedVM(t *testing.T) {
	h := start(t, rawGuestPkg, host.Options{PluginConfig: []byte("crash_on=req_headers")})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(getReq, true), host.Ended)
	if lr := s.LocalReply(); lr == nil || lr.Status != 503 || lr.Details != "wasm_fail_stream" {
		t.Fatalf("LocalReply = %+v, want 503 wasm_fail_stream", lr)
	}
	s.Complete()
	if h.VMs()[0].Failed() == nil {
		t.Fatal("VM not failed")
	}

	up, _ := echoUpstream(t)
	h2 := start(t, rawGuestPkg, host.Options{})
	if _, err := h2.Call(0, "crash"); err == nil {
		t.Fatal("crash did not trap")
	}
	failed := h2.VMs()[0]
	px := proxyFor(t, h2, up.URL)
	resp, err := http.Get(px.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	equal(t, "status on a new VM", resp.StatusCode, 200)
	if h2.VMs()[0] == failed {
		t.Fatal("the failed VM was not replaced")
	}
}

// TestHandlerPausedByHTTPCall: the filter stops the request at headers,
// calls an auth cluster, and resumes from the answer with a header added;
// the body sent meanwhile is held and then forwarded.
func TestHandlerPausedByHTTPCall(t *testing.T) {
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(204)
	}))
	t.Cleanup(auth.Close)
	up, ch := echoUpstream(t)
	h := start(t, rawGuestPkg, host.Options{PluginConfig: []byte("http_call=auth"), Clusters: map[string]string{"auth": auth.URL}})
	px := proxyFor(t, h, up.URL)
	resp, err := http.Post(px.URL+"/", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	equal(t, "response", []any{resp.StatusCode, string(b)}, []any{200, "echo:payload"})
	got := <-ch
	equal(t, "upstream x-auth", got.header.Get("X-Auth"), "204")
	equal(t, "upstream body", got.body, "payload")
}
