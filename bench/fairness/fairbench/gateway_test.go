package fairbench

import (
	"testing"
	"time"
)

// fakeDispatcher records submissions; tests finish requests by hand.
type fakeDispatcher struct {
	now       time.Duration
	inflight  int
	submitted []*Request
}

func (f *fakeDispatcher) Now() time.Duration { return f.now }
func (f *fakeDispatcher) InFlight() int      { return f.inflight }
func (f *fakeDispatcher) After(time.Duration, func()) {
	panic("fakeDispatcher: After is not used by the gateways under test")
}
func (f *fakeDispatcher) Submit(r *Request, prio int) {
	r.Priority = prio
	f.inflight++
	f.submitted = append(f.submitted, r)
}

func (f *fakeDispatcher) finish(g Gateway, r *Request) {
	f.inflight--
	g.Finish(r)
}

func twoTeams(a, b float64) *Scenario {
	return &Scenario{Name: "g", Duration: 10, Teams: []TeamSpec{{Name: "a", Share: a}, {Name: "b", Share: b}}}
}

func TestPassThroughPriorities(t *testing.T) {
	for _, tt := range []struct {
		gw         Gateway
		policy     string
		inter, bat int
	}{
		{NewFCFS(), EngineFCFS, 0, 0},
		{NewClassPriority(), EnginePriority, 0, 1},
	} {
		d := &fakeDispatcher{}
		tt.gw.Start(d, twoTeams(0.5, 0.5), 4)
		i := &Request{ID: 1, Team: "a", Class: Interactive}
		b := &Request{ID: 2, Team: "a", Class: Batch}
		tt.gw.Arrive(i)
		tt.gw.Arrive(b)
		if tt.gw.EnginePolicy() != tt.policy || i.Priority != tt.inter || b.Priority != tt.bat || len(d.submitted) != 2 {
			t.Errorf("%s: policy %s, priorities %d/%d, submitted %d; want %s, %d/%d, 2",
				tt.gw.Name(), tt.gw.EnginePolicy(), i.Priority, b.Priority, len(d.submitted), tt.policy, tt.inter, tt.bat)
		}
	}
}

func TestQuotaHoldsAtCeiling(t *testing.T) {
	d := &fakeDispatcher{}
	g := NewQuota()
	g.Start(d, twoTeams(0.3, 0.7), 10) // ceilings 3 and 7
	var reqs []*Request
	for i := 0; i < 5; i++ {
		r := &Request{ID: int64(i), Team: "a"}
		reqs = append(reqs, r)
		g.Arrive(r)
	}
	if len(d.submitted) != 3 {
		t.Fatalf("submitted %d of team a's 5 requests, want its ceiling 3", len(d.submitted))
	}
	// Not work-conserving: b's idle 7 slots are not lent.
	d.finish(g, reqs[0])
	if len(d.submitted) != 4 || d.submitted[3] != reqs[3] {
		t.Fatalf("after one completion: submitted %d, want 4 with the oldest held request next", len(d.submitted))
	}
	g.SetCapacity(20) // ceiling of a: 6
	if len(d.submitted) != 5 {
		t.Errorf("after SetCapacity(20): submitted %d, want 5", len(d.submitted))
	}
}

func TestVTCServesSmallestCounter(t *testing.T) {
	d := &fakeDispatcher{}
	g := NewVTC().(*vtc)
	g.Start(d, twoTeams(0.5, 0.5), 1)
	// a: one long prompt in flight; then a and b both queue.
	a1 := &Request{ID: 1, Team: "a", Prompt: 1000, Output: 10}
	g.Arrive(a1)
	a2 := &Request{ID: 2, Team: "a", Prompt: 10, Output: 10}
	b1 := &Request{ID: 3, Team: "b", Prompt: 10, Output: 10}
	g.Arrive(a2)
	g.Arrive(b1)
	if len(d.submitted) != 1 {
		t.Fatalf("submitted %d with C = 1, want 1", len(d.submitted))
	}
	d.finish(g, a1)
	if d.submitted[1] != b1 {
		t.Fatalf("after a's 1000-token request, VTC dispatched team %s, want b (smaller counter)", d.submitted[1].Team)
	}
	// Counters: a = (1000 + 2·10)/0.5; b was lifted to a's counter when it
	// became backlogged (a was the only other backlogged team), then
	// charged its prompt.
	if got, want := g.counter["a"], (1000+2*10)/0.5; got != want {
		t.Errorf("counter a = %v, want %v", got, want)
	}
	if got, want := g.counter["b"], 1000/0.5+10/0.5; got != want {
		t.Errorf("counter b = %v, want %v (lifted to a's 2000, plus its prompt)", got, want)
	}
}

