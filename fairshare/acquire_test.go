package fairshare

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestPriorityLayout(t *testing.T) {
	consts := []struct {
		name      string
		got, want int
	}{
		{"WithinShareBase", WithinShareBase, 0},
		{"BorrowBase", BorrowBase, 10},
		{"RankStep", RankStep, 10},
		{"MaxRank", MaxRank, 9},
		{"Interactive", int(Interactive), 0},
		{"Batch", int(Batch), 1},
	}
	for _, c := range consts {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	prios := []struct {
		rank  int
		class Class
		want  int
	}{
		{0, Interactive, 10}, {0, Batch, 11}, {1, Interactive, 20}, {3, Batch, 41},
		{9, Interactive, 100}, {9, Batch, 101}, {10, Interactive, 100}, {50, Batch, 101},
	}
	for _, tt := range prios {
		if got := borrowPriority(tt.rank, tt.class); got != tt.want {
			t.Errorf("borrowPriority(%d, %v) = %d, want %d", tt.rank, tt.class, got, tt.want)
		}
	}
}

func TestAcquireWithinShareThenBorrow(t *testing.T) {
	p := twoTeams(nil) // a: 6 slots, b: 4 slots
	var grants []Grant
	for i := range 8 {
		class := Class(i % 2)
		g := p.Acquire(base, 1, "a", class, 0)
		verify(t, p)
		wantBorrow := i >= 6
		wantPrio := int(class)
		if wantBorrow {
			wantPrio = BorrowBase + int(class) // the only team with usage 0 and a share: rank 0
		}
		if g.Borrowing != wantBorrow || g.Priority != wantPrio || g.Team != "a" || g.Class != class {
			t.Fatalf("Acquire #%d = %+v, want borrowing %v priority %d", i+1, g, wantBorrow, wantPrio)
		}
		grants = append(grants, g)
	}
	// A finished within-share request frees a within-share slot even while
	// the team has borrowers running.
	p.Release(base, &grants[0], 0)
	g := p.Acquire(base, 1, "a", Interactive, 0)
	if g.Borrowing || g.Priority != WithinShareBase {
		t.Fatalf("Acquire after a within-share release = %+v, want within share", g)
	}
	// Releasing a borrower does not free a within-share slot.
	p.Release(base, &grants[7], 0)
	if g := p.Acquire(base, 1, "a", Interactive, 0); !g.Borrowing {
		t.Fatalf("Acquire after a borrower's release = %+v, want borrowing", g)
	}
	verify(t, p)
}

func TestClassClamped(t *testing.T) {
	p := twoTeams(nil)
	for _, c := range []struct{ in, want Class }{{-3, Interactive}, {0, Interactive}, {1, Batch}, {7, Batch}} {
		if g := p.Acquire(base, 1, "a", c.in, 0); g.Class != c.want || g.Priority != int(c.want) {
			t.Errorf("Acquire(class %d) = %+v, want class %v", c.in, g, c.want)
		}
	}
}

func TestRank(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		teams   []TeamConfig
		usage   map[string]float64
		wantLF  map[string]float64
		wantRnk map[string]int
	}{
		{
			name:    "LF = S/U, highest first",
			teams:   []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.3}, {Name: "c", Share: 0.2}},
			usage:   map[string]float64{"a": 50, "b": 10, "c": 40},
			wantLF:  map[string]float64{"a": 1, "b": 3, "c": 0.5},
			wantRnk: map[string]int{"b": 0, "a": 1, "c": 2},
		},
		{
			name:    "no usage is +Inf, equal LF share a rank",
			teams:   []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25}},
			usage:   map[string]float64{"a": 10, "b": 0, "c": 0},
			wantLF:  map[string]float64{"a": 0.5, "b": inf, "c": inf},
			wantRnk: map[string]int{"b": 0, "c": 0, "a": 1},
		},
		{
			name:    "dense ranks after a tie",
			teams:   []TeamConfig{{Name: "a", Share: 0.25}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25}, {Name: "d", Share: 0.25}},
			usage:   map[string]float64{"a": 1, "b": 1, "c": 2, "d": 4},
			wantRnk: map[string]int{"a": 0, "b": 0, "c": 1, "d": 2},
		},
		{
			name:    "weight divides usage",
			teams:   []TeamConfig{{Name: "a", Share: 0.5, Weight: 2}, {Name: "b", Share: 0.5}},
			usage:   map[string]float64{"a": 30, "b": 20},
			wantLF:  map[string]float64{"a": 0.5 / (15.0 / 35), "b": 0.5 / (20.0 / 35)},
			wantRnk: map[string]int{"a": 0, "b": 1},
		},
		{
			name:    "zero, NaN and negative weight mean 1",
			teams:   []TeamConfig{{Name: "a", Share: 0.3, Weight: 0}, {Name: "b", Share: 0.3, Weight: math.NaN()}, {Name: "c", Share: 0.3, Weight: -2}},
			usage:   map[string]float64{"a": 1, "b": 1, "c": 1},
			wantLF:  map[string]float64{"a": 1, "b": 1, "c": 1},
			wantRnk: map[string]int{"a": 0, "b": 0, "c": 0},
		},
		{
			name:    "zero share ranks last whatever its usage",
			teams:   []TeamConfig{{Name: "a", Share: 0.5}, {Name: "z", Share: 0}},
			usage:   map[string]float64{"a": 100, "z": 0},
			wantLF:  map[string]float64{"a": 1, "z": 0},
			wantRnk: map[string]int{"a": 0, "z": 1},
		},
		{
			name:    "NaN, infinite and negative shares count as 0: last",
			teams:   []TeamConfig{{Name: "a", Share: math.NaN()}, {Name: "b", Share: inf}, {Name: "c", Share: -1}, {Name: "d", Share: 0.5}},
			usage:   map[string]float64{"a": 0, "b": 5, "c": 1, "d": 9},
			wantLF:  map[string]float64{"a": 0, "b": 0, "c": 0, "d": 1 / (9.0 / 15)},
			wantRnk: map[string]int{"d": 0, "a": 1, "b": 1, "c": 1},
		},
		{
			name:    "unknown team ranks last",
			teams:   []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
			usage:   map[string]float64{"a": 100, "b": 1, "*": 0},
			wantLF:  map[string]float64{"a": 0.5 / (100.0 / 101), "b": 0.5 / (1.0 / 101), "*": 0},
			wantRnk: map[string]int{"b": 0, "a": 1, "*": 2},
		},
		{
			name:    "no usage anywhere: every team with a share ties at +Inf",
			teams:   []TeamConfig{{Name: "a", Share: 0.9}, {Name: "b", Share: 0.1}},
			usage:   map[string]float64{},
			wantLF:  map[string]float64{"a": inf, "b": inf},
			wantRnk: map[string]int{"a": 0, "b": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPool("p", Config{Capacity: 4, Teams: tt.teams, HalfLife: time.Hour}, base)
			for team, u := range tt.usage {
				p.SetUsage(base, team, u)
			}
			verify(t, p)
			for _, s := range p.Snapshot(base) {
				if want, ok := tt.wantLF[s.Team]; ok && !closeRel(s.LevelFairshare, want, 1e-12) {
					t.Errorf("LF[%s] = %v, want %v", s.Team, s.LevelFairshare, want)
				}
				if want, ok := tt.wantRnk[s.Team]; ok && s.Rank != want {
					t.Errorf("Rank[%s] = %d, want %d", s.Team, s.Rank, want)
				}
			}
			// Borrowers get the priority of their rank.
			p.SetCapacity(0)
			for team, want := range tt.wantRnk {
				if g := p.Acquire(base, 1, team, Batch, 0); g.Priority != BorrowBase+want*RankStep+1 {
					t.Errorf("Acquire(%s) priority = %d, want %d", team, g.Priority, BorrowBase+want*RankStep+1)
				}
			}
		})
	}
}

