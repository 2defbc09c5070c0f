package plugin_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// A non-streaming response larger than max_response_bytes (logprobs make
// responses large) is still charged the usage it reports: vLLM writes usage
// after the choices.
func TestWasmLargeJSONResponseChargesReportedUsage(t *testing.T) {
	cfg := strings.Replace(testConfig, `"tick": "1s",`, `"tick": "1s", "max_response_bytes": 1024,`, 1)
	h, _ := start(t, cfg, 1)
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, `,"logprobs":true`))
	lp := strings.Repeat(`{"token":"x","logprob":-0.1,"bytes":[120],"top_logprobs":[]},`, 200)
	body := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":{"content":[` +
		lp[:len(lp)-1] + `]},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3,"prompt_tokens_details":null},"prompt_logprobs":null}`
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	for i := 0; i < len(body); i += 500 {
		s.ResponseBody([]byte(body[i:min(i+500, len(body))]), false)
	}
	s.ResponseBody(nil, true)
	s.Complete()
	if got := string(s.ResponseOut()); got != body {
		t.Errorf("response changed")
	}
	checkIdle(t, h, "small")
	if u := teamStats(t, h, "small")["a"].Usage; math.Abs(u-18) > 1e-9 {
		t.Errorf("usage a = %v, want 12 + 2×3 = 18", u)
	}
}

// stream given as a string is a stream for vLLM (pydantic's lax bool), so
// the usage chunk is requested, hidden and charged all the same.
func TestWasmStreamAsString(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 10, `,"stream":"true"`))
	fwd := s.ForwardedRequestBody()
	if !gjson.GetBytes(fwd, "stream_options.include_usage").Bool() {
		t.Fatalf("forwarded %s without include_usage", fwd)
	}
	head := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"total_tokens\":10,\"completion_tokens\":1}}\n\n"
	tail := "data: [DONE]\n\n"
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	s.ResponseBody([]byte(head+usage+tail), true)
	s.Complete()
	if got := string(s.ResponseOut()); got != head+tail {
		t.Errorf("client stream = %q, want %q", got, head+tail)
	}
	checkIdle(t, h, "small")
	if u := teamStats(t, h, "small")["b"].Usage; math.Abs(u-11) > 1e-9 {
		t.Errorf("usage b = %v, want 9 + 2×1", u)
	}
	if n := metric(h, "fairshare.pool.small.usage_missing_total"); n != 0 {
		t.Errorf("usage_missing_total = %d, want 0", n)
	}
}

