package fairbench

import (
	"fmt"
	"path/filepath"
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
		tr := TeamResult{Team: string(rune('a' + i)), Saturated: true, Entitled: 0.5, Fair: 0.5, SatShare: 0.5}
		tr.Class[Interactive] = ClassResult{Requests: 10, Within: 10, WithinTTFTp50: p50, TTFTp99: time.Duration(p * float64(time.Second))}
		r.Teams = append(r.Teams, tr)
	}
	return r
}

// loadTargets returns the scenario file name of testdata/scenarios.
func loadTargets(t *testing.T, name string) *Scenario {
	t.Helper()
	s, err := LoadScenario(filepath.Join("..", "..", "..", "testdata", "scenarios", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFlowTargets: S2's targets, read from its scenario file, on a fake
// report, and the table row WriteTargets writes for them.
func TestFlowTargets(t *testing.T) {
	rep := &Report{Scenario: loadTargets(t, "s2-saturate"), Modes: []string{ModeVLLM}, Results: map[string][]*Result{ModeVLLM: {
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

// TestEngineOffTargets: S2's engine-off target, read from its scenario
// file, is the share error of the engine-off column alone, and its table
// has that one column.
func TestEngineOffTargets(t *testing.T) {
	off := fakeResult(EngineOffColumn, 100, 0, 5, 5)
	off.Teams[0].SatShare, off.Teams[0].Entitled, off.Teams[0].Fair = 0.53, 0.5, 0.5 // 3 points off
	rep := &Report{Scenario: loadTargets(t, "s2-saturate"), Modes: []string{ModeVLLM}, Results: map[string][]*Result{ModeVLLM: {
		fakeResult("fcfs", 100, 0, 5, 5), fakeResult("plugin", 100, 0, 5, 5)}},
		Ablations: map[string][]*Result{ModeVLLM: {off}}}
	ts := EngineOffTargets(rep, EngineOffColumn)
	if len(ts) != 1 || ts[0].OK() || ts[0].Limit != 2 || ts[0].Value < 2.999 || ts[0].Value > 3.001 {
		t.Fatalf("EngineOffTargets = %v, want one target of 3 points against at most 2, failing", ts)
	}
	if ts := EngineOffTargets(rep, "plugin"); len(ts) != 1 || !ts[0].OK() {
		t.Errorf("on the plugin column: %v, want one target that holds", ts)
	}
	var b strings.Builder
	if err := WriteEngineOffTargets(&b, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| scenario | engine | target | bound | "+EngineOffColumn+" |") ||
		!strings.Contains(b.String(), "| s2-saturate | vllm | max share error (points), FCFS engine | <= 2.0 | 3.0 ✗ |") {
		t.Errorf("table:\n%s", b.String())
	}
	rep.Scenario = loadTargets(t, "s1-flood")
	if ts := EngineOffTargets(rep, EngineOffColumn); len(ts) != 0 {
		t.Errorf("S1 sets no engine-off target: %v", ts)
	}
}

// TestReplicaTargets: the largest share difference (in points, with its
// team), the alone team's p99 ratio and the borrowers against C + bound;
// without flow control (bound < 0) no borrowers target.
func TestReplicaTargets(t *testing.T) {
	two, onetwo := 2.0, 1.2
	s := &Scenario{Name: "s1", Capacity: 16, Engine: EngineSpec{Preset: "demo"}, Alone: "b", Targets: Targets{
		ReplicaShareDifference: &Bound{AtMost: &two}, ReplicaAloneP99: &Bound{AtMost: &onetwo}}}
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

// TestTargetsFollowTheScenarioFile: the targets checked are those of the
// scenario file, whatever the scenario is called: S2 renamed keeps its
// targets, and a changed limit in the file is the limit checked.
func TestTargetsFollowTheScenarioFile(t *testing.T) {
	results := map[string][]*Result{ModeVLLM: {
		fakeResult("fcfs", 100, 0, 5, 5),
		fakeResult("vtc", 100, 0, 10, 8),
		fakeResult("plugin", 96, 150*time.Millisecond, 12, 13),
	}}
	s := loadTargets(t, "s2-saturate")
	before := FlowTargets(&Report{Scenario: s, Modes: []string{ModeVLLM}, Results: results}, "plugin")
	if len(before) != 5 {
		t.Fatalf("s2-saturate: %d targets %v, want 5", len(before), before)
	}
	r := *s
	r.Name = "saturate-renamed"
	after := FlowTargets(&Report{Scenario: &r, Modes: []string{ModeVLLM}, Results: results}, "plugin")
	if len(after) != len(before) {
		t.Fatalf("renamed: %d targets %v, want the %d of s2-saturate", len(after), after, len(before))
	}
	for i := range after {
		if after[i].Name != before[i].Name || after[i].Limit != before[i].Limit || after[i].OK() != before[i].OK() {
			t.Errorf("renamed target %d = %v, want %v", i, after[i], before[i])
		}
	}
	lim := 1.5
	r.Targets.WorstP99VsVTC = &Bound{AtMost: &lim}
	for _, tg := range FlowTargets(&Report{Scenario: &r, Modes: []string{ModeVLLM}, Results: results}, "plugin") {
		if tg.Name == "worst p99 TTFT / VTC's worst" && (tg.Limit != 1.5 || !tg.OK()) {
			t.Errorf("with at_most 1.5 in the file: %v, want limit 1.5, holds (1.30×)", tg)
		}
	}
	r.Targets = Targets{}
	if ts := FlowTargets(&Report{Scenario: &r, Modes: []string{ModeVLLM}, Results: results}, "plugin"); len(ts) != 0 {
		t.Errorf("no targets section: %v, want no targets", ts)
	}
}

// TestTargetsParsedStrictly: a targets section with an unknown target, an
// unknown bound field, the wrong direction, an unknown mode or a target
// that needs an alone team is an error naming the field.
func TestTargetsParsedStrictly(t *testing.T) {
	base := `{"name": "x", "duration_s": 10, "teams": [{"name": "a", "share": 1}],
		"workloads": [{"team": "a", "kind": "poisson", "rate": 1, "prompt": {"mean": 8}, "output": {"mean": 8}, "interactive": 1}],
		"targets": %s}`
	for _, c := range []struct{ targets, want string }{
		{`{"jain": {"at_mots": 0.99}}`, "targets.jain.at_mots: unknown field"},
		{`{"jian": {"at_least": 0.99}}`, "targets.jian: unknown target"},
		{`{"jain": {"at_most": 0.99}}`, "targets.jain: must set exactly one of [at_least]"},
		{`{"jain": {"at_least": 0.99, "report": true}}`, "targets.jain: must set exactly one"},
		{`{"jain": {"at_least": 0.99, "modes": ["vlm"]}}`, "targets.jain.modes[0]: must be one of"},
		{`{"alone_p99_vs_fcfs": {"at_most": 0.2}}`, "targets.alone_p99_vs_fcfs: needs the scenario's \"alone\" team"},
		{`{"replica_share_difference_points": {"at_most": 2}}`, "targets.replica_share_difference_points: needs the scenario's \"gateway_replicas\""},
		{`{"engine_off_max_share_error_points": {"at_least": 2}}`, "targets.engine_off_max_share_error_points: must set exactly one of [at_most]"},
		{`{"engine_off_max_share_error_points": {"at_most": 2, "limit": 1}}`, "targets.engine_off_max_share_error_points.limit: unknown field"},
	} {
		_, err := ParseScenario([]byte(fmt.Sprintf(base, c.targets)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("targets %s: error %v, want %q", c.targets, err, c.want)
		}
	}
	s, err := ParseScenario([]byte(fmt.Sprintf(base, `{"jain": {"at_least": 0.5, "modes": ["pr45561"]}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if b := s.Targets.Jain; b == nil || *b.AtLeast != 0.5 || b.in(ModeVLLM) || !b.in(Mode45561) {
		t.Errorf("jain target %+v, want at_least 0.5 in pr45561 only", b)
	}
}
