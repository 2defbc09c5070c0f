package fairshare

import (
	"math"
	"math/big"
	"sort"
	"testing"
	"time"
)

// A RequestTimeout change must keep the record decodable and keep the
// requests in flight counted with their standing until they are released.
func TestReconfigureRequestTimeoutKeepsCounts(t *testing.T) {
	for _, tc := range []struct{ from, to time.Duration }{
		{10 * time.Minute, time.Minute},
		{time.Minute, 10 * time.Minute},
		{time.Minute, 0},
		{0, time.Minute},
	} {
		cfg := Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
			HolderTimeout: time.Hour, RequestTimeout: tc.from}
		start := at(1000 * time.Hour)
		p := NewPool("p", cfg, start)
		g1 := p.Acquire(start, 1, "a", Interactive, 0)
		g2 := p.Acquire(start.Add(30*time.Second), 1, "a", Interactive, 0)
		now := start.Add(40 * time.Second)
		cfg.RequestTimeout = tc.to
		p.Reconfigure(now, cfg)
		verify(t, p)
		rec, _ := p.AppendBinary(nil)
		var q Pool
		if err := q.UnmarshalBinary(rec); err != nil {
			t.Fatalf("%v -> %v: the record does not decode: %v", tc.from, tc.to, err)
		}
		if s := stat(t, &q, now, "a"); s.InFlight != 2 || s.Borrowing != 0 {
			t.Fatalf("%v -> %v: a after Reconfigure: %+v, want 2 within share in flight", tc.from, tc.to, s)
		}
		if g := q.Acquire(now, 1, "a", Interactive, 0); !g.Borrowing {
			t.Fatalf("%v -> %v: a has 2 within-share requests of 2 reserved in flight: Acquire = %+v, want borrowing", tc.from, tc.to, g)
		}
		q.Release(now, &g1, 0)
		q.Release(now, &g2, 0)
		if s := stat(t, &q, now, "a"); s.InFlight != 1 {
			t.Fatalf("%v -> %v: a after releasing both: %+v, want 1 in flight", tc.from, tc.to, s)
		}
		verify(t, &q)
	}
}

// Teams whose level fairshare is equal in exact arithmetic share a rank,
// even when rounding makes the computed values differ in the last bits
// (shares 0.05 and 0.15, usage in the same proportion: LF 6.514285714285715
// and 6.514285714285713); Snapshot and Acquire agree.
func TestEqualLevelFairshareShareRank(t *testing.T) {
	ties := 0
	for a := 1; a < 20; a++ {
		for b := 1; b < 20; b++ {
			for k := 1; k < 10; k++ {
				sa, sb := float64(a)/20, float64(b)/20
				cfg := Config{Capacity: 0, Teams: []TeamConfig{{Name: "a", Share: sa}, {Name: "b", Share: sb}, {Name: "c", Share: 0.05}}}
				p := NewPool("p", cfg, base)
				p.Charge(base, "a", sa*float64(k)*0.7)
				p.Charge(base, "b", sb*float64(k)*0.7)
				p.Charge(base, "c", 1)
				s := p.Snapshot(base)
				if s[0].LevelFairshare != s[1].LevelFairshare {
					ties++
				}
				if s[0].Rank != s[1].Rank {
					t.Fatalf("shares %v/%v, usage %v×: LF %v and %v ranked %d and %d, want one rank",
						sa, sb, 0.7*float64(k), s[0].LevelFairshare, s[1].LevelFairshare, s[0].Rank, s[1].Rank)
				}
				ga := p.Acquire(base, 1, "a", Interactive, 0)
				gb := p.Acquire(base, 1, "b", Interactive, 0)
				if ga.Priority != gb.Priority || ga.Priority != BorrowBase+s[0].Rank*RankStep {
					t.Fatalf("shares %v/%v: priorities %d and %d, snapshot rank %d", sa, sb, ga.Priority, gb.Priority, s[0].Rank)
				}
			}
		}
	}
	if ties == 0 {
		t.Fatal("no case with rounding differences: the test checks nothing")
	}
	// Values further apart than the tolerance keep their order.
	p := NewPool("p", Config{Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}}, base)
	p.Charge(base, "a", 1)
	p.Charge(base, "b", 1+1e-6)
	if s := p.Snapshot(base); s[0].Rank != 0 || s[1].Rank != 1 {
		t.Fatalf("usage 1 and 1+1e-6: ranks %d and %d, want 0 and 1", s[0].Rank, s[1].Rank)
	}
}

