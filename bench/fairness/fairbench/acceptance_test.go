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

// TestReplicaTargets: the largest share difference (in points, with its
// team), the alone team's p99 ratio and the borrowers against C + bound;
// without flow control (bound < 0) no borrowers target.
func TestReplicaTargets(t *testing.T) {
	s := &Scenario{Name: "s1", Capacity: 16, Engine: EngineSpec{Preset: "demo"}, Alone: "b"}
	one := fakeResult("plugin", 100, 0, 1.0, 0.030)
	many := fakeResult("plugin-3x", 100, 0, 1.0, 0.039)
	one.Teams[0].ServiceShare, one.Teams[1].ServiceShare = 0.90, 0.10
	many.Teams[0].ServiceShare, many.Teams[1].ServiceShare = 0.875, 0.125
	many.Pool.MaxBorrowing = 17
	ts, err := ReplicaTargets(s, ModeVLLM, one, many, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("ReplicaTargets = %v, want 3 targets", ts)
	}
	for i, want := range []struct {
		value, limit float64
		ok           bool
	}{{2.5, 2, false}, {1.3, 1.2, false}, {17, 16, false}} {
		if tg := ts[i]; tg.OK() != want.ok || tg.Limit != want.limit || tg.Value < want.value-1e-9 || tg.Value > want.value+1e-9 {
			t.Errorf("target %d = %v, want value %v, limit %v, ok %v", i, tg, want.value, want.limit, want.ok)
		}
	}
	if ts[0].Detail != "`a`" {
		t.Errorf("share target detail %q, want the team `a` (both differ by 2.5 points: the first)", ts[0].Detail)
	}
	many.Teams[1].ServiceShare, many.Teams[0].ServiceShare = 0.11, 0.89
	many.Teams[1].Class[Interactive].TTFTp99 = 33 * time.Millisecond
	ts, _ = ReplicaTargets(s, ModeVLLM, one, many, -1)
	if len(ts) != 2 || !ts[0].OK() || !ts[1].OK() {
		t.Errorf("without flow control ReplicaTargets = %v, want two targets that hold", ts)
	}
}
