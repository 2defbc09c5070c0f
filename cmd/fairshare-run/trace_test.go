package main

import (
	"math"
	"testing"

	"github.com/fairshare-wasm/fairshare/internal/trace"
)

// TestTraceSplit checks that -trace-teams splits rows by weight, the same
// way on every run, and that a team's rows do not depend on the others'
// names.
func TestTraceSplit(t *testing.T) {
	teams, err := parseTraceTeams("a=5,b=3,c=2:batch")
	if err != nil {
		t.Fatal(err)
	}
	if teams[2].Class != "batch" || teams[0].Class != "interactive" {
		t.Fatalf("classes %+v", teams)
	}
	n := [3]int{}
	const rows = 20000
	for line := 2; line < rows+2; line++ {
		q := trace.Request{Line: line}
		i := assign(q, teams)
		if assign(q, teams) != i {
			t.Fatalf("line %d: two assignments", line)
		}
		n[i]++
	}
	for i, w := range []float64{0.5, 0.3, 0.2} {
		got := float64(n[i]) / rows
		if math.Abs(got-w) > 4*math.Sqrt(w*(1-w)/rows) {
			t.Errorf("team %s got %.3f of the rows, want %.1f", teams[i].Name, got, w)
		}
	}
}
