package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// namedUpstream answers every request with its name and the body it got.
func namedUpstream(t *testing.T, name string) *url.URL {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, name+":"+string(b))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u
}

// routedProxy serves h with the catch-all upstream "default" and one
// route, x-route: b to upstream "b".
func routedProxy(t *testing.T, h *host.Host) string {
	t.Helper()
	srv := httptest.NewServer(NewRouted(h, namedUpstream(t, "default"),
		[]Route{{Header: "x-route", Value: "b", Upstream: namedUpstream(t, "b")}}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// post sends body to url with the extra headers and returns the answer.
func post(t *testing.T, u, body string, hdrs ...string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", u+"/v1/x", strings.NewReader(body))
	for i := 0; i+1 < len(hdrs); i += 2 {
		req.Header.Add(hdrs[i], hdrs[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRouteByReleasedHeaders: the route is chosen from the request
// headers as the filter releases them to the router. A header the client
// sends routes when the filter leaves it; a header the filter removes at
// on_request_headers no longer does (Envoy clears the route cache on the
// change and the router selects the route again); a header the filter
// adds in on_request_body while the headers are stopped
// (allow_on_headers_stop_iteration) routes the request.
func TestRouteByReleasedHeaders(t *testing.T) {
	t.Run("client header kept", func(t *testing.T) {
		h := flowHost(t, `{}`, host.Options{})
		equal(t, "answer", post(t, routedProxy(t, h), "q", "x-route", "b"), "b:q")
	})
	t.Run("client header removed by the filter", func(t *testing.T) {
		h := flowHost(t, `{"on":{"request_headers":[{"call":"remove_header_map_value","map":"request_headers","key":"x-route"}]}}`, host.Options{})
		equal(t, "answer", post(t, routedProxy(t, h), "q", "x-route", "b"), "default:q")
	})
	t.Run("header added while the headers are stopped", func(t *testing.T) {
		h := flowHost(t, `{"on":{
			"request_body":[{"call":"add_header_map_value","map":"request_headers","key":"x-route","value":"b"}]},
			"return":{"request_headers":1}}`, host.Options{AllowOnHeadersStopIteration: true})
		equal(t, "answer", post(t, routedProxy(t, h), "q"), "b:q")
		equal(t, "add", messages(h, 0, "add_header_map_value"), []string{`add_header_map_value(map=request_headers key="x-route" value="b") -> status=OK`})
	})
	t.Run("no match", func(t *testing.T) {
		h := flowHost(t, `{}`, host.Options{})
		equal(t, "answer", post(t, routedProxy(t, h), "q", "x-route", "c"), "default:q")
	})
	t.Run("a header sent twice matches joined", func(t *testing.T) {
		h := flowHost(t, `{}`, host.Options{})
		equal(t, "answer", post(t, routedProxy(t, h), "q", "x-route", "b", "x-route", "b"), "default:q")
	})
}

// TestRouteFixedOnceHeadersGo: a header change after the headers were
// released cannot change the route: the filter continued at
// on_request_headers, so the router has chosen (and opened) the upstream
// request; the add from the body callback is refused (BAD_ARGUMENT, the
// headers are gone) and the request goes where the released headers
// said. Likewise a change from a tick after the tick continued a held
// request.
func TestRouteFixedOnceHeadersGo(t *testing.T) {
	t.Run("after on_request_headers continued", func(t *testing.T) {
		h := flowHost(t, `{"on":{
			"request_body":[{"call":"add_header_map_value","map":"request_headers","key":"x-route","value":"b"}]}}`, host.Options{AllowOnHeadersStopIteration: true})
		equal(t, "answer", post(t, routedProxy(t, h), "q"), "default:q")
		equal(t, "add", messages(h, 0, "add_header_map_value"), []string{`add_header_map_value(map=request_headers key="x-route" value="b") -> status=BAD_ARGUMENT`})
	})
	t.Run("after the tick continued", func(t *testing.T) {
		h := flowHost(t, `{"on":{
			"configure":[{"call":"set_tick_period_milliseconds","n":10}],
			"tick":[{"call":"set_effective_context","ctx":2},
			        {"call":"continue_stream","stream":"request"},
			        {"call":"add_header_map_value","map":"request_headers","key":"x-route","value":"b"}]},
			"return":{"request_headers":1,"request_body":1}}`, host.Options{AllowOnHeadersStopIteration: true})
		px := routedProxy(t, h)
		res := postAsync(context.Background(), px, "q")
		waitLog(t, h, "on_request_body(ctx=2 size=1 eos=true)")
		tick(t, h)
		equal(t, "client", <-res, clientResult{status: 200, body: "default:q"})
		equal(t, "add after continue", messages(h, 0, "add_header_map_value"),
			[]string{`add_header_map_value(map=request_headers key="x-route" value="b") -> status=BAD_ARGUMENT`})
	})
}
