package main

import (
	"testing"
	"time"
)

// TestFCFSBaseline: the summary's "without the plugin" figures are the
// demo load run on the demo's engine under FCFS, so they show what the
// plugin prevents: the steady interactive team waits behind the flood (a
// TTFT p50 of seconds, where the live demo's is about 100 ms), and the
// flooding team takes most of the tokens. Every team of the plan is served,
// and the run is deterministic.
func TestFCFSBaseline(t *testing.T) {
	cfg, err := readConfig(demoConfig)
	if err != nil {
		t.Fatal(err)
	}
	plan := planPools(cfg, "")[0]
	const d = 30 * time.Second
	got := fcfsBaseline(plan, poolEngine(plan.pool.Capacity), d, d, defaultDrain, 1)
	var total int64
	for _, team := range plan.teams {
		b := got[team.Name]
		if b.Done == 0 || b.Tokens == 0 || !b.HasTTFT || b.P99 < b.P50 {
			t.Errorf("%s without the plugin: %+v, want requests served with TTFT", team.Name, b)
		}
		total += b.Tokens
	}
	if s := got["search"]; s.P50 < time.Second {
		t.Errorf("search's TTFT p50 under FCFS behind the flood = %v, want over 1s", s.P50)
	}
	if r := got["research"]; float64(r.Tokens) < 0.8*float64(total) {
		t.Errorf("research (flooding) got %d of %d tokens under FCFS, want over 80%%", r.Tokens, total)
	}
	if again := fcfsBaseline(plan, poolEngine(plan.pool.Capacity), d, d, defaultDrain, 1); again["search"] != got["search"] {
		t.Errorf("baseline not deterministic: %+v then %+v", got["search"], again["search"])
	}
	// At half speed (-time-scale 2) the same load takes twice the wall time.
	if slow := fcfsBaseline(plan, poolEngine(plan.pool.Capacity), 2*d, 2*d, 2*defaultDrain, 2); slow["search"].P50 < got["search"].P50 {
		t.Errorf("at -time-scale 2, search's p50 %v is below the full-speed %v", slow["search"].P50, got["search"].P50)
	}
}
