package fairshare

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// workPool is a pool of sequences and work: C = 10 (seats to spare), X =
// 100 cost units a second, buckets of 1 s, teams a and b of share 0.5
// (reserved rates 50 units/s each, buckets of 50 units), a queue.
func workPool(mod func(*Config)) *Pool {
	cfg := Config{Capacity: 10, Throughput: 100, ThroughputBurst: time.Second, RequestTimeout: time.Hour,
		QueueLimit: 16, MaxQueueTime: time.Hour,
		Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}}
	if mod != nil {
		mod(&cfg)
	}
	return NewPool("work", cfg, base)
}

// TestKindsWorkBucket: a team's requests are within share while their
// work fits its bucket (B × its reserved rate, less its debt), or its debt
// is 0; a borrower is not charged; the debt pays down at the reserved
// rate as time passes, with no release in between.
func TestKindsWorkBucket(t *testing.T) {
	p := workPool(func(c *Config) { c.Capacity = 100 }) // seats for every step
	if s := stat(t, p, base, "a"); s.ReservedWork != 50 || s.WorkBurst != 50 || s.WorkDebt != 0 {
		t.Fatalf("a: reserved rate %d, bucket %v, debt %v; want 50, 50, 0", s.ReservedWork, s.WorkBurst, s.WorkDebt)
	}
	steps := []struct {
		at        time.Duration
		estimate  float64
		borrowing bool
		debt      float64 // a's debt after the step
	}{
		{0, 20, false, 20},
		{0, 20, false, 40},
		{0, 20, true, 40},                         // 40 + 20 > 50: borrows, not charged
		{0, 10, false, 50},                        // 40 + 10 = 50 fits exactly
		{0, 0.4, false, 50},                       // rounded to a demand of 0: 50 + 0 fits, charging nothing
		{0, 1, true, 50},                          // the bucket is empty
		{200 * time.Millisecond, 10, false, 50},   // paid down 10, charged 10
		{10 * time.Second, 500, false, 500},       // debt 0: one request whatever its size
		{10 * time.Second, 1, true, 500},          // nothing paid down at the same time
		{19900 * time.Millisecond, 45, false, 50}, // 500 − 9.9 s × 50 = 5, + 45
	}
	for k, s := range steps {
		g := p.Acquire(at(s.at), 1, "a", Interactive, s.estimate)
		verify(t, p)
		wantWork := 0.0
		if !s.borrowing {
			wantWork = math.Round(s.estimate)
		}
		if g.Borrowing != s.borrowing || g.Work != wantWork {
			t.Errorf("step %d: Acquire(+%v, a, %v) = borrowing %v, work %v; want %v, %v", k, s.at, s.estimate, g.Borrowing, g.Work, s.borrowing, wantWork)
		}
		if got := stat(t, p, at(s.at), "a").WorkDebt; math.Abs(got-s.debt) > 1e-9 {
			t.Errorf("step %d: a's debt = %v, want %v", k, got, s.debt)
		}
	}
	// b never sent anything: its bucket is full.
	if s := stat(t, p, at(20*time.Second), "b"); s.WorkDebt != 0 {
		t.Errorf("b's debt = %v, want 0", s.WorkDebt)
	}
}

