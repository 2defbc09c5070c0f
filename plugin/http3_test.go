package plugin_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// answerHTTP3 answers a stream with a vLLM JSON body reporting usage and
// ends it as Envoy ends an HTTP/3 downstream stream: on_done and
// on_delete now, on_log only at DeferredLog (the client's last ACK).
func answerHTTP3(s *host.Stream, prompt, completion int) {
	body := fmt.Sprintf(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, prompt, completion)
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	s.ResponseBody([]byte(body), true)
	s.CompleteHTTP3()
}

// TestWasmHTTP3DeferredLog: on an HTTP/3 downstream Envoy calls
// proxy_on_log after proxy_on_delete (host.Stream.CompleteHTTP3). The
// stream's usage, slot and latency are settled once, at on_done; the late
// on_log, arriving while the next stream runs in the reused stream
// context, charges nothing again, records no second latency sample and
// leaves the running stream's grant alone.
func TestWasmHTTP3DeferredLog(t *testing.T) {
	h, clock := start(t, latencyConfig, 1)
	a := team("a")
	total := "fairshare.pool.small.team.a.class.interactive.total_time_ms"
	prompt := "fairshare.pool.small.team.a.class.interactive.prompt_tokens_total"

	first := request(h, 0, "/v1/chat/completions", a, chat("m", 4, ""))
	priority(t, first)
	clock.Advance(100 * time.Millisecond)
	answerHTTP3(first, 10, 2)
	checkIdle(t, h, "small")
	// The same stream ended on_log → on_done → on_delete charges the same.
	ref, refClock := startAs(t, "ref", latencyConfig, 1)
	r := request(ref, 0, "/v1/chat/completions", a, chat("m", 4, ""))
	refClock.Advance(100 * time.Millisecond)
	r.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	r.ResponseBody([]byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2}}`), true)
	r.Complete()
	usage := teamStats(t, h, "small")["a"].Usage
	if want := teamStats(t, ref, "small")["a"].Usage; usage == 0 || math.Abs(usage-want) > 1e-9 {
		t.Fatalf("usage after the first stream = %v, want %v (settled at on_done, as with on_log first)", usage, want)
	}
	wantSamples(t, h, total, 100)

	// The next stream takes the deleted stream's context; the first
	// stream's log arrives while it holds a grant.
	second := request(h, 0, "/v1/chat/completions", a, chat("m", 4, ""))
	priority(t, second)
	clock.Advance(300 * time.Millisecond)
	before := teamStats(t, h, "small")["a"]
	first.DeferredLog()
	if st := teamStats(t, h, "small")["a"]; st.InFlight != 1 || st.Usage != before.Usage {
		t.Errorf("after the late on_log: in flight %d, usage %v; want 1 (the second stream's grant) and %v", st.InFlight, st.Usage, before.Usage)
	}
	wantSamples(t, h, total, 100)
	if got := counter(t, h, prompt); got != 10 {
		t.Errorf("prompt tokens = %d after the late on_log, want 10", got)
	}

	answerHTTP3(second, 20, 4)
	second.DeferredLog()
	checkIdle(t, h, "small")
	// The reference runs the second stream too, ended the HTTP/1-2 way.
	r2 := request(ref, 0, "/v1/chat/completions", a, chat("m", 4, ""))
	refClock.Advance(300 * time.Millisecond)
	r2.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	r2.ResponseBody([]byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":4}}`), true)
	r2.Complete()
	if u, want := teamStats(t, h, "small")["a"].Usage, teamStats(t, ref, "small")["a"].Usage; math.Abs(u-want) > 1e-9 {
		t.Errorf("usage = %v, want %v (each stream charged once, as with on_log first)", u, want)
	}
	got := samples(t, h, total)
	slices.Sort(got)
	if !slices.Equal(got, []uint64{100, 300}) {
		t.Errorf("%s = %v, want [100 300]", total, got)
	}
	if got := counter(t, h, prompt); got != 30 {
		t.Errorf("prompt tokens = %d, want 30", got)
	}
	if errs := h.HostErrors(); len(errs) != 0 {
		t.Errorf("host errors: %v", errs)
	}
}
