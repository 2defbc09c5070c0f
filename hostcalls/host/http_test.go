package host

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHTTPCall: http_call to a named cluster from on_request_headers
// (stopping the stream); the answer resumes it through
// set_effective_context + continue_stream; a failed call reports
// headers=0 and status 11 "reset"; an unknown cluster is BAD_ARGUMENT.
func TestHTTPCall(t *testing.T) {
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/auth" || r.Host != "auth" {
			w.WriteHeader(400)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(auth.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("http_call=auth"),
		Clusters: map[string]string{"auth": auth.URL, "dead": dead.URL}})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(getReq, true), StopAllIterationAndWatermark)
	h.Wait()
	equal(t, "log", messages(h, 0, "http_call"), []string{"http_call status=0",
		"http_call_response token=1 headers=4 status=200 body=ok code=0 msg="})
	fwd := s.RequestHeaderMap()
	equal(t, "resumed with header", fwd[len(fwd)-1], [2]string{"x-auth", "200"})
	equal(t, "request done", s.RequestDone(), true)

	if err := h.Reconfigure([]byte("http_call=dead")); err != nil {
		t.Fatal(err)
	}
	s = h.NewStream(0)
	s.RequestHeaders(getReq, true)
	h.Wait()
	got := messages(h, 0, "http_call_response")
	equal(t, "failure", got[len(got)-1], "http_call_response token=2 headers=0 status= body= code=11 msg=reset")

	if err := h.Reconfigure([]byte("http_call=nope")); err != nil {
		t.Fatal(err)
	}
	s = h.NewStream(0)
	equal(t, "unknown cluster continues", s.RequestHeaders(getReq, true), Continue)
	got = messages(h, 0, "http_call status")
	equal(t, "unknown cluster", got[len(got)-1], "http_call status=2")
}
