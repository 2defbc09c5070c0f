package plugin_test

import (
	"testing"
	"time"
)

// TestWasmLevelFairshareGaugeCap: in the built plugin, the level_fairshare
// gauge of a team with a share and no usage (LF = +Inf) reads the cap 1e6
// (1e9 in thousandths), not a saturated integer; a team with usage reads
// its LF.
func TestWasmLevelFairshareGaugeCap(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	s := request(h, 0, "/v1/completions", [][2]string{{"x-team", "b"}}, `{"model":"m","prompt":"abcd"}`)
	respondJSON(s, 1, 1)
	h.Advance(2 * time.Second)
	m := h.Metrics()
	if v := m["fairshare.pool.small.team.a.level_fairshare"].Value; v != 1e9 {
		t.Errorf("level_fairshare of a (no usage) = %v, want 1e9 (LF capped at 1e6, in thousandths)", v)
	}
	// b has all the usage: normalised usage 1, normalised share 0.25/0.75.
	if v := m["fairshare.pool.small.team.b.level_fairshare"].Value; v != 333 {
		t.Errorf("level_fairshare of b = %v, want 333 (LF 1/3 in thousandths)", v)
	}
}
