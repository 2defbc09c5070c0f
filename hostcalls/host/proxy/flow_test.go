package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// Holding a request at the gateway and dispatching it later, through the
// local proxy (flow control, ../FLOW-NOTES.md §8): the conformance module
// holds the body with StopIterationAndBuffer and a tick resumes or
// answers it.

type clientResult struct {
	status     int
	retryAfter string
	body       string
	err        error
}

// postAsync posts body through px and delivers the answer on the channel.
func postAsync(ctx context.Context, url, body string) chan clientResult {
	ch := make(chan clientResult, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/x", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- clientResult{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- clientResult{resp.StatusCode, resp.Header.Get("Retry-After"), string(b), err}
	}()
	return ch
}

// TestHandlerHeldRequestResumedByTick: through the local proxy, a request
// whose body the filter holds waits (the client gets nothing, the
// upstream nothing but headers) until a tick rewrites and resumes it; the
// upstream then gets the rewritten body, chunked since the filter removed
// content-length, and the client the upstream's answer.
func TestHandlerHeldRequestResumedByTick(t *testing.T) {
	up, seenCh := echoUpstream(t)
	h := flowHost(t, holdAndResume, host.Options{})
	px := proxyFor(t, h, up.URL)
	body := strings.Repeat("x", 40<<10) // two chunks of the proxy
	res := postAsync(context.Background(), px.URL, body)
	waitLog(t, h, "on_request_body(ctx=2 size=40960 eos=true)")
	select {
	case r := <-res:
		t.Fatalf("answered while held: %+v", r)
	default:
	}
	tick(t, h)
	r := <-res
	equal(t, "client", r, clientResult{status: 200, body: `echo:{"priority":1}`})
	got := <-seenCh
	equal(t, "upstream", []any{got.body, got.contentLength, got.header.Get("Content-Length")}, []any{`{"priority":1}`, int64(-1), ""})
}

// TestHandlerHeldRequestAnsweredFromTick: a held request answered 429
// with Retry-After from a tick reaches the client as such.
func TestHandlerHeldRequestAnsweredFromTick(t *testing.T) {
	up, _ := echoUpstream(t)
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"tick":[{"call":"set_effective_context","ctx":2},
		        {"call":"send_local_response","status":429,"details":"queue timeout","body":"busy","pairs":[["retry-after","2"]]}]},
		"return":{"request_body":1}}`, host.Options{})
	px := proxyFor(t, h, up.URL)
	res := postAsync(context.Background(), px.URL, "abcd")
	waitLog(t, h, "on_request_body(ctx=2 size=4 eos=true)")
	tick(t, h)
	equal(t, "client", <-res, clientResult{status: 429, retryAfter: "2", body: "busy"})
}

// TestHandlerClientGoneWhileHeld: the client disconnects while its
// request is held: the stream is reset and ends with on_log, on_done and
// on_delete, and the next tick can no longer reach it.
func TestHandlerClientGoneWhileHeld(t *testing.T) {
	up, _ := echoUpstream(t)
	h := flowHost(t, holdAndResume, host.Options{Transcript: true})
	px := proxyFor(t, h, up.URL)
	ctx, cancel := context.WithCancel(context.Background())
	res := postAsync(ctx, px.URL, "abcd")
	waitLog(t, h, "on_request_body(ctx=2 size=4 eos=true)")
	cancel()
	if r := <-res; r.err == nil {
		t.Fatalf("client got an answer: %+v", r)
	}
	waitTranscript(t, h, 0, "--> proxy_on_delete(ctx=2)")
	equal(t, "end callbacks", grep(h.Transcript(0), "--> proxy_on_log", "--> proxy_on_done", "--> proxy_on_delete"),
		[]string{"--> proxy_on_log(ctx=2)", "--> proxy_on_done(ctx=2)", "--> proxy_on_delete(ctx=2)"})
	tick(t, h)
	equal(t, "resume refused", messages(h, 0, "set_effective_context"), []string{`set_effective_context(ctx=2) -> status=BAD_ARGUMENT`})
}

// TestHandlerHeldAtHeadersOpensNoUpstream: under
// AllowOnHeadersStopIteration a filter that stops at the headers and holds
// the body opens nothing upstream while it holds (the upstream has seen
// no request: Envoy's router creates the upstream request only when the
// headers pass); the tick's continue then sends the headers and the whole
// (rewritten) body together as one request.
func TestHandlerHeldAtHeadersOpensNoUpstream(t *testing.T) {
	up, opened, seenCh := countingUpstream(t)
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"request_body":[{"call":"remove_header_map_value","map":"request_headers","key":"content-length"}],
		"tick":[{"call":"set_effective_context","ctx":2},
		        {"call":"add_header_map_value","map":"request_headers","key":"x-fairshare-priority","value":"1"},
		        {"call":"set_buffer_bytes","buffer":"request_body","start":0,"size":2147483647,"value":"{\"priority\":1}"},
		        {"call":"continue_stream","stream":"request"}]},
		"return":{"request_headers":1,"request_body":1}}`, host.Options{AllowOnHeadersStopIteration: true})
	px := proxyFor(t, h, up.URL)
	res := postAsync(context.Background(), px.URL, strings.Repeat("x", 40<<10)) // two chunks of the proxy
	waitLog(t, h, "on_request_body(ctx=2 size=40960 eos=true)")
	select {
	case r := <-res:
		t.Fatalf("answered while held: %+v", r)
	default:
	}
	equal(t, "upstream requests while held", opened.Load(), int32(0))
	tick(t, h)
	equal(t, "client", <-res, clientResult{status: 200, body: `echo:{"priority":1}`})
	got := <-seenCh
	equal(t, "upstream", []any{opened.Load(), got.body, got.contentLength, got.header.Get("X-Fairshare-Priority")},
		[]any{int32(1), `{"priority":1}`, int64(-1), "1"})
}

