package fairbench

import (
	"strings"
	"testing"
	"time"
)

// fakeResult returns a result of policy with one team per p99 (seconds),
// interactive only, all saturated, each within share on arrival with the
// given p50.
func fakeResult(policy string, service float64, p50 time.Duration, p99s ...float64) *Result {
	r := &Result{Policy: policy, Mode: ModeVLLM, Pool: PoolResult{ServiceRate: service, Jain: 1}}
	for i, p := range p99s {
		tr := TeamResult{Team: string(rune('a' + i)), Saturated: true, Entitled: 0.5, SatShare: 0.5}
		tr.Class[Interactive] = ClassResult{Requests: 10, Within: 10, WithinTTFTp50: p50, TTFTp99: time.Duration(p * float64(time.Second))}
		r.Teams = append(r.Teams, tr)
	}
	return r
}

func TestFlowTargets(t *testing.T) {
	rep := &Report{Scenario: &Scenario{Name: "s2-saturate"}, Modes: []string{ModeVLLM}, Results: map[string][]*Result{ModeVLLM: {
		fakeResult("fcfs", 100, 0, 5, 5),
		fakeResult("vtc", 100, 0, 10, 8),
		fakeResult("plugin", 96, 150*time.Millisecond, 12, 13),
	}}}
	got := map[string]bool{}
	for _, tg := range FlowTargets(rep, "plugin") {
		got[tg.Name] = tg.OK()
	}
	want := map[string]bool{
		"worst p99 TTFT / VTC's worst": false, // 13 / 10 > 1.25
		"max share error (points)":     true,
		"Jain":                         true,
		"service vs FCFS":              false, // 0.96 < 0.97
		"within-share interactive p50 TTFT of the worst team, s": true,
	}
	for k, v := range want {
		if ok, found := got[k]; !found || ok != v {
			t.Errorf("target %q: holds %v (found %v), want %v", k, ok, found, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %d", got, len(want))
	}
	var b strings.Builder
	if err := WriteTargets(&b, []*Report{rep}, []string{"plugin", "vtc"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| s2-saturate | vllm | worst p99 TTFT / VTC's worst | <= 1.25× | 1.30× ✗ | 1.00× ✓ |") {
		t.Errorf("table:\n%s\nwant a row of 1.30× ✗ for plugin and 1.00× ✓ for vtc", b.String())
	}
}