// TestKindsWorkRelease: Release settles a within-share grant's debt to
// what the request cost (a refund, an extra charge, clamped at 0), and a
// borrower's release changes no debt.
func TestKindsWorkRelease(t *testing.T) {
	tests := []struct {
		name     string
		estimate float64
		after    time.Duration // from grant to release
		consumed float64
		debt     float64
	}{
		{"refund", 20, 0, 5, 5},
		{"extra charge", 20, 0, 50, 50},
		{"as estimated", 20, 0, 20, 20},
		{"nothing consumed", 20, 0, 0, 0},
		{"NaN consumed counts as 0", 20, 0, math.NaN(), 0},
		{"paid down meanwhile", 20, 100 * time.Millisecond, 30, 25}, // 20 − 5 + 30 − 20
		{"refund below 0 clamps", 20, 300 * time.Millisecond, 1, 0}, // 20 − 15 + 1 − 20 < 0
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := workPool(nil)
			g := p.Acquire(base, 1, "a", Interactive, tt.estimate)
			if g.Borrowing || g.Work != tt.estimate {
				t.Fatalf("Acquire = borrowing %v work %v, want within share charging %v", g.Borrowing, g.Work, tt.estimate)
			}
			p.Release(at(tt.after), &g, tt.consumed)
			verify(t, p)
			if got := stat(t, p, at(tt.after), "a").WorkDebt; math.Abs(got-tt.debt) > 1e-9 {
				t.Errorf("debt after Release(%v) = %v, want %v", tt.consumed, got, tt.debt)
			}
		})
	}
	t.Run("borrower", func(t *testing.T) {
		p := workPool(nil)
		g1 := p.Acquire(base, 1, "a", Interactive, 50) // the bucket, full
		g2 := p.Acquire(base, 1, "a", Interactive, 10) // borrows
		if g1.Borrowing || !g2.Borrowing || g2.Work != 0 {
			t.Fatalf("grants %+v, %+v: want the first within share, the second borrowing uncharged", g1, g2)
		}
		p.Release(base, &g2, 1000)
		verify(t, p)
		if got := stat(t, p, base, "a").WorkDebt; got != 50 {
			t.Errorf("debt after a borrower's release = %v, want 50", got)
		}
		// UnknownTeam always borrows and has no bucket.
		g := p.Acquire(base, 1, "stranger", Interactive, 10)
		p.Release(base, &g, 99)
		if s := stat(t, p, base, UnknownTeam); !g.Borrowing || g.Work != 0 || s.WorkDebt != 0 {
			t.Errorf("UnknownTeam: borrowing %v work %v debt %v, want true, 0, 0", g.Borrowing, g.Work, s.WorkDebt)
		}
	})
}

// TestKindsWorkDispatch: a request held because its team's bucket is
// empty and the pool full becomes within share at Dispatch once enough
// virtual time has paid the debt down, with no release: Next reports it
// blocked before and ready after.
func TestKindsWorkDispatch(t *testing.T) {
	p := workPool(func(c *Config) { c.Capacity = 2 })
	// a's one request cost 60 units: its debt is 60, above its bucket.
	g, _, _ := p.Arrive(base, Request{Holder: 1, ID: 1, Team: "a", Work: 60})
	p.Release(base, &g, 60)
	// b fills the pool: its seat, then a's (borrowing).
	for id := uint64(1); id <= 2; id++ {
		if _, _, out := p.Arrive(base, Request{Holder: 2, ID: id, Team: "b", Work: 1}); out != Granted {
			t.Fatalf("b's request %d: %v, want granted", id, out)
		}
	}
	verify(t, p)
	// a's next request has a's seat but not its bucket (60 + 10 > 50):
	// it does not borrow the work (withinRoom), and the pool has no room
	// for a borrower.
	if _, w, out := p.Arrive(base, Request{Holder: 1, ID: 2, Team: "a", Work: 10}); out != Queued || w.Within || w.Work != 10 {
		t.Fatalf("a's request: %v %+v, want queued, not within share, work 10", out, w)
	}
	verify(t, p)
	steps := []struct {
		at     time.Duration
		status DispatchStatus
	}{
		{100 * time.Millisecond, Blocked},    // debt 55: 55 + 10 > 50
		{300 * time.Millisecond, Blocked},    // debt 45
		{400 * time.Millisecond, Dispatched}, // debt 40: 40 + 10 ≤ 50
	}
	for k, s := range steps {
		w, st := p.Next(at(s.at))
		wantNext := map[DispatchStatus]DispatchStatus{Blocked: Blocked, Dispatched: Elsewhere}[s.status]
		if st != wantNext || w.Within != (s.status == Dispatched) {
			t.Fatalf("step %d: Next(+%v) = %v within %v, want %v", k, s.at, st, w.Within, wantNext)
		}
		g, _, st := p.Dispatch(at(s.at), 1)
		verify(t, p)
		if st != s.status {
			t.Fatalf("step %d: Dispatch(+%v) = %v, want %v", k, s.at, st, s.status)
		}
		if st == Dispatched {
			if g.Borrowing || g.Priority != WithinShareBase || g.Work != 10 {
				t.Fatalf("step %d: dispatched %+v, want within share, priority %d, work 10", k, g, WithinShareBase)
			}
			if d := stat(t, p, at(s.at), "a").WorkDebt; math.Abs(d-50) > 1e-9 {
				t.Fatalf("step %d: debt %v after the dispatch, want 40 + 10", k, d)
			}
			return
		}
	}
	t.Fatalf("never dispatched")
}