// TestHandlerHeldAtHeadersConverted: by default (the conversion to
// StopAllIterationAndWatermark) the same stop holds the body in the host,
// with no body callback and nothing upstream, until the tick continues;
// then the headers go and the body reaches on_request_body and upstream.
func TestHandlerHeldAtHeadersConverted(t *testing.T) {
	up, opened, seenCh := countingUpstream(t)
	h := flowHost(t, `{"on":{
		"configure":[{"call":"set_tick_period_milliseconds","n":10}],
		"tick":[{"call":"set_effective_context","ctx":2},
		        {"call":"continue_stream","stream":"request"}]},
		"return":{"request_headers":1}}`, host.Options{})
	px := proxyFor(t, h, up.URL)
	res := postAsync(context.Background(), px.URL, "abcd")
	waitLog(t, h, "on_request_headers(ctx=2")
	equal(t, "upstream requests while held", opened.Load(), int32(0))
	equal(t, "no body callback while held", messages(h, 0, "on_request_body"), []string(nil))
	tick(t, h)
	equal(t, "client", <-res, clientResult{status: 200, body: "echo:abcd"})
	equal(t, "upstream", []any{opened.Load(), (<-seenCh).body}, []any{int32(1), "abcd"})
	equal(t, "body callback after continue", messages(h, 0, "on_request_body"), []string{"on_request_body(ctx=2 size=4 eos=true)"})
}

// countingUpstream is echoUpstream that also counts the requests it was
// handed (each counted as soon as its headers arrive, before its body).
func countingUpstream(t *testing.T) (*httptest.Server, *atomic.Int32, chan seen) {
	opened := new(atomic.Int32)
	ch := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opened.Add(1)
		b, _ := io.ReadAll(r.Body)
		ch <- seen{string(b), r.ContentLength, r.Header.Clone(), r.URL.RequestURI()}
		io.WriteString(w, "echo:"+string(b))
	}))
	t.Cleanup(srv.Close)
	return srv, opened, ch
}
