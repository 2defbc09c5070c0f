package fairbench

import (
	"strings"
	"testing"
	"time"
)

func TestCapacityLag(t *testing.T) {
	s := func(at time.Duration, decided, engines int) CapacitySample {
		return CapacitySample{At: at, Decided: decided, FromEngine: engines}
	}
	res := &Result{Capacity: []CapacitySample{
		s(0, 32, 32), s(1*time.Second, 32, 32),
		s(2*time.Second, 32, 48), s(3*time.Second, 32, 48), s(5*time.Second, 48, 48), // followed in 3 s
		s(6*time.Second, 48, 16), s(7*time.Second, 16, 16), // in 1 s
		s(8*time.Second, 16, 32), s(9*time.Second, 16, 32), // never: counts to the end
		s(12*time.Second, 16, 32),
	}}
	if lag, n := res.CapacityLag(); lag != 4*time.Second || n != 3 {
		t.Fatalf("CapacityLag = %v over %d changes, want 4s (never followed: to the last sample) over 3", lag, n)
	}
}

func TestPhaseShareError(t *testing.T) {
	sc := &Scenario{CapacityChanges: []CapacityChange{{At: 10, Replicas: 1}}}
	res := &Result{From: 0, To: 20 * time.Second, Bucket: 5 * time.Second,
		Teams: []TeamResult{{Team: "a", Saturated: true, Entitled: 0.5}, {Team: "b", Saturated: true, Entitled: 0.5}},
		// Phase 1 (0–10 s) even; phase 2 (10–20 s) 60/40.
		Series: [][]float64{{5, 5, 6, 6}, {5, 5, 4, 4}}}
	worst, phases := res.PhaseShareError(sc)
	if len(phases) != 2 || phases[0] != 0 || abs(phases[1]-10) > 1e-9 || abs(worst-10) > 1e-9 {
		t.Fatalf("PhaseShareError = %v, %v; want 10 points, phases 0 and 10", worst, phases)
	}
}

func TestLedgerLost(t *testing.T) {
	l := Ledger{InFlight: 3, Open: 3, ChargedPrompt: 100, ReportedPrompt: 100, ChargedCompletion: 50, ReportedCompletion: 50}
	if l.Lost() != 0 {
		t.Fatalf("Lost = %d for a balanced ledger", l.Lost())
	}
	l.InFlight, l.ChargedCompletion = 4, 47
	if l.Lost() != 4 {
		t.Fatalf("Lost = %d, want 1 request + 3 tokens", l.Lost())
	}
}

func TestElasticTargetsNeedTheScenario(t *testing.T) {
	data := []byte(`{"name":"x","title":"x","seed":1,"duration_s":10,"engine":{"preset":"demo"},"teams":[{"name":"a","share":1}],
	  "workloads":[{"team":"a","kind":"closed","concurrency":1,"prompt":{"dist":"fixed","mean":8},"output":{"dist":"fixed","mean":8}}],
	  "targets":{"capacity_follow_s":{"at_most":10}}}`)
	_, err := ParseScenario(data)
	if err == nil || !strings.Contains(err.Error(), `targets.capacity_follow_s: needs the scenario's "capacity_from_engines"`) {
		t.Fatalf("ParseScenario = %v", err)
	}
}