func TestRankCappedAtMaxRank(t *testing.T) {
	var teams []TeamConfig
	for i := range 12 {
		teams = append(teams, TeamConfig{Name: fmt.Sprintf("t%02d", i), Share: 1.0 / 12})
	}
	p := NewPool("p", Config{Capacity: 0, Teams: teams}, base)
	for i := range 12 {
		p.SetUsage(base, teams[i].Name, float64(i+1))
	}
	for i := range 12 {
		want := BorrowBase + min(i, MaxRank)*RankStep
		if g := p.Acquire(base, 1, teams[i].Name, Interactive, 0); g.Priority != want {
			t.Errorf("Acquire(%s) priority = %d, want %d", teams[i].Name, g.Priority, want)
		}
	}
	if s := stat(t, p, base, "t11"); s.Rank != 11 {
		t.Errorf("Snapshot rank of t11 = %d, want 11 (uncapped)", s.Rank)
	}
}

func TestUnknownTeams(t *testing.T) {
	p := twoTeams(nil)
	names := []string{"intruder", "", "*", "other", "a "}
	for i, name := range names {
		g := p.Acquire(base, 1, name, Interactive, 0)
		if g.Team != UnknownTeam || !g.Borrowing {
			t.Fatalf("Acquire(%q) = %+v, want an UnknownTeam borrower", name, g)
		}
		verify(t, p)
		if n := len(p.Snapshot(base)); n != 3 {
			t.Fatalf("after %d unknown teams Snapshot has %d entries, want 3 (a, b, *)", i+1, n)
		}
	}
	if s := stat(t, p, base, UnknownTeam); s.InFlight != len(names) || s.Borrowing != len(names) || s.Share != 0 || s.Reserved != 0 {
		t.Fatalf("UnknownTeam stat = %+v", s)
	}
	// A configuration cannot name a team "*" or "".
	q := NewPool("p", Config{Capacity: 4, Teams: []TeamConfig{{Name: "*", Share: 0.5}, {Name: "", Share: 0.5}, {Name: "a", Share: 0.5}, {Name: "a", Share: 0.1}}}, base)
	if got := q.Reserved(); len(got) != 1 || got["a"] != 2 {
		t.Fatalf("Reserved() = %v, want map[a:2]", got)
	}
}