// TestKindsWorkWithinRoom: a request that has its team's seat may borrow
// KV tokens from the pool (BorrowsTokens, charged work as any within-share
// grant) but never work: with an empty bucket it borrows, uncharged.
func TestKindsWorkWithinRoom(t *testing.T) {
	tests := []struct {
		name      string
		debt      float64
		tokens    int64 // a's next request's; a reserves 500 and has 300 in flight
		within    bool  // withinRoom
		fits      bool  // withinFits
		borrowsKV bool
	}{
		{"bucket and tokens fit", 0, 100, true, true, false},
		{"bucket fits, tokens borrowed", 0, 600, true, false, true},
		{"bucket empty, tokens fit", 45, 100, false, false, false},
		{"bucket empty, tokens over", 45, 600, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := workPool(func(c *Config) { c.KVTokens = 1000 })
			i := p.find("a")
			p.teams[i].debt = tt.debt
			put(p, 0, 1, false, 300) // a: one request within share
			put(p, 1, 1, false, 10)  // b: one; the pool has 690 tokens free
			verify(t, p)
			d := p.demand(tt.tokens, 10)
			if got := p.withinRoom(p.usage(), i, d); got != tt.within {
				t.Errorf("withinRoom(a, %v) = %v, want %v\n%s", d, got, tt.within, dump(p))
			}
			if got := p.withinFits(i, d); got != tt.fits {
				t.Errorf("withinFits(a, %v) = %v, want %v", d, got, tt.fits)
			}
			if got, want := p.withinRoom(p.usage(), i, d), refWithinQueue(p, i, tt.tokens, 10); got != want {
				t.Errorf("withinRoom(a, %v) = %v, the reference %v", d, got, want)
			}
			g, _, out := p.Arrive(base, Request{Holder: 1, ID: 1, Team: "a", Tokens: tt.tokens, Work: 10})
			verify(t, p)
			wantWork := 0.0
			if tt.within {
				wantWork = 10
			}
			if out != Granted || g.Borrowing == tt.within || g.BorrowsTokens != tt.borrowsKV || g.Work != wantWork {
				t.Errorf("Arrive = %v %+v: want granted, borrowing %v, tokens borrowed %v, work %v", out, g, !tt.within, tt.borrowsKV, wantWork)
			}
		})
	}
}

// TestKindsWorkNotBorrowable: work takes no part in a borrower's tests:
// the room test, the borrowing limit and the lending limits are those of
// sequences and tokens whatever the debts, and a borrower's request has
// room in a pool whose every bucket is empty.
func TestKindsWorkNotBorrowable(t *testing.T) {
	p := workPool(func(c *Config) {
		c.Teams[0].LendingLimit, c.Teams[0].BorrowingLimit = Limit(0), Limit(0.5)
	})
	for i := range p.teams {
		p.teams[i].debt = 1e6
	}
	d := p.demand(0, 1<<30)
	u := p.usage()
	if !p.hasRoom(u, 1, d) || !p.mayBorrow(0, d) || !p.hasRoom(u, 0, d) {
		t.Errorf("hasRoom(b), mayBorrow(a), hasRoom(a) = %v, %v, %v with every bucket empty: want true (work is not borrowed)",
			p.hasRoom(u, 1, d), p.mayBorrow(0, d), p.hasRoom(u, 0, d))
	}
	if p.withinFits(0, d) || p.withinFits(1, d) {
		t.Errorf("withinFits = true with every bucket empty")
	}
}