// A chat request with an inline base64 image: the image counts a fixed
// estimate, not its bytes/4 (400 kB would be 100k tokens), both while the
// request runs and when it is aborted before any usage.
func TestWasmMultimodalEstimate(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	text := `{"type":"text","text":"what is this?"}`
	image := `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("A", 400000) + `"}}`
	body := fmt.Sprintf(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[%s,%s]}]}`, text, image)
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	_ = priority(t, s)
	s.Reset()
	s.Complete()
	prompt := float64((len(gjson.Get(body, "messages").Raw)-len(image)+3)/4 + 1024)
	if u := teamStats(t, h, "small")["a"].Usage; math.Abs(u-prompt) > 1e-9 {
		t.Errorf("usage after an abort = %v, want the prompt estimate %v", u, prompt)
	}
	if n := metric(h, "fairshare.pool.small.usage_missing_total"); n != 1 {
		t.Errorf("usage_missing_total = %d, want 1 (the abort)", n)
	}
}

// The request edges an operator meets: a body of exactly max_body_bytes
// passes and one byte more is 413; a body in many chunks or ended by
// trailers is decided once whole; team and class headers are trimmed and
// case-folded; client x-fairshare-* headers are removed in any case.
func TestWasmRequestEdges(t *testing.T) {
	h, _ := start(t, strings.Replace(testConfig, `"tick"`, `"max_body_bytes":256,"tick"`, 1), 1)
	fit := func(n int) string {
		b := `{"model":"m","prompt":"` + strings.Repeat("x", n) + `"}`
		return b
	}
	base := len(fit(0))
	s := request(h, 0, "/v1/completions", [][2]string{{"x-team", "a"}}, fit(256-base))
	if priority(t, s) != 0 {
		t.Error("body of max_body_bytes not scheduled within share")
	}
	respondJSON(s, 1, 1)
	s = request(h, 0, "/v1/completions", [][2]string{{"x-team", "a"}}, fit(257-base))
	jsonError(t, s, 413)
	s.Complete()

	// Many chunks, then trailers.
	body := fit(100)
	s = h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {"x-team", "  a "}, {"X-Request-Class", " Batch"},
		{"X-Fairshare-Priority", "-100"}, {"x-FAIRSHARE-pool", "forged"}}, false)
	for i := 0; i < len(body); i += 7 {
		s.RequestBody([]byte(body[i:min(i+7, len(body))]), false)
	}
	s.RequestTrailers([][2]string{{"x-trailer", "1"}})
	fwd := s.ForwardedRequestBody()
	if p := gjson.GetBytes(fwd, "priority"); p.Int() != 1 || gjson.GetBytes(fwd, "prompt").Str != strings.Repeat("x", 100) {
		t.Errorf("chunked body forwarded as %s, want batch priority 1 and the prompt", fwd)
	}
	for _, kv := range s.RequestHeaderMap() {
		if strings.HasPrefix(strings.ToLower(kv[0]), "x-fairshare-") {
			t.Errorf("client header %s forwarded", kv[0])
		}
	}
	// An error from vLLM still carries the headers; usage missing on a 5xx
	// is the best estimate, and nothing stays in flight.
	s.ResponseHeaders([][2]string{{":status", "500"}, {"content-type", "application/json"}}, false)
	s.ResponseBody([]byte(`{"error":{"message":"boom","code":500}}`), false)
	s.ResponseTrailers(nil)
	s.Complete()
	if v, _ := header(s.ResponseHeaderMap(), "x-fairshare-team"); v != "a" {
		t.Errorf("x-fairshare-team on a 500 = %q, want a", v)
	}
	checkIdle(t, h, "small")
}

// A client that asked for usage itself, with continuous_usage_stats, gets
// its stream untouched and is charged the final usage once, not the sum of
// the per-chunk usage; the end of the stream may come with trailers.
func TestWasmClientContinuousUsage(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	opts := `,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 10, opts))
	if got := gjson.GetBytes(s.ForwardedRequestBody(), "stream_options").Raw; got != `{"include_usage":true,"continuous_usage_stats":true}` {
		t.Errorf("stream_options forwarded as %s", got)
	}
	up := "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":{\"prompt_tokens\":9,\"total_tokens\":9,\"completion_tokens\":0}}\r\n\r\n" +
		"data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":9,\"total_tokens\":10,\"completion_tokens\":1}}\r\n\r\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"total_tokens\":11,\"completion_tokens\":2}}\r\n\r\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"total_tokens\":11,\"completion_tokens\":2}}\r\n\r\n" +
		"data: [DONE]\r\n\r\n"
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream; charset=utf-8"}}, false)
	for i := 0; i < len(up); i += 5 {
		s.ResponseBody([]byte(up[i:min(i+5, len(up))]), false)
	}
	s.ResponseTrailers([][2]string{{"grpc-status", "0"}})
	s.Complete()
	if got := string(s.ResponseOut()); got != up {
		t.Errorf("client stream changed:\n%q", got)
	}
	checkIdle(t, h, "small")
	if u := teamStats(t, h, "small")["b"].Usage; math.Abs(u-13) > 1e-9 {
		t.Errorf("usage b = %v, want 9 + 2×2", u)
	}
}

// A completions batch (a list of prompts) generates n completions per
// prompt: its estimate, held in flight while it runs, counts them all.
func TestWasmBatchPromptEstimate(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	s := request(h, 0, "/v1/completions", [][2]string{{"x-team", "a"}}, `{"model":"m","prompt":[[1,2,3],[4,5],[6]],"n":2,"max_tokens":100}`)
	_ = priority(t, s)
	// 6 prompt tokens + 3 prompts × 2 choices × 100 tokens × weight 2.
	if e := teamStats(t, h, "small")["a"].InFlightEstimate; math.Abs(e-1206) > 1e-9 {
		t.Errorf("in-flight estimate = %v, want 1206", e)
	}
	respondJSON(s, 6, 600)
	checkIdle(t, h, "small")
}
