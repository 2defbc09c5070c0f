package host

import (
	"strings"
	"testing"
)

var getReq = [][2]string{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "example"}, {"Content-Length", "9"}}

// TestBodyBuffering: while the filter returns StopIterationAndBuffer the
// chunks accumulate and each call's body_size and get_buffer_bytes cover
// the whole buffered body; nothing is forwarded until Continue, which
// passes the whole buffer on.
func TestBodyBuffering(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("req_body=buffer")})
	s := h.NewStream(0)
	equal(t, "RequestHeaders", s.RequestHeaders(getReq, false), Continue)
	equal(t, "chunk 1", s.RequestBody([]byte("abc"), false), StopIterationAndBuffer)
	equal(t, "forwarded after chunk 1", len(s.ForwardedRequestBody()), 0)
	equal(t, "chunk 2", s.RequestBody([]byte("def"), false), StopIterationAndBuffer)
	equal(t, "chunk 3", s.RequestBody([]byte("ghi"), true), Continue)
	equal(t, "forwarded", string(s.ForwardedRequestBody()), "abcdefghi")
	equal(t, "RequestDone", s.RequestDone(), true)
	equal(t, "body log", messages(h, 0, "request_body"), []string{
		"request_body size=3 eos=false body=abc",
		"request_body size=6 eos=false body=abcdef",
		"request_body size=9 eos=true body=abcdefghi",
	})
}

// TestBodyContinueChunks: with Continue each call sees only its chunk.
func TestBodyContinueChunks(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("req_body=continue")})
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	s.RequestBody([]byte("abc"), false)
	equal(t, "forwarded after chunk 1", string(s.ForwardedRequestBody()), "abc")
	s.RequestBody([]byte("def"), true)
	equal(t, "body log", messages(h, 0, "request_body"), []string{
		"request_body size=3 eos=false body=abc",
		"request_body size=3 eos=true body=def",
	})
	equal(t, "forwarded", string(s.ForwardedRequestBody()), "abcdef")
}

// TestSetBufferBytes: Envoy's Buffer::copyFrom cases on a buffered body.
func TestSetBufferBytes(t *testing.T) {
	for _, tc := range []struct {
		op, status, body string
	}{
		{"replace:XY", "0", "XY"},       // (0, len): drain all, prepend
		{"append:XY", "0", "abcdefXY"},  // start ≥ len: append
		{"prepend:XY", "0", "XYabcdef"}, // (0, 0): prepend
		{"middle:XY", "2", "abcdef"},    // 0 < start < len: BAD_ARGUMENT
	} {
		t.Run(tc.op, func(t *testing.T) {
			h := start(t, rawGuestPkg, Options{PluginConfig: []byte("req_body=buffer\nreq_eos_op=" + tc.op)})
			s := h.NewStream(0)
			s.RequestHeaders(getReq, false)
			s.RequestBody([]byte("abc"), false)
			s.RequestBody([]byte("def"), true)
			op, _, _ := strings.Cut(tc.op, ":")
			equal(t, "log", messages(h, 0, "set_buffer_bytes"), []string{"set_buffer_bytes " + op + " status=" + tc.status + " body=" + tc.body})
			equal(t, "forwarded", string(s.ForwardedRequestBody()), tc.body)
		})
	}
	// setBody itself: (0, 0 < size < len) is BAD_ARGUMENT in Envoy's
	// copyFrom, not a partial drain.
	for _, tc := range []struct {
		start, size uint32
		want        string
		ok          bool
	}{
		{0, 0, "XYabcdef", true}, {0, 2, "abcdef", false}, {0, 5, "abcdef", false}, {0, 6, "XY", true}, {0, 99, "XY", true},
		{6, 0, "abcdefXY", true}, {9, 0, "abcdefXY", true}, {1, 0, "abcdef", false}, {5, 1, "abcdef", false},
	} {
		got, st := setBody([]byte("abcdef"), tc.start, tc.size, []byte("XY"))
		if string(got) != tc.want || (st == 0) != tc.ok {
			t.Errorf("setBody(abcdef, %d, %d, XY) = %q, %d; want %q ok=%v", tc.start, tc.size, got, st, tc.want, tc.ok)
		}
	}
}

