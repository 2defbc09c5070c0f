package fairshare

import (
	"math"
	"testing"
	"time"
)

func TestSnapshot(t *testing.T) {
	p := NewPool("p", Config{
		Capacity:     10,
		Teams:        []TeamConfig{{Name: "zeta", Share: 0.6, Weight: 2}, {Name: "alpha", Share: 0.2}},
		HalfLife:     time.Hour,
		EntryPenalty: true,
	}, base)
	p.Charge(base, "zeta", 40)
	p.Charge(base, "alpha", 10)
	p.Acquire(base, 1, "zeta", Batch, 0)
	p.Acquire(base, 1, "alpha", Interactive, 2) // penalty 2
	p.Acquire(base, 1, "alpha", Interactive, 3) // penalty 3; alpha has 2 slots: within
	p.Acquire(base, 1, "alpha", Interactive, 1) // borrows
	p.Acquire(base, 1, "visitor", Batch, 0)
	p.AddPhantoms(base, "zeta", 2, at(time.Minute))
	snap := p.Snapshot(base)
	// alpha: usage 16, zeta: 40/2 = 20 weighted; Σ = 36.
	want := []TeamStat{
		{Team: "zeta", Share: 0.6, NormalizedShare: 0.75, Weight: 2, WeightedShare: 20.0 / 36, Reserved: 6,
			InFlight: 1, Usage: 40, LevelFairshare: 0.75 / (20.0 / 36), Rank: 0, Phantoms: 2, PhantomsWithin: 2, LastUpdate: base},
		{Team: "alpha", Share: 0.2, NormalizedShare: 0.25, Weight: 1, WeightedShare: 16.0 / 36, Reserved: 2,
			InFlight: 3, Borrowing: 1, InFlightEstimate: 6, Usage: 16, LevelFairshare: 0.25 / (16.0 / 36), Rank: 1, LastUpdate: base},
		{Team: UnknownTeam, Weight: 1, InFlight: 1, Borrowing: 1, Rank: 2},
	}
	if len(snap) != len(want) {
		t.Fatalf("Snapshot() has %d entries, want %d", len(snap), len(want))
	}
	for i := range want {
		g, w := snap[i], want[i]
		ok := g.Team == w.Team && g.Share == w.Share && closeRel(g.NormalizedShare, w.NormalizedShare, 1e-12) &&
			g.Weight == w.Weight && closeRel(g.WeightedShare, w.WeightedShare, 1e-12) && g.Reserved == w.Reserved &&
			g.InFlight == w.InFlight && g.Borrowing == w.Borrowing && g.InFlightEstimate == w.InFlightEstimate &&
			g.Usage == w.Usage && closeRel(g.LevelFairshare, w.LevelFairshare, 1e-12) && g.Phantoms == w.Phantoms &&
			g.PhantomsWithin == w.PhantomsWithin && g.Rank == w.Rank && g.LastUpdate.Equal(w.LastUpdate)
		if !ok {
			t.Errorf("Snapshot()[%d] =\n %+v\nwant\n %+v", i, g, w)
		}
	}
	if !snap[2].LastUpdate.IsZero() {
		t.Errorf("LastUpdate of a never-charged team = %v, want zero", snap[2].LastUpdate)
	}
	if math.IsNaN(snap[2].LevelFairshare) {
		t.Error("LF is NaN")
	}
}