// TestKindsWorkSlice: a replica's slice carries the work: its throughput
// and every team's reserved rate follow its sequences (⌊W·s/R⌋), as do
// the loans; the record keeps them; the slices of replicas that divide
// the sequences divide the rates; SetSlice(nil) apportions X again.
func TestKindsWorkSlice(t *testing.T) {
	cfg := Config{Capacity: 10, Throughput: 1000, Teams: []TeamConfig{{Name: "a", Share: 0.6}, {Name: "b", Share: 0.4}}}
	p := NewPool("work", cfg, base)
	if p.teams[0].res != (amounts{6, 0, 600}) || p.teams[1].res != (amounts{4, 0, 400}) {
		t.Fatalf("reservations %v, %v; want [6 0 600], [4 0 400]", p.teams[0].res, p.teams[1].res)
	}
	tests := []struct {
		name  string
		s     Slice
		loans []int
		live  int64
		res   [2]int64
		lent  [2]int64
	}{
		{"half", Slice{Capacity: 5, Reserved: []int{3, 2}}, nil, 500, [2]int64{300, 200}, [2]int64{}},
		{"all of a", Slice{Capacity: 6, Reserved: []int{6, 0}}, []int{0, 2}, 600, [2]int64{600, 0}, [2]int64{0, 200}},
		{"a third, rounded down", Slice{Capacity: 3, Reserved: []int{2, 1}}, []int{1, 1}, 300, [2]int64{200, 100}, [2]int64{100, 100}},
		// Sequences cut to 1 and 1 first, the work following them.
		{"reservations cut to the slice", Slice{Capacity: 2, Reserved: []int{6, 4}}, nil, 200, [2]int64{100, 100}, [2]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.SetSlice(&tt.s)
			p.SetLoans(tt.loans, nil)
			verify(t, p) // the record round-trips the slice's work
			if p.live[kindWork] != tt.live {
				t.Errorf("slice throughput %d, want %d", p.live[kindWork], tt.live)
			}
			for i := range 2 {
				if e := p.teams[i]; e.res[kindWork] != tt.res[i] || e.lent[kindWork] != tt.lent[i] {
					t.Errorf("%q: rate %d lent %d, want %d, %d", e.name, e.res[kindWork], e.lent[kindWork], tt.res[i], tt.lent[i])
				}
			}
			s := stat(t, p, base, "a")
			if s.ReservedWork != tt.res[0] || s.LentWork != tt.lent[0] || s.WorkBurst != float64(tt.res[0]+tt.lent[0])*DefaultThroughputBurst.Seconds() {
				t.Errorf("Snapshot(a) = rate %d lent %d bucket %v", s.ReservedWork, s.LentWork, s.WorkBurst)
			}
		})
	}
	// Two replicas that divide the sequences divide the rates.
	q := NewPool("work", cfg, base)
	var sum [2]int64
	for _, r := range [][]int{{4, 1}, {2, 3}} {
		q.SetSlice(&Slice{Capacity: 5, Reserved: r})
		for i := range 2 {
			sum[i] += q.teams[i].res[kindWork]
		}
	}
	if sum != [2]int64{600, 400} {
		t.Errorf("Σ over the replicas' rates = %v, want [600 400]", sum)
	}
	p.SetSlice(nil)
	verify(t, p)
	if p.teams[0].res[kindWork] != 600 || p.live[kindWork] != 1000 {
		t.Errorf("SetSlice(nil): rate %d of %d, want 600 of 1000", p.teams[0].res[kindWork], p.live[kindWork])
	}
}

