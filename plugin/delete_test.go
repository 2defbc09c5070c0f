package plugin_test

import (
	"math"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestWasmDeleteWithoutDone: a host may delete a stream with
// proxy_on_delete alone, without on_log and on_done (Envoy never does;
// host.Stream.DeleteOnly). A granted stream is then released with the
// best estimate, as a reset one is, rather than holding its slot until
// request_timeout; a held one leaves the queue.
func TestWasmDeleteWithoutDone(t *testing.T) {
	t.Run("granted", func(t *testing.T) {
		h, _ := start(t, testConfig, 2)
		body := chat("m", 10, "")
		s := request(h, 0, "/v1/chat/completions", team("a"), body)
		priority(t, s)
		s.DeleteOnly()
		checkIdle(t, h, "small")
		prompt := float64((len(gjson.Get(body, "messages").Raw) + 3) / 4)
		if u := teamStats(t, h, "small")["a"].Usage; math.Abs(u-prompt) > 1e-9 {
			t.Errorf("usage = %v, want the best estimate %v (the prompt, nothing seen)", u, prompt)
		}
		// The stream context is reused for the next stream.
		respondJSON(request(h, 0, "/v1/chat/completions", team("a"), body), 1, 1)
		checkIdle(t, h, "small")
	})
	t.Run("held", func(t *testing.T) {
		h, _ := start(t, flowConfig, 2)
		run := fill(t, h)
		gone := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 4, ""))
		if !held(gone) {
			t.Fatal("borrower not held")
		}
		gone.DeleteOnly()
		if n := waiting(t, h, "p"); n != 0 {
			t.Errorf("waiting %d after the delete, want 0", n)
		}
		for _, r := range run {
			respondJSON(r, 1, 1)
		}
		h.Advance(20 * time.Millisecond)
		checkIdle(t, h, "p")
		if n := waiting(t, h, "p"); n != 0 {
			t.Errorf("waiting %d, want 0", n)
		}
	})
}