// TestBufferLimit: buffering past the limit ends the request with 413,
// the response with 500.
func TestBufferLimit(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("req_body=buffer\nresp_body=buffer"), BufferLimit: 8})
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	equal(t, "chunk 1", s.RequestBody([]byte("12345"), false), StopIterationAndBuffer)
	equal(t, "chunk 2", s.RequestBody([]byte("6789"), false), Ended)
	lr := s.LocalReply()
	if lr == nil || lr.Status != 413 {
		t.Fatalf("LocalReply = %+v, want 413", lr)
	}
	equal(t, "forwarded", len(s.ForwardedRequestBody()), 0)
	s.Complete()

	s = h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}, true)
	s.ResponseHeaders([][2]string{{":status", "200"}}, false)
	s.ResponseBody([]byte("123456789"), false)
	if lr := s.LocalReply(); lr != nil {
		t.Fatalf("response headers were sent: want a reset, got local reply %+v", lr)
	}
	if !strings.Contains(s.ResetReason(), "local reply after response headers") {
		t.Fatalf("ResetReason = %q", s.ResetReason())
	}
	s.Complete()

	// Response headers held (StopAllIterationAndBuffer): a 500 can be sent.
	h2 := start(t, rawGuestPkg, Options{PluginConfig: []byte("resp_headers=3"), BufferLimit: 8})
	s = h2.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}, true)
	equal(t, "response headers", s.ResponseHeaders([][2]string{{":status", "200"}}, false), StopAllIterationAndBuffer)
	equal(t, "held", s.ResponseBody([]byte("12345"), false), Held)
	equal(t, "over", s.ResponseBody([]byte("6789"), false), Ended)
	if lr := s.LocalReply(); lr == nil || lr.Status != 500 {
		t.Fatalf("LocalReply = %+v, want 500", lr)
	}
}

// TestHeadersFrozenAfterContinue: once on_request_headers returned
// Continue, Envoy forgets the request header map: a change from a body
// callback is BAD_ARGUMENT (visible in the transcript) and what was
// forwarded does not change.
func TestHeadersFrozenAfterContinue(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("mutate_in_body=1"), Transcript: true})
	h.ResetTranscript(0)
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	s.RequestBody([]byte("x"), true)
	equal(t, "log", messages(h, 0, "early", "late"), []string{"early replace status=0", "late replace status=2", "late get status=2"})
	tr := grep(h.Transcript(0), `"x-late"`, `"x-early"`)
	equal(t, "transcript", tr, []string{
		`==> proxy_replace_header_map_value(type=0,key="x-early",value="1")`,
		`==> proxy_replace_header_map_value(type=0,key="x-late",value="1")`,
	})
	full := h.Transcript(0)
	for i, l := range full {
		if strings.Contains(l, `"x-late"`) {
			equal(t, "x-late result", full[i+1], "<== BAD_ARGUMENT")
		}
	}
	fwd := s.RequestHeaderMap()
	var names []string
	for _, kv := range fwd {
		names = append(names, kv[0])
	}
	equal(t, "forwarded header names", names, []string{":method", ":path", ":authority", "content-length", "x-early"})
}

// TestHeadersStopHoldsBody: a headers StopIteration(1) becomes
// StopAllIterationAndWatermark: the body is not delivered until
// proxy_continue_stream; on continue the held body reaches the filter.
func TestHeadersStopHoldsBody(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("req_headers=1")})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(getReq, false), StopAllIterationAndWatermark)
	equal(t, "body", s.RequestBody([]byte("abc"), true), Held)
	equal(t, "body log", messages(h, 0, "request_body"), []string(nil))
	equal(t, "forwarded headers", s.RequestHeaderMap(), [][2]string(nil))
}

// TestLocalReply: send_local_response in a headers callback is applied
// when the callback returns; the stream ends with the reply (spaces in
// details become '_'), later events are not delivered, and on_log,
// on_done, on_delete still run in that order.
func TestLocalReply(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("local_reply=req_headers"), Transcript: true})
	s := h.NewStream(0)
	equal(t, "headers", s.RequestHeaders(getReq, false), Ended)
	lr := s.LocalReply()
	if lr == nil {
		t.Fatal("no local reply")
	}
	equal(t, "reply", *lr, LocalReply{Status: 403, Details: "denied_by_rawguest", Body: []byte("nope"), Headers: [][2]string{{"x-why", "test"}}, GRPCStatus: -1})
	equal(t, "body", s.RequestBody([]byte("abc"), true), Ended)
	equal(t, "forwarded headers", s.RequestHeaderMap(), [][2]string(nil))
	s.Complete()
	equal(t, "end order", grep(h.Transcript(0), "--> proxy_on_log", "--> proxy_on_done", "--> proxy_on_delete", "--> proxy_on_request_body"),
		[]string{"--> proxy_on_log(ctx=2)", "--> proxy_on_done(ctx=2)", "--> proxy_on_delete(ctx=2)"})
}