// TestKindsWorkConfig: the work resource is declared by Throughput > 0;
// the burst defaults to DefaultThroughputBurst; SetThroughput applies an
// engine reading (0 leaves it), never turns work on, and keeps the debts;
// a Reconfigure without it drops every debt and work demand; the
// fingerprint tells the settings apart.
func TestKindsWorkConfig(t *testing.T) {
	p := workPool(func(c *Config) { c.ThroughputBurst = 0 })
	if p.burst != DefaultThroughputBurst || !p.declared().has(kindWork) || p.Throughput() != 100 {
		t.Fatalf("burst %v declared %b X %d, want %v, work, 100", p.burst, p.declared(), p.Throughput(), DefaultThroughputBurst)
	}
	g := p.Acquire(base, 1, "a", Interactive, 30)
	if got := p.SetThroughput(0); got != 100 || p.Throughput() != 100 {
		t.Errorf("SetThroughput(0) = %d, X %d: want 100 left as it was", got, p.Throughput())
	}
	if got := p.SetThroughput(300); got != 100 || p.teams[0].res[kindWork] != 150 || p.teams[0].debt != 30 {
		t.Errorf("SetThroughput(300) = %d: rate %d debt %v, want 100, 150, 30", got, p.teams[0].res[kindWork], p.teams[0].debt)
	}
	verify(t, p)
	cfg := p.config()
	cfg.Throughput = 0
	p.Reconfigure(at(time.Second), cfg)
	verify(t, p)
	if p.declared().has(kindWork) || p.teams[0].debt != 0 || p.SetThroughput(500) != 0 || p.Throughput() != 0 {
		t.Errorf("without Throughput: declared %b debt %v X %d, want no work", p.declared(), p.teams[0].debt, p.Throughput())
	}
	p.Release(at(time.Second), &g, 100)
	verify(t, p)
	// Fingerprints: no work, work, work with another burst; a zero and a
	// negative burst are the default's.
	fp := func(x int64, b time.Duration) uint64 {
		c := Config{Capacity: 4, Throughput: x, ThroughputBurst: b}
		return c.Fingerprint()
	}
	if fp(0, 0) == fp(10, 0) || fp(10, 0) == fp(10, time.Second) || fp(10, 0) != fp(10, DefaultThroughputBurst) ||
		fp(10, -time.Second) != fp(10, 0) || fp(0, time.Second) != fp(0, 0) || fp(-5, 0) != fp(0, 0) {
		t.Errorf("fingerprints do not follow the applied work settings")
	}
}