func TestVTCLiftForgetsIdleTime(t *testing.T) {
	d := &fakeDispatcher{}
	g := NewVTC().(*vtc)
	g.Start(d, twoTeams(0.5, 0.5), 100)
	// a works alone for a while.
	for i := 0; i < 10; i++ {
		r := &Request{ID: int64(i), Team: "a", Prompt: 100, Output: 50}
		g.Arrive(r)
		d.finish(g, r)
	}
	b := &Request{ID: 100, Team: "b", Prompt: 1, Output: 1}
	g.Arrive(b)
	// No team was backlogged when b arrived: it is lifted to the counter
	// of the team served last (a), so its idle time earned no credit.
	if g.counter["b"] < g.counter["a"] {
		t.Errorf("counter b = %v < counter a = %v: idle time earned credit", g.counter["b"], g.counter["a"])
	}
}

// TestNativeFlowHoldsBorrowersAndKeepsLentSlots: with C = 4 and two
// teams of share 0.5, team a fills its 2 slots and borrows what b lends;
// with b's lending limit 0.5 only one of b's slots is lent, so a's fourth
// request is held, b's request goes at once within share, and a's held
// request goes when one of a's finishes, at the priority decided then.
func TestNativeFlowHoldsBorrowersAndKeepsLentSlots(t *testing.T) {
	half := 0.5
	s := &Scenario{Name: "g", Duration: 10, Engine: EngineSpec{Preset: "demo"},
		Teams: []TeamSpec{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5, LendingLimit: &half}}}
	for _, tt := range []struct {
		name     string
		ablation string
		heldA    int // a's requests held of 4
	}{
		{"lending limit", AblationNativeFlow, 1},
		{"no lending limit", AblationNativeFlowNoLend, 0},
	} {
		d := &fakeDispatcher{}
		g := NewAblation(tt.ablation)()
		if err := g.Start(d, s, 4); err != nil {
			t.Fatal(err)
		}
		var a []*Request
		for i := range 4 {
			r := &Request{ID: int64(i + 1), Team: "a", Class: Batch, Prompt: 10, MaxTokens: 10, Output: 5}
			a = append(a, r)
			g.Arrive(r)
		}
		if held := 4 - len(d.submitted); held != tt.heldA {
			t.Fatalf("%s: %d of a's 4 requests held, want %d", tt.name, held, tt.heldA)
		}
		b := &Request{ID: 10, Team: "b", Class: Interactive, Prompt: 10, MaxTokens: 10, Output: 5}
		g.Arrive(b)
		if d.submitted[len(d.submitted)-1] != b || b.Priority != 0 || b.Borrowing {
			t.Fatalf("%s: b's request not sent at once within share (priority %d, borrowing %v)", tt.name, b.Priority, b.Borrowing)
		}
		if tt.heldA == 0 {
			continue
		}
		n := len(d.submitted)
		d.now = time.Second
		d.finish(g, a[0])
		if len(d.submitted) != n+1 || d.submitted[n] != a[3] {
			t.Fatalf("%s: a's held request not dispatched when a's first finished (%d submitted, want %d)", tt.name, len(d.submitted), n+1)
		}
		if a[3].Borrowing || a[3].Priority != 1 {
			t.Errorf("%s: a's held request went at priority %d (borrowing %v), want 1 (within share at dispatch: a has 2 in flight again)", tt.name, a[3].Priority, a[3].Borrowing)
		}
	}
}