// apportionExact is the largest-remainder method in exact rational
// arithmetic, on shares given in hundredths: ties broken by name order.
func apportionExact(c int, names []string, hundredths []int64) []int64 {
	out := make([]int64, len(names))
	rem := make([]*big.Rat, len(names))
	given := int64(0)
	for i, h := range hundredths {
		q := new(big.Rat).SetFrac64(h*int64(c), 100)
		f := new(big.Int).Quo(q.Num(), q.Denom())
		out[i] = f.Int64()
		rem[i] = q.Sub(q, new(big.Rat).SetInt(f))
		given += out[i]
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		if d := rem[order[i]].Cmp(rem[order[j]]); d != 0 {
			return d > 0
		}
		return names[order[i]] < names[order[j]]
	})
	for k := 0; given < int64(c) && k < len(order); k++ {
		if hundredths[order[k]] > 0 {
			out[order[k]]++
			given++
		}
	}
	return out
}

// Remainders that are equal in decimal tie and go by name order, even when
// share × C rounds them apart (0.01 and 0.11 of 40: 0.4 both, a first).
func TestApportionDecimalTies(t *testing.T) {
	names := []string{"a", "b", "c"}
	for a := int64(1); a < 100; a += 2 {
		for b := int64(1); a+b <= 100; b += 3 {
			for c := 1; c <= 40; c++ {
				h := []int64{a, b, 100 - a - b}
				got := apportionMap(c, names, map[string]float64{"a": float64(a) / 100, "b": float64(b) / 100, "c": float64(h[2]) / 100})
				want := apportionExact(c, names, h)
				for i, n := range names {
					if int64(got[n]) != want[i] {
						t.Fatalf("apportionMap(%d, shares %v%%) = %v, want %v", c, h, got, want)
					}
				}
			}
		}
	}
}

// Shares summing to 1 in decimal fill all C slots at any capacity.
func TestApportionLargeCapacityFills(t *testing.T) {
	names := make([]string, 10)
	shares := map[string]float64{}
	for i := range names {
		names[i] = string(rune('a' + i))
		shares[names[i]] = 0.1
	}
	for _, c := range []int{10, 7, 1, 1 << 20, 999_999_937, 1 << 30} {
		sum := 0
		for _, r := range apportionMap(c, names, shares) {
			sum += r
		}
		if sum != c {
			t.Errorf("apportionMap(%d, 10 × 0.1) sums to %d, want %d", c, sum, c)
		}
	}
}

// Shares too large to sum in float64 are still scaled down to sum to 1, and
// still rank the teams.
func TestHugeShares(t *testing.T) {
	r := apportionMap(10, []string{"a", "b"}, map[string]float64{"a": 1e308, "b": 1e308})
	if r["a"] != 5 || r["b"] != 5 {
		t.Errorf("apportionMap(10, 1e308 each) = %v, want 5 each", r)
	}
	p := NewPool("p", Config{Capacity: 10, Teams: []TeamConfig{{Name: "a", Share: 1e308}, {Name: "b", Share: 1e308}}}, base)
	p.Charge(base, "a", 1)
	p.Charge(base, "b", 2)
	p.Charge(base, "x", 1)
	s := p.Snapshot(base)
	if s[0].Rank != 0 || s[1].Rank != 1 || s[2].Rank != 2 || s[0].Reserved != 5 {
		t.Errorf("shares 1e308: %+v, want a rank 0, b rank 1, unknown rank 2, 5 slots each", s)
	}
	verify(t, p)
}

// Settling an entry penalty much larger than the team's usage leaves the
// usage it had, exactly: the penalty is not added to and subtracted from
// the usage in floating point (which loses the usage's low digits, or all
// of it).
func TestLargePenaltySettlesExactly(t *testing.T) {
	for _, hl := range []time.Duration{0, time.Hour} {
		for _, tc := range []struct{ usage, estimate, consumed float64 }{
			{0.7, 1e8, 0},
			{1e-6, 1e7, 0},
			{0.123456789, 1e9, 0.001},
		} {
			p := NewPool("p", Config{Capacity: 4, HalfLife: hl, EntryPenalty: true,
				Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}}, base)
			p.Charge(base, "a", tc.usage)
			gs := []Grant{p.Acquire(base, 1, "a", Interactive, tc.estimate), p.Acquire(at(time.Minute), 1, "a", Batch, tc.estimate/3)}
			for k := range gs {
				p.Release(at(2*time.Minute), &gs[k], tc.consumed)
			}
			f := 1.0
			if hl > 0 {
				f = math.Exp(-math.Ln2 * float64(2*time.Minute) / float64(hl))
			}
			want := tc.usage*f + 2*tc.consumed
			if got := stat(t, p, at(2*time.Minute), "a").Usage; !closeRel(got, want, 1e-9) {
				t.Errorf("half-life %v, usage %v, penalty %v settled: usage %v, want %v", hl, tc.usage, tc.estimate, got, want)
			}
			// b has used nothing: it ranks above a, which has.
			if s := p.Snapshot(at(2 * time.Minute)); s[0].Rank <= s[1].Rank {
				t.Errorf("half-life %v, usage %v: a (used %v) ranks %d, b (used nothing) %d", hl, tc.usage, s[0].Usage, s[0].Rank, s[1].Rank)
			}
			verify(t, p)
		}
	}
}