// TestEndOfStreamOrder: a completed stream ends on_log → on_done →
// on_delete (Envoy's order, not the spec's); on_log can still read the
// request headers.
func TestEndOfStreamOrder(t *testing.T) {
	h := start(t, rawGuestPkg, Options{Transcript: true})
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/a"}, {":authority", "x"}}, true)
	s.ResponseHeaders([][2]string{{":status", "200"}}, false)
	s.ResponseBody([]byte("ok"), true)
	equal(t, "response out", string(s.ResponseOut()), "ok")
	equal(t, "response headers", s.ResponseHeaderMap(), [][2]string{{":status", "200"}, {"x-rawguest", "1"}})
	s.Complete()
	equal(t, "callbacks", grep(h.Transcript(0), "--> proxy_on_"), []string{
		"--> proxy_on_context_create(ctx=1,parent=0)",
		"--> proxy_on_vm_start(root=1,vm_config_size=0)",
		"--> proxy_on_configure(root=1,config_size=0)",
		"--> proxy_on_context_create(ctx=2,parent=1)",
		"--> proxy_on_request_headers(ctx=2,headers=3,eos=1)",
		"--> proxy_on_response_headers(ctx=2,headers=1,eos=0)",
		"--> proxy_on_response_body(ctx=2,body_size=2,eos=1)",
		"--> proxy_on_log(ctx=2)",
		"--> proxy_on_done(ctx=2)",
		"--> proxy_on_delete(ctx=2)",
	})
	equal(t, "on_log", messages(h, 0, "log "), []string{"log ctx=2 path=/a status=0"})
}

// TestTrailersAtLog: on_log reads the response trailers that were sent
// but not the request trailers: Envoy's getConstMap answers nullptr for
// the request trailers in the access-log phase, so a read is NOT_FOUND
// (ABI 0.2.x) even though the request had trailers, while the response
// trailers are the ones sent downstream (access_log_response_trailers_).
func TestTrailersAtLog(t *testing.T) {
	h := start(t, rawGuestPkg, Options{})
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "POST"}, {":path", "/a"}, {":authority", "x"}}, false)
	s.RequestBody([]byte("abc"), false)
	equal(t, "request trailers", s.RequestTrailers([][2]string{{"x-t", "1"}}), Continue)
	s.ResponseHeaders([][2]string{{":status", "200"}}, false)
	s.ResponseBody([]byte("ok"), false)
	equal(t, "response trailers", s.ResponseTrailers([][2]string{{"x-rt", "2"}}), Continue)
	s.Complete()
	equal(t, "on_log", messages(h, 0, "trailers-at-log"), []string{"trailers-at-log request= status=1 response=2 status=0"})
}

// TestReset: a reset stream (client gone) gets no further callbacks but
// the end: on_log (Envoy completes the request before it logs), on_done,
// on_delete.
func TestReset(t *testing.T) {
	h := start(t, rawGuestPkg, Options{Transcript: true})
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	s.Reset()
	equal(t, "body after reset", s.RequestBody([]byte("x"), true), Ended)
	s.Complete()
	equal(t, "callbacks", grep(h.Transcript(0), "--> proxy_on_request", "--> proxy_on_log", "--> proxy_on_done", "--> proxy_on_delete"), []string{
		"--> proxy_on_request_headers(ctx=2,headers=4,eos=0)",
		"--> proxy_on_log(ctx=2)",
		"--> proxy_on_done(ctx=2)",
		"--> proxy_on_delete(ctx=2)",
	})
	equal(t, "reason", s.ResetReason(), "downstream_remote_disconnect")
}

// TestTrailers: trailers end the request; a buffered body is passed on
// with them.
func TestTrailers(t *testing.T) {
	h := start(t, rawGuestPkg, Options{PluginConfig: []byte("req_body=buffer")})
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	s.RequestBody([]byte("abc"), false)
	equal(t, "trailers", s.RequestTrailers([][2]string{{"X-T", "1"}}), Continue)
	equal(t, "forwarded", string(s.ForwardedRequestBody()), "abc")
	equal(t, "trailers out", s.RequestTrailerMap(), [][2]string{{"x-t", "1"}})
	equal(t, "done", s.RequestDone(), true)
	equal(t, "log", messages(h, 0, "request_trailers"), []string{"request_trailers n=1"})
}
