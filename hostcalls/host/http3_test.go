package host

import "testing"

// TestCompleteHTTP3: an HTTP/3 stream ends on_done → on_delete, and its
// on_log comes at DeferredLog, after the delete, with the same id and the
// request headers still readable; a second stream in between gets a new
// id. A reset HTTP/3 stream is logged at once (on_log first).
func TestCompleteHTTP3(t *testing.T) {
	h := start(t, rawGuestPkg, Options{Transcript: true})
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/a"}, {":authority", "x"}}, true)
	s.ResponseHeaders([][2]string{{":status", "200"}}, false)
	s.ResponseBody([]byte("ok"), true)
	s.CompleteHTTP3()
	end := func() []string {
		return grep(h.Transcript(0), "--> proxy_on_context_create(ctx=3", "--> proxy_on_log", "--> proxy_on_done", "--> proxy_on_delete")
	}
	equal(t, "before the ack", end(), []string{"--> proxy_on_done(ctx=2)", "--> proxy_on_delete(ctx=2)"})
	n := h.NewStream(0)
	n.RequestHeaders(getReq, true)
	s.DeferredLog()
	s.DeferredLog() // once only
	equal(t, "after the ack", end(), []string{
		"--> proxy_on_done(ctx=2)",
		"--> proxy_on_delete(ctx=2)",
		"--> proxy_on_context_create(ctx=3,parent=1)",
		"--> proxy_on_log(ctx=2)",
	})
	equal(t, "on_log", messages(h, 0, "log "), []string{"log ctx=2 path=/a status=0"})
	n.Complete()

	r := h.NewStream(0)
	r.RequestHeaders(getReq, false)
	r.Reset()
	r.CompleteHTTP3()
	r.DeferredLog() // owes nothing
	equal(t, "reset", grep(h.Transcript(0), "--> proxy_on_log(ctx=4", "--> proxy_on_done(ctx=4", "--> proxy_on_delete(ctx=4"),
		[]string{"--> proxy_on_log(ctx=4)", "--> proxy_on_done(ctx=4)", "--> proxy_on_delete(ctx=4)"})
}
