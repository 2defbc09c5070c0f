package plugin_test

import "testing"

// TestWasmSaturatedCounted: a request granted while its pool already has
// C or more in flight counts in granted_saturated_total (the core's
// Grant.Saturated): under flow control (pool p, C 2) b's within-share
// request after a's two, never held; without it (pool small, C 4) the
// fifth request of a, a borrower.
func TestWasmSaturatedCounted(t *testing.T) {
	h := startHost(t, flowConfig, 1, false)
	request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	wantMetrics(t, h, map[string]int64{"fairshare.pool.p.team.a.granted_saturated_total": 0})
	request(h, 0, "/v1/chat/completions", team("b"), chat("m", 4, ""))
	wantMetrics(t, h, map[string]int64{"fairshare.pool.p.team.b.granted_saturated_total": 1})

	h2, _ := start(t, testConfig, 1)
	for i := 0; i < 5; i++ {
		request(h2, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	}
	wantMetrics(t, h2, map[string]int64{"fairshare.pool.small.team.a.granted_saturated_total": 1})
}
