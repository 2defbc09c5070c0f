package fairshare

import (
	"math"
	"testing"
	"time"
)

func TestReleaseOnce(t *testing.T) {
	p := twoTeams(func(c *Config) { c.HalfLife = time.Hour })
	g := p.Acquire(base, 1, "a", Interactive, 0)
	if !p.Release(at(time.Second), &g, 4) {
		t.Fatal("first Release = false")
	}
	before := dump(p)
	for range 3 {
		if p.Release(at(2*time.Second), &g, 4) {
			t.Fatal("second Release = true")
		}
	}
	if after := dump(p); after != before {
		t.Fatalf("a second Release changed the pool:\n%s\n%s", before, after)
	}
	if p.Release(base, nil, 1) {
		t.Fatal("Release(nil) = true")
	}
	// CAS callers copy the grant per attempt: a failed attempt leaves the
	// original releasable.
	g2 := p.Acquire(base, 1, "a", Interactive, 0)
	attempt := g2
	p.Release(base, &attempt, 1) // imagine the write failed
	if g2.released || !attempt.released {
		t.Fatal("Release marked the original grant")
	}
}

func TestReleaseConsumption(t *testing.T) {
	tests := []struct {
		consumed float64
		want     float64
	}{
		{5, 5}, {0, 0}, {-3, 0}, {math.NaN(), 0}, {math.Inf(1), 0}, {math.Inf(-1), 0}, {1e300, maxUsage},
	}
	for _, tt := range tests {
		p := twoTeams(nil)
		g := p.Acquire(base, 1, "a", Interactive, 0)
		p.Release(base, &g, tt.consumed)
		if s := stat(t, p, base, "a"); s.Usage != tt.want || s.InFlight != 0 {
			t.Errorf("Release(%v): usage %v in flight %d, want %v and 0", tt.consumed, s.Usage, s.InFlight, tt.want)
		}
		verify(t, p)
	}
}

// TestEntryPenalty is Kueue's example: a tenant that submits many requests
// at once is deprioritised from its second one on, and after settlement
// its usage is exactly what it consumed.
func TestEntryPenalty(t *testing.T) {
	for _, penalty := range []bool{false, true} {
		p := NewPool("p", Config{
			Capacity:     2,
			Teams:        []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
			HalfLife:     time.Hour,
			EntryPenalty: penalty,
		}, base)
		var gb []Grant
		for range 100 {
			gb = append(gb, p.Acquire(base, 1, "b", Interactive, 2))
		}
		ga := p.Acquire(base, 1, "a", Interactive, 2)
		ga2 := p.Acquire(base, 1, "a", Interactive, 2)
		verify(t, p)
		wantB := BorrowBase // without the penalty, b's borrowers tie with a's at rank 0
		if penalty {
			wantB = BorrowBase + RankStep
		}
		if gb[0].Priority != 0 || gb[1].Priority != wantB || gb[99].Priority != wantB {
			t.Errorf("penalty %v: b's priorities %d, %d, %d, want 0, %d, %d", penalty, gb[0].Priority, gb[1].Priority, gb[99].Priority, wantB, wantB)
		}
		if ga.Priority != 0 || ga2.Priority != BorrowBase {
			t.Errorf("penalty %v: a's priorities %d, %d, want 0, %d", penalty, ga.Priority, ga2.Priority, BorrowBase)
		}
		wantUsage := 0.0
		if penalty {
			wantUsage = 200
		}
		if s := stat(t, p, base, "b"); s.Usage != wantUsage {
			t.Errorf("penalty %v: b's usage before settlement = %v, want %v", penalty, s.Usage, wantUsage)
		}
		// Settle at various times: usage becomes the decayed consumption.
		want := 0.0
		end := at(3 * time.Hour)
		for i := range gb {
			when := at(time.Duration(i) * time.Minute)
			p.Release(when, &gb[i], 1)
			want += math.Exp(-math.Ln2 * end.Sub(when).Hours())
		}
		if s := stat(t, p, end, "b"); !closeRel(s.Usage, want, 1e-9) {
			t.Errorf("penalty %v: b's usage after settlement = %v, want %v", penalty, s.Usage, want)
		}
		verify(t, p)
	}
}

func TestEntryPenaltySettlesExactly(t *testing.T) {
	p := twoTeams(func(c *Config) { c.EntryPenalty = true; c.HalfLife = 10 * time.Minute })
	g := p.Acquire(base, 1, "a", Interactive, 1000)
	p.Release(at(7*time.Minute+3*time.Second), &g, 12.5)
	if s := stat(t, p, at(7*time.Minute+3*time.Second), "a"); s.Usage != 12.5 {
		t.Fatalf("usage after settlement = %v, want exactly 12.5", s.Usage)
	}
	// Released before the charge time (another VM's clock is behind): the
	// whole penalty is removed.
	g = p.Acquire(at(8*time.Minute), 1, "b", Interactive, 50)
	p.Release(at(7*time.Minute), &g, 0)
	if s := stat(t, p, at(8*time.Minute), "b"); s.Usage != 0 {
		t.Fatalf("usage after an early settlement = %v, want 0", s.Usage)
	}
}