// TestKindsWorkSliceOf: replicas whose records are configured with a
// ceiling (2^20 sequences, 2^40 cost units/s: a fleet pool's in the
// plugin) and that divide the totals they agreed on (C 16, X 6000) carry
// rates that follow their sequences of the agreed totals (⌊W·s/R⌋ with
// W and R the agreed ones), not of the ceiling: across the replicas a
// team's rates sum to at most its reserved rate of the agreed X, every
// replica where the team holds seats has a rate, the loans follow the
// same totals, and the record, Reconfigure and a new agreement keep
// them so.
func TestKindsWorkSliceOf(t *testing.T) {
	teams := []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}}
	ceiling := Config{Capacity: 1 << 20, Throughput: 1 << 40, Teams: teams}
	agreedTotals := func(c int, x int64) (Totals, map[string][2]int64) {
		q := NewPool("agreed", Config{Capacity: c, Throughput: x, Teams: teams}, base)
		whole := map[string][2]int64{}
		for _, s := range q.Snapshot(base) {
			whole[s.Team] = [2]int64{int64(s.Reserved), s.ReservedWork}
		}
		return q.Totals(), whole
	}
	check := func(t *testing.T, c int, x int64, demand [][]int) {
		tot, whole := agreedTotals(c, x)
		if tot.Throughput != x {
			t.Fatalf("Totals().Throughput = %d, want %d", tot.Throughput, x)
		}
		members := make([]Member, len(demand))
		for r := range demand {
			members[r] = Member{ID: string(rune('a' + r)), Demand: demand[r]}
		}
		var sum [2]int64
		for r := range members {
			_, next := Rebalance(tot, members, r)
			members[r].Applied = next
			p := NewPool("fleet", ceiling, base)
			p.SetSliceOf(tot, &next)
			verify(t, p) // the record round-trips the slice's totals
			// ⌊W·s/R⌋ of the agreed totals, cut (in proportion) only where
			// the rates exceed the slice's ⌊X·C_slice/C⌋.
			wantLive := x * int64(next.Capacity) / int64(c)
			if p.live[kindWork] != wantLive {
				t.Errorf("C %d X %d, replica %d: slice throughput %d, want ⌊X·%d/C⌋ = %d", c, x, r, p.live[kindWork], next.Capacity, wantLive)
			}
			var want [2]int64
			for i, team := range []string{"a", "b"} {
				if w, R := whole[team][1], whole[team][0]; R > 0 {
					want[i] = w * int64(next.Reserved[i]) / R
				}
			}
			cut := want[0]+want[1] > wantLive
			for i, team := range []string{"a", "b"} {
				got := p.teams[i].res[kindWork]
				if got > want[i] || !cut && got != want[i] {
					t.Errorf("C %d X %d, replica %d, %s: rate %d for %d of %d sequences, want ⌊%d·%d/%d⌋ = %d (cut to fit %d: %v)",
						c, x, r, team, got, next.Reserved[i], whole[team][0], whole[team][1], next.Reserved[i], whole[team][0], want[i], wantLive, cut)
				}
				if next.Reserved[i] > 0 && got == 0 {
					t.Errorf("C %d X %d, replica %d, %s holds %d sequences and no rate", c, x, r, team, next.Reserved[i])
				}
				sum[i] += got
			}
		}
		for i, team := range []string{"a", "b"} {
			if sum[i] > whole[team][1] {
				t.Errorf("C %d X %d: %s's rates sum to %d over the replicas, more than its %d", c, x, team, sum[i], whole[team][1])
			}
		}
	}
	t.Run("idle", func(t *testing.T) { check(t, 16, 6000, [][]int{nil, nil, nil}) })
	t.Run("a at one replica", func(t *testing.T) { check(t, 16, 6000, [][]int{{8, 0}, {0, 1}, {0, 3}}) })
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for range 200 {
			n := 1 + rng.IntN(5)
			c := n + rng.IntN(64)
			x := int64(c) * int64(8+rng.IntN(4000)) // at least 8 units/s a sequence: every seat has a rate
			demand := make([][]int, n)
			for r := range demand {
				demand[r] = []int{rng.IntN(c), rng.IntN(c)}
			}
			check(t, c, x, demand)
		}
	})

	// One replica's record: the loans, the record, Reconfigure and a new
	// agreement.
	tot, whole := agreedTotals(16, 6000) // a: 8 sequences, 3000/s
	p := NewPool("fleet", ceiling, base)
	p.SetSliceOf(tot, &Slice{Capacity: 6, Reserved: []int{4, 1}})
	p.SetLoans([]int{2, 0}, nil)
	if p.teams[0].res[kindWork] != 1500 || p.teams[0].lent[kindWork] != 750 || p.live[kindWork] != 2250 {
		t.Errorf("a: rate %d, loan %d, slice %d; want 1500 (4 of 8 sequences of 3000/s), 750 (2 of 8), 2250 (6 of 16 of 6000/s)",
			p.teams[0].res[kindWork], p.teams[0].lent[kindWork], p.live[kindWork])
	}
	rec, _ := p.AppendBinary(nil)
	var q Pool
	if err := q.UnmarshalBinary(rec); err != nil || q.teams[0].res[kindWork] != 1500 || q.whole != p.whole {
		t.Errorf("decoded: %v, rate %d, totals %v; want 1500, %v", err, q.teams[0].res[kindWork], q.whole, p.whole)
	}
	cfg := ceiling
	cfg.HalfLife = time.Minute
	q.Reconfigure(at(time.Second), cfg)
	q.SetLoans([]int{2, 0}, nil)
	if q.teams[0].res[kindWork] != 1500 || q.teams[0].lent[kindWork] != 750 {
		t.Errorf("after Reconfigure: a's rate %d, loan %d; want 1500, 750 (the agreed totals kept)", q.teams[0].res[kindWork], q.teams[0].lent[kindWork])
	}
	verify(t, &q)
	tot2, whole2 := agreedTotals(16, 12000) // the engines serve twice as much
	q.SetSliceOf(tot2, &Slice{Capacity: 6, Reserved: []int{4, 1}})
	if want := whole2["a"][1] * 4 / whole2["a"][0]; q.teams[0].res[kindWork] != want || want != 3000 {
		t.Errorf("X 12000: a's rate %d, want %d (3000)", q.teams[0].res[kindWork], want)
	}
	// Agreed totals above the record's are clamped to it, as a slice is.
	small := NewPool("small", Config{Capacity: 16, Throughput: 6000, Teams: teams}, base)
	big := tot
	big.Whole.Capacity, big.Throughput = 1<<30, 1<<50
	small.SetSliceOf(big, &Slice{Capacity: 8, Reserved: []int{8, 0}})
	verify(t, small)
	if small.teams[0].res[kindWork] != whole["a"][1] {
		t.Errorf("totals above the configured: a's rate %d, want %d (the configured totals')", small.teams[0].res[kindWork], whole["a"][1])
	}
	// SetSlice forgets them: the configured totals again.
	small.SetSlice(&Slice{Capacity: 8, Reserved: []int{4, 0}})
	if small.wholeSet || small.teams[0].res[kindWork] != 1500 {
		t.Errorf("SetSlice after SetSliceOf: totals kept %v, a's rate %d; want the configured totals' 1500", small.wholeSet, small.teams[0].res[kindWork])
	}
}

