package fairbench

import (
	"math"
	"testing"
	"time"
)

func threeTeams() *Scenario {
	return &Scenario{Name: "g", Duration: 10, Teams: []TeamSpec{{Name: "c", Share: 0.6}, {Name: "a", Share: 0.2}, {Name: "b", Share: 0.2}}}
}

func TestEPPRoundRobinTakesTurnsInKeyOrder(t *testing.T) {
	d := &fakeDispatcher{}
	g := NewEPPRoundRobin()
	g.Start(d, threeTeams(), 1)
	first := &Request{ID: 1, Team: "c"}
	g.Arrive(first) // dispatched at once: the pool is not saturated
	var id int64 = 2
	for _, team := range []string{"c", "c", "c", "a", "b", "a"} {
		g.Arrive(&Request{ID: id, Team: team})
		id++
	}
	if len(d.submitted) != 1 {
		t.Fatalf("submitted %d with C = 1, want 1 (saturated)", len(d.submitted))
	}
	var got []string
	for len(d.submitted) < 7 {
		d.finish(g, d.submitted[len(d.submitted)-1])
		got = append(got, d.submitted[len(d.submitted)-1].Team)
	}
	// Sorted keys a, b, c; no cursor yet: a, then b, c, a, c, c.
	want := []string{"a", "b", "c", "a", "c", "c"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("dispatch order %v, want %v (turns in sorted key order, empty flows skipped, shares ignored)", got, want)
		}
	}
}

func TestEPPBandsServeInteractiveFirst(t *testing.T) {
	for _, ng := range []NewGateway{NewEPPRoundRobin, NewEPPProgramAware} {
		d := &fakeDispatcher{}
		g := ng()
		g.Start(d, twoTeams(0.5, 0.5), 1)
		g.Arrive(&Request{ID: 1, Team: "a", Class: Batch})
		b := &Request{ID: 2, Team: "a", Class: Batch}
		i := &Request{ID: 3, Team: "b", Class: Interactive}
		g.Arrive(b)
		g.Arrive(i)
		d.finish(g, d.submitted[0])
		if d.submitted[1] != i || g.EnginePolicy() != EngineFCFS || i.Priority != 0 {
			t.Errorf("%s: dispatched %+v next (engine %s), want the interactive request (higher band), priority 0 on fcfs engines", g.Name(), d.submitted[1], g.EnginePolicy())
		}
	}
}

func TestEPPProgramAwareScores(t *testing.T) {
	d := &fakeDispatcher{}
	g := NewEPPProgramAware().(*eppGateway)
	g.Start(d, twoTeams(0.5, 0.5), 1)
	// a completes a request of 1000 + 2·100 tokens at t = 0.
	a0 := &Request{ID: 1, Team: "a", Prompt: 1000, Output: 100}
	g.Arrive(a0)
	d.finish(g, a0)
	if g.service["a"] != 1200 {
		t.Fatalf("a's attained service %v, want 1200 (prompt + 2 × completion, at completion)", g.service["a"])
	}
	// One request in flight; a's request has waited longer than b's, but
	// a's service is the largest: 0.8·0 + 0.2·1 = 0.2 < b's 0.8·1 + 0 = 0.8.
	g.Arrive(&Request{ID: 2, Team: "b"})
	d.now = time.Second
	g.Arrive(&Request{ID: 3, Team: "a", Arrival: time.Second})
	g.Arrive(&Request{ID: 4, Team: "b", Arrival: 2 * time.Second})
	d.now = 3 * time.Second
	d.finish(g, d.submitted[1])
	if got := d.submitted[2]; got.Team != "b" {
		t.Errorf("dispatched %s's request, want b's (least attained service)", got.Team)
	}
	// The service decays with the 60 s half-life.
	d.now = 63 * time.Second
	g.decay("a")
	if want := 1200 * math.Exp2(-63.0/60); math.Abs(g.service["a"]-want) > 1e-9 {
		t.Errorf("a's service after 63 s = %v, want %v", g.service["a"], want)
	}
}

func TestEPPProgramAwareHeadWaitBreaksTies(t *testing.T) {
	d := &fakeDispatcher{}
	g := NewEPPProgramAware()
	g.Start(d, twoTeams(0.5, 0.5), 1)
	g.Arrive(&Request{ID: 1, Team: "a"})
	// Equal (zero) service: b's older head wins on head wait although a
	// sorts first.
	g.Arrive(&Request{ID: 2, Team: "b", Arrival: 0})
	d.now = time.Second
	g.Arrive(&Request{ID: 3, Team: "a", Arrival: time.Second})
	d.now = 2 * time.Second
	d.finish(g, d.submitted[0])
	if d.submitted[1].ID != 2 {
		t.Errorf("dispatched request %d, want b's older one (2)", d.submitted[1].ID)
	}
}