func TestSaturatedAndTryAcquire(t *testing.T) {
	p := NewPool("p", Config{Capacity: 3, Teams: []TeamConfig{{Name: "a", Share: 1}}}, base)
	for i := range 5 {
		g := p.Acquire(base, 1, "a", Interactive, 0)
		if want := i >= 3; g.Saturated != want {
			t.Fatalf("Acquire #%d Saturated = %v, want %v", i+1, g.Saturated, want)
		}
	}
	q := NewPool("p", Config{Capacity: 2, Teams: []TeamConfig{{Name: "a", Share: 1}}}, base)
	g1, ok1 := q.TryAcquire(base, 1, "a", Interactive, 0)
	g2, ok2 := q.TryAcquire(base, 1, "b", Interactive, 0)
	g3, ok3 := q.TryAcquire(base, 1, "a", Interactive, 0)
	if !ok1 || !ok2 || ok3 || g1.Saturated || g2.Saturated {
		t.Fatalf("TryAcquire ×3 = %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if q.inFlight() != 2 || q.Release(base, &g3, 1) {
		t.Fatalf("a refused TryAcquire counted a request (in flight %d)", q.inFlight())
	}
	// Phantoms count as in flight.
	q.Release(base, &g1, 0)
	q.AddPhantoms(base, "a", 1, at(time.Minute))
	if _, ok := q.TryAcquire(base, 1, "a", Interactive, 0); ok {
		t.Fatal("TryAcquire succeeded with C requests in flight counting a phantom")
	}
	verify(t, q)
}