// Thousands of VMs that come, hold requests and vanish leave a bounded
// holder table and record: dead holders are removed, their phantoms expire.
func TestHolderChurnBounded(t *testing.T) {
	for _, ht := range []time.Duration{0, 3 * time.Second} {
		cfg := Config{Capacity: 8, Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
			HolderTimeout: ht, RequestTimeout: 10 * time.Second, HalfLife: time.Minute, EntryPenalty: true}
		p := NewPool("p", cfg, base)
		maxHolders, maxLen := 0, 0
		var open []Grant
		for k := range 5000 {
			now := at(time.Duration(k) * 100 * time.Millisecond)
			id := uint32(k)*2654435761 + 1
			g := p.Acquire(now, id, []string{"a", "b"}[k%2], Class(k%2), 3)
			if k%3 == 0 {
				open = append(open, g) // never released by this VM: it dies
			} else {
				p.Release(now, &g, 2)
			}
			p.Heartbeat(now, 7)
			rec, _ := p.AppendBinary(nil)
			maxHolders, maxLen = max(maxHolders, len(p.holders)), max(maxLen, len(rec))
		}
		if maxHolders > 200 || maxLen > 4096 {
			t.Errorf("HolderTimeout %v: up to %d holders, record up to %d bytes", ht, maxHolders, maxLen)
		}
		// Late releases of the dead VMs' grants are harmless.
		now := at(5000*100*time.Millisecond + time.Minute)
		for k := range open {
			p.Release(now, &open[k], 1)
		}
		if p.inFlight() != 0 {
			t.Errorf("HolderTimeout %v: %d in flight after everything finished", ht, p.inFlight())
		}
		verify(t, p)
	}
}

// Phantoms count for Saturated and TryAcquire, and hold within-share slots.
func TestPhantomsSaturate(t *testing.T) {
	p := twoTeams(func(c *Config) { c.Capacity = 4; c.RequestTimeout = time.Minute; c.HolderTimeout = time.Second })
	r := p.Reserved()
	p.AddPhantoms(base, "a", r["a"], at(time.Minute))
	if g := p.Acquire(base, 1, "a", Interactive, 0); !g.Borrowing {
		t.Fatalf("a's reservation is taken by phantoms: %+v, want borrowing", g)
	}
	for p.inFlight() < p.Capacity() {
		p.Acquire(base, 1, "b", Interactive, 0)
	}
	if g, ok := p.TryAcquire(base, 1, "b", Interactive, 0); ok {
		t.Fatalf("TryAcquire on a full pool (phantoms included) = %+v", g)
	}
	if g := p.Acquire(base, 1, "b", Interactive, 0); !g.Saturated {
		t.Fatalf("Acquire on a full pool = %+v, want Saturated", g)
	}
	// Once the phantoms expire, a's slots come back.
	if g := p.Acquire(at(2*time.Minute), 2, "a", Interactive, 0); g.Borrowing {
		t.Fatalf("after the phantoms expired: %+v, want within share", g)
	}
	verify(t, p)
}

// Disabling leases drops the holders that hold nothing: with HolderTimeout
// 0 holders are only recorded while they hold requests.
func TestDisablingLeasesDropsIdleHolders(t *testing.T) {
	cfg := Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 1}}, HolderTimeout: time.Minute}
	p := NewPool("p", cfg, base)
	for id := range uint32(100) {
		p.Heartbeat(base, id)
	}
	g := p.Acquire(base, 7, "a", Interactive, 0)
	cfg.HolderTimeout = 0
	p.Reconfigure(at(time.Second), cfg)
	if len(p.holders) != 1 {
		t.Fatalf("leases disabled: %d holders, want 1 (the one holding a request)", len(p.holders))
	}
	p.Release(at(time.Second), &g, 0)
	if len(p.holders) != 0 {
		t.Fatalf("after the release: %d holders, want 0", len(p.holders))
	}
	verify(t, p)
}
