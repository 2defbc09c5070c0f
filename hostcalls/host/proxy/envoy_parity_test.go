package proxy

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
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// The proxy against Envoy's behaviour as a front end (moved from the host
// package's envoy_parity_test.go).

// TestHandlerAfterCloseAnswers: a request that reaches the Handler after
// Host.Close gets a 503 instead of spinning forever looking for a VM.
func TestHandlerAfterCloseAnswers(t *testing.T) {
	h := start(t, rawGuestPkg, host.Options{})
	u, _ := url.Parse("http://127.0.0.1:1")
	hd := New(h, u)
	h.Close(t.Context())
	rec := httptest.NewRecorder()
	hd.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	equal(t, "status", rec.Code, 503)
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
	h := start(t, rawGuestPkg, host.Options{})
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
	h := start(t, rawGuestPkg, host.Options{})
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
	h := start(t, rawGuestPkg, host.Options{BufferLimit: 1024})
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
	h := start(t, rawGuestPkg, host.Options{VMs: 3})
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
	h := start(t, rawGuestPkg, host.Options{VMs: 2})
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
	for h.EnterServe() { // until Close has begun: then new requests get 503
		h.ExitServe()
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