// TestWorkBorrowerInsideReservationFirst: with work declared, a held
// borrower whose team's bucket still has room for it (the team is over
// its seats, not its work) goes before a borrower whose team's bucket is
// empty, whatever their ranks, and its work is charged to its team's
// debt as a within-share request's is; once its bucket is empty too, the
// ranks decide again. (A team whose requests are long holds its seats
// for little work: without this, a team over its work rate and ranked
// better took every seat that freed, and the pool's work went to it.)
func TestWorkBorrowerInsideReservationFirst(t *testing.T) {
	p := workPool(func(c *Config) { c.Capacity = 4 }) // 2 seats and a bucket of 50 a team
	p.SetUsage(base, "b", 1000)                       // a ranks first among borrowers
	arrive := func(team string, id uint64, work float64) (Grant, Outcome) {
		t.Helper()
		g, _, out := p.Arrive(base, Request{Holder: 1, ID: id, Team: team, Class: Batch, Work: work, Estimate: work})
		verify(t, p)
		return g, out
	}
	var a1 Grant
	for id := uint64(1); id <= 2; id++ {
		g, out := arrive("a", id, 25)
		if out != Granted || g.Borrowing {
			t.Fatalf("a's request %d: %v, borrowing %v; want granted within share", id, out, g.Borrowing)
		}
		if id == 1 {
			a1 = g
		}
	}
	for id := uint64(3); id <= 4; id++ {
		if g, out := arrive("b", id, 10); out != Granted || g.Borrowing {
			t.Fatalf("b's request %d: %v, borrowing %v; want granted within share", id, out, g.Borrowing)
		}
	}
	// The pool is full. a's bucket is empty (50 of 50), b's has 30 left.
	if _, out := arrive("a", 5, 25); out != Queued {
		t.Fatalf("a's third request: %v, want queued", out)
	}
	if _, out := arrive("b", 6, 10); out != Queued {
		t.Fatalf("b's third request: %v, want queued", out)
	}
	if _, out := arrive("b", 7, 30); out != Queued {
		t.Fatalf("b's fourth request: %v, want queued", out)
	}
	// One of a's seats frees: b's request goes, borrowing a seat, and is
	// charged; a's waits although it ranks better.
	p.Release(base, &a1, 25)
	g, w, st := p.Dispatch(base, 1)
	verify(t, p)
	if st != Dispatched || w.ID != 6 || !g.Borrowing || g.Work != 10 || g.Priority != borrowPriority(p.rank(p.find("b")), Batch) {
		t.Fatalf("Dispatch = %v %+v %+v; want b's request 6 borrowing at b's borrowing priority, charged 10", st, w, g)
	}
	if d := stat(t, p, base, "b").WorkDebt; d != 30 {
		t.Errorf("b's debt = %v, want 30 (two within share and the borrower inside its bucket)", d)
	}
	// b's next does not fit its bucket (30 + 30 > 50): the ranks decide,
	// and a's goes first.
	g2 := g
	p.Release(base, &g2, 10)
	if d := stat(t, p, base, "b").WorkDebt; d != 30 {
		t.Errorf("b's debt after the release = %v, want 30 (settled at its estimate)", d)
	}
	if _, w, st := p.Dispatch(base, 1); st != Dispatched || w.ID != 5 {
		t.Fatalf("Dispatch = %v %+v; want a's request 5 (ranked first, both buckets too full for them)", st, w)
	}
	verify(t, p)
}
