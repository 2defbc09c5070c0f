package fairshare

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name    string
		total   int64
		weights []int64
		want    []int64
	}{
		{"proportional", 10, []int64{7, 2, 1}, []int64{7, 2, 1}},
		{"remainder to the largest", 10, []int64{1, 1, 1}, []int64{4, 3, 3}},
		{"ties to the lower index", 2, []int64{1, 1, 1}, []int64{1, 1, 0}},
		{"all zero is even", 5, []int64{0, 0}, []int64{3, 2}},
		{"zero weight gets nothing", 5, []int64{0, 3}, []int64{0, 5}},
		{"zero total", 0, []int64{4, 1}, []int64{0, 0}},
		{"large", 1 << 40, []int64{1 << 30, 1 << 30, 1}, []int64{549755813632, 549755813632, 512}},
	}
	for _, tt := range tests {
		got := make([]int64, len(tt.weights))
		split(tt.total, tt.weights, got)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: split(%d, %v) = %v, want %v", tt.name, tt.total, tt.weights, got, tt.want)
		}
	}
}

// totals3 is a pool of C = 20 and K = 2000 tokens with teams a, b, c of
// shares 0.5, 0.3 and 0.1: reservations 10, 6, 2 (1000, 600, 200 tokens),
// 2 sequences and 200 tokens of room.
func totals3() Totals {
	return Totals{Teams: []string{"a", "b", "c"}, Whole: Slice{
		Capacity: 20, KVTokens: 2000, Reserved: []int{10, 6, 2}, ReservedTokens: []int64{1000, 600, 200},
	}}
}

func TestTarget(t *testing.T) {
	tot := totals3()
	tests := []struct {
		name    string
		demands [][]int
		want    []Slice
	}{
		{
			name:    "one replica takes the whole pool",
			demands: [][]int{{3, 0, 0}},
			want:    []Slice{tot.Whole},
		},
		{
			name:    "idle pool splits evenly, ties to the first ID",
			demands: [][]int{{0, 0, 0}, {0, 0, 0}},
			want: []Slice{
				{Capacity: 10, KVTokens: 1000, Reserved: []int{5, 3, 1}, ReservedTokens: []int64{500, 300, 100}},
				{Capacity: 10, KVTokens: 1000, Reserved: []int{5, 3, 1}, ReservedTokens: []int64{500, 300, 100}},
			},
		},
		{
			// a's demand 7:3 splits its 10 as 7:3; b only at the second
			// replica; c idle splits 1:1. Demand beyond reservations:
			// first 0, second 0 + 4 (b: 10 − 6) = 4: all the room.
			name:    "reservations follow each team's demand, room the excess",
			demands: [][]int{{7, 0, 0}, {3, 10, 0}},
			want: []Slice{
				{Capacity: 8, KVTokens: 800, Reserved: []int{7, 0, 1}, ReservedTokens: []int64{700, 0, 100}},
				{Capacity: 12, KVTokens: 1200, Reserved: []int{3, 6, 1}, ReservedTokens: []int64{300, 600, 100}},
			},
		},
		{
			// a's demand (2) is below its reservation (10): r0 gets its 2,
			// then one each, and the other 6 go where the traffic is (all
			// demand at r0); b and c idle: one each, the rest to r0. The
			// room goes by demand (no demand beyond a reservation: all
			// demand), all to r0. Tokens follow the sequences.
			name:    "demand first, one each, the rest of a reservation with the traffic",
			demands: [][]int{{2, 0, 0}, {0, 0, 0}},
			want: []Slice{
				{Capacity: 17, KVTokens: 1700, Reserved: []int{9, 5, 1}, ReservedTokens: []int64{900, 500, 100}},
				{Capacity: 3, KVTokens: 300, Reserved: []int{1, 1, 1}, ReservedTokens: []int64{100, 100, 100}},
			},
		},
		{
			// Traffic 4:2. a: demand 1 + 1, one each, 6 by 4:2 → 6 and 4;
			// b: demand 3 + 1, one each → 4 and 2; c: one each. Room 2 by
			// all demand 4:2 → 1.33 and 0.67: one each (the unit left to
			// the larger remainder, r1's). Token room 200 → 133 and 67.
			name:    "headroom follows each replica's part of the traffic",
			demands: [][]int{{1, 3, 0}, {1, 1, 0}},
			want: []Slice{
				{Capacity: 12, KVTokens: 1233, Reserved: []int{6, 4, 1}, ReservedTokens: []int64{600, 400, 100}},
				{Capacity: 8, KVTokens: 767, Reserved: []int{4, 2, 1}, ReservedTokens: []int64{400, 200, 100}},
			},
		},
	}
	for _, tt := range tests {
		ms := make([]Member, len(tt.demands))
		for i, d := range tt.demands {
			ms[i] = Member{ID: fmt.Sprint("r", i), Demand: d}
		}
		got := targets(tot, ms)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Target = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestRebalanceGrowsIntoRoomOnly(t *testing.T) {
	tot := totals3()
	full := tot.Whole
	empty := Slice{Reserved: []int{0, 0, 0}, ReservedTokens: []int64{0, 0, 0}}
	ms := []Member{
		// r0 holds the whole pool and has 5 requests of a in flight.
		{ID: "r0", Demand: []int{5, 0, 0}, Applied: full,
			Used: Slice{Capacity: 5, KVTokens: 500, Reserved: []int{5, 0, 0}, ReservedTokens: []int64{500, 0, 0}}},
		{ID: "r1", Demand: []int{0, 6, 0}, Applied: empty, Used: empty},
	}
	target, next := Rebalance(tot, ms, 1)
	if target.Capacity == 0 || target.Reserved[1] != 6 {
		t.Fatalf("Rebalance target of r1 = %+v, want b's 6 reserved", target)
	}
	if !reflect.DeepEqual(next, empty) {
		t.Fatalf("Rebalance next of r1 = %+v while r0 holds everything, want nothing", next)
	}
	// r0 shrinks to its target at once.
	t0, n0 := Rebalance(tot, ms, 0)
	if !reflect.DeepEqual(t0, n0) {
		t.Fatalf("Rebalance of r0: next %+v, want its target %+v", n0, t0)
	}
	ms[0].Applied = n0
	_, next = Rebalance(tot, ms, 1)
	if next.Reserved[1] != 6 || next.Capacity != 20-max(n0.Capacity, 5) {
		t.Fatalf("Rebalance next of r1 after r0 shrank to %+v = %+v, want b's 6 and the capacity r0 left", n0, next)
	}
}

// TestFitVecCutsInProportion: reservations beyond a slice's capacity (a
// replica squeezed by the others' holds) are cut in proportion, so no
// team loses more of its reservation than another (cutting the last team
// first took a small team's whole reservation at the squeezed replica
// and gave the large teams more than their share of the service on
// three replicas). Random slices; every result fits, never grows, and
// keeps each team at least ⌊reserved × capacity / Σ reserved⌋. With the
// replica's demand, the teams at or above their reservation there give
// first.
func TestFitVecCutsInProportion(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 13))
	for n := range 2000 {
		T := 1 + rng.IntN(5)
		v := newBudgets(T)
		for i := range v {
			v[i] = rng.Int64N(30)
		}
		orig := slices.Clone(v)
		fitVec(v, T, nil)
		for k := range numKinds {
			b := struct{ cap, off int }{int(k), v.resOf(k, 0)}
			var sum, before int64
			for i := range T {
				before += orig[b.off+i]
			}
			for i := range T {
				x, o := v[b.off+i], orig[b.off+i]
				sum += x
				if x > o || (before > orig[b.cap] && x < o*orig[b.cap]/before) || (before <= orig[b.cap] && x != o) {
					t.Fatalf("case %d: fitVec(%v) = %v: team %d has %d of %d, want between %d and %d", n, orig, v, i, x, o, o*orig[b.cap]/max(before, 1), o)
				}
			}
			if sum > orig[b.cap] && before > orig[b.cap] {
				t.Fatalf("case %d: fitVec(%v) = %v: reservations %d above the capacity %d", n, orig, v, sum, orig[b.cap])
			}
		}
	}
	// With demand: the teams at or above their reservation are cut first;
	// a team below it (headroom) only once they have nothing left.
	for n := range 2000 {
		T := 1 + rng.IntN(5)
		v := newBudgets(T)
		for i := range v {
			v[i] = rng.Int64N(30)
		}
		demand := make([]int, T)
		for i := range demand {
			demand[i] = rng.IntN(30)
		}
		orig := slices.Clone(v)
		fitVec(v, T, demand)
		var sum, before int64
		fullLeft, headCut := false, false
		for i := range T {
			j := v.resOf(kindSeq, i)
			sum += v[j]
			before += orig[j]
			if v[j] > orig[j] {
				t.Fatalf("case %d: fitVec(%v, demand %v) = %v: team %d grew", n, orig, demand, v, i)
			}
			full := int64(demand[i]) >= orig[j]
			fullLeft = fullLeft || full && v[j] > 0
			headCut = headCut || !full && v[j] < orig[j]
		}
		if sum > max(orig[0], 0) && before > orig[0] || headCut && fullLeft {
			t.Fatalf("case %d: fitVec(%v, demand %v) = %v: want Σ ≤ %d, headroom cut only once the full teams have none", n, orig, demand, v, orig[0])
		}
	}
	// a (3 reserved, 5 wanted) and b (4 reserved, 1 wanted) into 5: a
	// gives up 2; without demand, 5 × 3/7 and 5 × 4/7 → 2 and 3.
	for _, tt := range []struct {
		demand []int
		want   []int64
	}{{[]int{5, 1}, []int64{5, 0, 0, 1, 4, 0, 0, 0, 0}}, {nil, []int64{5, 0, 0, 2, 3, 0, 0, 0, 0}}} {
		// The layout: the capacities (sequences, tokens, work), then
		// every kind's reservations.
		v := budgets{5, 0, 0, 3, 4, 0, 0, 0, 0}
		if fitVec(v, 2, tt.demand); !reflect.DeepEqual([]int64(v), tt.want) {
			t.Errorf("fitVec([5 0 0 3 4 0 0 0 0], demand %v) = %v, want %v", tt.demand, v, tt.want)
		}
	}
	// Squeezed to 5: a, b, c of 10, 6, 2 keep 3, 2, 0 (2.78, 1.67, 0.56:
	// the units left to the largest remainders, a's and b's).
	v := budgets{5, 0, 0, 10, 6, 2, 0, 0, 0, 0, 0, 0}
	fitVec(v, 3, nil)
	if want := (budgets{5, 0, 0, 3, 2, 0, 0, 0, 0, 0, 0, 0}); !reflect.DeepEqual(v, want) {
		t.Errorf("fitVec = %v, want %v", v, want)
	}
}

func TestSafeSlice(t *testing.T) {
	tot := totals3()
	got := SafeSlice(tot, 0.5, 2, tot.Whole)
	want := Slice{Capacity: 5, KVTokens: 500, Reserved: []int{2, 1, 0}, ReservedTokens: []int64{250, 150, 50}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SafeSlice(0.5, 2 members, whole) = %+v, want %+v", got, want)
	}
	small := Slice{Capacity: 1, KVTokens: 10, Reserved: []int{0, 0, 0}, ReservedTokens: []int64{0, 0, 0}}
	if got := SafeSlice(tot, 0.5, 2, small); !reflect.DeepEqual(got, small) {
		t.Errorf("SafeSlice of a slice below the safe one = %+v, want it unchanged %+v", got, small)
	}
	for _, f := range []float64{-1, 0} {
		if got := SafeSlice(tot, f, 1, tot.Whole); got.Capacity != 0 || got.KVTokens != 0 {
			t.Errorf("SafeSlice(fraction %v) = %+v, want nothing", f, got)
		}
	}
}

func TestSumUsage(t *testing.T) {
	t0 := time.Unix(1000, 0)
	reports := []UsageReport{
		{ID: "b", At: t0, Usage: map[string]float64{"x": 8}},
		{ID: "a", At: t0.Add(-time.Minute), Usage: map[string]float64{"x": 4, "y": 2}},
	}
	got := SumUsage(t0, time.Minute, reports)
	want := map[string]float64{"x": 8 + 2, "y": 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SumUsage = %v, want %v", got, want)
	}
}

// The replica simulation: R proxies share a pool through a store with
// leases and compare-and-swap, on virtual time.

const (
	simStep = 10 * time.Millisecond
	simSync = 100 * time.Millisecond
	simTTL  = 300 * time.Millisecond
	simD    = 500 * time.Millisecond // the longest request
	simSafe = 0.5
	// simHold is how long after its lease expired a cut-off replica may
	// still run requests admitted under its old slice: it notices the
	// loss at its next read (one sync, one write latency), then they
	// finish within the longest request.
	simHold = simD + simSync + 3*simStep
)

type simReq struct {
	team   int
	tok    int64
	within bool
	lent   bool // within share beyond the slice: on the replica's loan
	// lentTok: within share on a sequence of the slice, its tokens beyond
	// the slice's token reservation (on the token loan).
	lentTok bool
	end     time.Duration
}

type simReplica struct {
	id          string
	alive       bool
	cut         bool // partitioned from the store
	phase       time.Duration
	applied     Slice
	inflight    []simReq
	waiting     []simReq // end holds the duration it will run
	rates       []int    // arrivals per step per team, in percent
	lastKeep    time.Duration
	lastN       int
	shrunk      bool // applies its safe slice: lost its lease
	pending     bool // a read awaits its write
	readRev     int
	readMembers []Member
	writeAt     time.Duration
	// loan, loanTok: the loans in force (lend.go); loanMax: per team
	// the largest loan in force over the last simD (with loanUntil, when
	// each was replaced), for the bound.
	loan     []int
	loanTok  []int64
	loanHist []simLoan

	// Bound bookkeeping: when the store dropped it while alive.
	cutAt   time.Duration // -1: not cut off
	backAt  time.Duration // -1: not back
	hold    []int64       // max(applied, in flight) when cut off
	safeVec []int64
}

// simLoan is a loan vector that was in force until a time.
type simLoan struct {
	seq   []int
	tok   []int64
	until time.Duration
}

type simStore struct {
	rev     int
	members map[string]Member
	expiry  map[string]time.Duration
}

type sim struct {
	t        *testing.T
	rng      *rand.Rand
	tot      Totals
	now      time.Duration
	store    simStore
	replicas []*simReplica
	down     bool // the store is down
	nextID   int
	noLoans  bool // the rule before loans: slices alone
	// borrowedWithin counts, per team, requests admitted borrowing while
	// the team's requests across the pool (in flight, this one
	// included) were within its reservation; admitted counts all.
	borrowedWithin, admitted []int
	maxExcess                []int // per team: most within share beyond R
}

func newSim(t *testing.T, seed uint64, n int) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e37)), tot: totals3(),
		store: simStore{members: map[string]Member{}, expiry: map[string]time.Duration{}}}
	for range n {
		s.add()
	}
	return s
}

func (s *sim) add() *simReplica {
	T := len(s.tot.Teams)
	r := &simReplica{id: fmt.Sprintf("r%03d", s.nextID), alive: true, phase: time.Duration(s.rng.IntN(10)) * simStep,
		applied: Slice{Reserved: make([]int, T), ReservedTokens: make([]int64, T)},
		rates:   make([]int, T), cutAt: -1, backAt: -1,
		loan: make([]int, T), loanTok: make([]int64, T)}
	s.nextID++
	s.shift(r)
	s.replicas = append(s.replicas, r)
	return r
}

// shift draws new arrival rates for r (a demand shift).
func (s *sim) shift(r *simReplica) {
	for i := range r.rates {
		r.rates[i] = s.rng.IntN(60)
	}
}

func (r *simReplica) used(T int) Slice {
	return r.usedOf(T, false)
}

// usedOf is used, the within-share requests only those on the slice
// (not lent) if slice.
func (r *simReplica) usedOf(T int, slice bool) Slice {
	u := Slice{Reserved: make([]int, T), ReservedTokens: make([]int64, T)}
	for _, q := range r.inflight {
		if slice && q.lent {
			continue
		}
		u.Capacity++
		u.KVTokens += q.tok
		if q.within {
			u.Reserved[q.team]++
			if !slice || !q.lentTok {
				u.ReservedTokens[q.team] += q.tok
			}
		}
	}
	return u
}

func (r *simReplica) demand(T int) []int {
	d := make([]int, T)
	for _, q := range r.inflight {
		d[q.team]++
	}
	for _, q := range r.waiting {
		d[q.team]++
	}
	return d
}

// admit runs r's queue against its applied slice, as the pool does.
func (s *sim) admit(r *simReplica) {
	T := len(s.tot.Teams)
	u := r.used(T)
	on := r.usedOf(T, true)
	k := 0
	for _, q := range r.waiting {
		if u.Capacity+1 > r.applied.Capacity || u.KVTokens+q.tok > r.applied.KVTokens {
			r.waiting[k] = q
			k++
			continue
		}
		q.within = u.Reserved[q.team]+1 <= r.applied.Reserved[q.team]+r.loan[q.team] &&
			u.ReservedTokens[q.team]+q.tok <= r.applied.ReservedTokens[q.team]+r.loanTok[q.team]
		// On the slice while the team's requests on it leave room, else
		// on the loan: at most the loan is then lent.
		q.lent = q.within && on.Reserved[q.team]+1 > r.applied.Reserved[q.team]
		q.lentTok = q.within && !q.lent && on.ReservedTokens[q.team]+q.tok > r.applied.ReservedTokens[q.team]
		if q.within && !q.lent {
			on.Reserved[q.team]++
			if !q.lentTok {
				on.ReservedTokens[q.team] += q.tok
			}
		}
		if s.admitted != nil {
			s.admitted[q.team]++
			if !q.within && s.teamInFlight(q.team)+1 <= s.tot.Whole.Reserved[q.team] {
				s.borrowedWithin[q.team]++
			}
		}
		u.Capacity++
		u.KVTokens += q.tok
		if q.within {
			u.Reserved[q.team]++
			u.ReservedTokens[q.team] += q.tok
		}
		q.end += s.now
		r.inflight = append(r.inflight, q)
	}
	r.waiting = r.waiting[:k]
}

func (s *sim) snapshot() (int, []Member) {
	ms := make([]Member, 0, len(s.store.members))
	for _, m := range s.store.members {
		ms = append(ms, m)
	}
	SortMembers(ms)
	return s.store.rev, ms
}

// syncRead is a replica's keepalive and read. A replica that finds its
// lease gone shrinks to its safe slice until it is registered again.
func (s *sim) syncRead(r *simReplica) {
	if _, ok := s.store.members[r.id]; ok {
		s.store.expiry[r.id] = s.now + simTTL
		r.lastKeep = s.now
	} else {
		s.shrink(r)
	}
	r.readRev, r.readMembers = s.snapshot()
	r.pending = true
	r.writeAt = s.now + time.Duration(s.rng.IntN(3))*simStep
}

// safeBound is what the bound allows a replica that has shrunk, from the
// rule alone: ⌊f·total/n⌋ in every budget.
func (s *sim) safeBound(r *simReplica) []int64 {
	return SafeSlice(s.tot, simSafe, r.lastN, s.tot.Whole).vec(len(s.tot.Teams))
}

// teamInFlight is team i's requests in flight across the pool.
func (s *sim) teamInFlight(i int) int {
	n := 0
	for _, r := range s.replicas {
		if r.alive {
			for _, q := range r.inflight {
				n += boolInt(q.team == i)
			}
		}
	}
	return n
}

// setLoans puts seq and tok in force at r, keeping the loans replaced.
func (s *sim) setLoans(r *simReplica, seq []int, tok []int64) {
	r.loanHist = append(r.loanHist, simLoan{seq: r.loan, tok: r.loanTok, until: s.now})
	r.loan, r.loanTok = seq, tok
}

// shrink applies r's safe slice (and lends nothing: a cut-off replica
// does not know the pool's demand).
func (s *sim) shrink(r *simReplica) {
	T := len(s.tot.Teams)
	s.setLoans(r, make([]int, T), make([]int64, T))
	r.applied = MinSlice(r.applied, SafeSlice(s.tot, simSafe, r.lastN, r.applied), T)
	if !r.shrunk {
		r.shrunk = true
		if r.cutAt >= 0 && r.safeVec == nil {
			r.safeVec = s.safeBound(r)
		}
	}
}

// syncWrite computes r's slice from what it read and writes it with a
// compare-and-swap on the revision read.
func (s *sim) syncWrite(r *simReplica) {
	r.pending = false
	T := len(s.tot.Teams)
	self := Member{ID: r.id, Demand: r.demand(T), Applied: r.applied.clone(), Used: r.used(T)}
	ms := slices.DeleteFunc(slices.Clone(r.readMembers), func(m Member) bool { return m.ID == r.id })
	ms = append(ms, self)
	SortMembers(ms)
	k := slices.IndexFunc(ms, func(m Member) bool { return m.ID == r.id })
	targets := targets(s.tot, ms)
	sum := Slice{Reserved: make([]int, T), ReservedTokens: make([]int64, T)}
	for _, x := range targets {
		sum = addSlice(sum, x, T)
	}
	if !reflect.DeepEqual(sum, s.tot.Whole) {
		s.t.Fatalf("t=%v: targets sum to %+v, want %+v", s.now, sum, s.tot.Whole)
	}
	target, next := Rebalance(s.tot, ms, k)
	tv, nv := target.vec(T), next.vec(T)
	for b := range nv {
		if nv[b] < 0 || nv[b] > tv[b] {
			s.t.Fatalf("t=%v: next %v not within [0, target %v]", s.now, nv, tv)
		}
	}
	// Shrink at once; grow only once the write is in. The loans go into
	// force at once (they add no capacity that another replica may grow
	// into), none while the replica's report is gone.
	r.applied = MinSlice(r.applied, next, T)
	seq, tok := Loans(s.tot, ms, k)
	if s.noLoans || r.shrunk {
		seq, tok = make([]int, T), make([]int64, T)
	}
	for i := range T {
		if seq[i] > MaxLoan || seq[i] < 0 {
			s.t.Fatalf("t=%v: loan %v of team %d not in [0, MaxLoan]", s.now, seq, i)
		}
	}
	s.setLoans(r, seq, tok)
	r.lastN = len(ms)
	if s.down || r.cut {
		return // the write never arrived
	}
	if s.store.rev != r.readRev {
		// The compare-and-swap failed: its answer carries the members
		// as they are now (the txn's failure branch reads them), and the
		// replica tries again.
		s.syncRead(r)
		return
	}
	if _, ok := s.store.members[r.id]; !ok {
		s.store.expiry[r.id] = s.now + simTTL // a new lease
		r.lastKeep = s.now
		if r.cutAt >= 0 && r.backAt < 0 {
			r.backAt = s.now
		}
	}
	r.shrunk = false
	self.Applied, self.Used = next.clone(), r.used(T)
	s.store.members[r.id] = self
	s.store.rev++
	r.applied = next
}

func addSlice(a, b Slice, T int) Slice {
	x, y := a.vec(T), b.vec(T)
	for i := range x {
		x[i] += y[i]
	}
	return sliceOf(x, T)
}

// step advances the simulation by one step.
func (s *sim) step() {
	s.now += simStep
	T := len(s.tot.Teams)
	// The store expires leases.
	if !s.down {
		for id, exp := range s.store.expiry {
			if exp > s.now {
				continue
			}
			delete(s.store.expiry, id)
			delete(s.store.members, id)
			s.store.rev++
			for _, r := range s.replicas {
				if r.id == id && r.alive {
					r.cutAt, r.backAt, r.safeVec = s.now, -1, nil
					if r.shrunk {
						r.safeVec = s.safeBound(r)
					}
					u := r.used(T).vec(T)
					a := r.applied.vec(T)
					r.hold = make([]int64, len(a))
					for b := range a {
						r.hold[b] = max(a[b], u[b])
					}
				}
			}
		}
	}
	for _, r := range s.replicas {
		if !r.alive {
			continue
		}
		// Requests finish.
		r.inflight = slices.DeleteFunc(r.inflight, func(q simReq) bool { return q.end <= s.now })
		// Arrivals.
		for i, rate := range r.rates {
			for n := rate; n > 0; n -= 100 {
				if s.rng.IntN(100) < min(n, 100) && len(r.waiting) < 200 {
					r.waiting = append(r.waiting, simReq{team: i, tok: int64(10 + s.rng.IntN(90)),
						end: time.Duration(1+s.rng.IntN(int(simD/simStep))) * simStep})
				}
			}
		}
		// Sync.
		reach := !s.down && !r.cut
		if r.pending && s.now >= r.writeAt {
			s.syncWrite(r)
		}
		if reach && !r.pending && (s.now+r.phase)%simSync == 0 {
			s.syncRead(r)
		}
		// Cut off past the lease: shrink to the safe slice.
		if !reach && s.now >= r.lastKeep+simTTL {
			s.shrink(r)
		}
		s.admit(r)
	}
	s.checkBound()
}

// checkBound asserts the overshoot bound in every budget: replicas.go's
// for the slices (the requests within share on a slice), and lend.go's
// for the loans (every team's within-share requests beyond R_t at most
// the loans in force over the last simD, each at most ⌈R_t/n⌉).
func (s *sim) checkBound() {
	T := len(s.tot.Teams)
	total := newBudgets(T)
	bound := s.tot.Whole.vec(T)
	within := make([]int, T)
	withinTok := make([]int64, T)
	lentBound := make([]int, T)
	lentTokBound := make([]int64, T)
	for _, r := range s.replicas {
		if !r.alive {
			continue
		}
		u := r.usedOf(T, true).vec(T)
		for b := range u {
			total[b] += u[b]
		}
		lent := make([]int, T)
		for _, q := range r.inflight {
			if q.within {
				within[q.team]++
				withinTok[q.team] += q.tok
			}
			if q.lent {
				lent[q.team]++
			}
		}
		// The loans in force since now − simD (no request runs longer).
		r.loanHist = slices.DeleteFunc(r.loanHist, func(l simLoan) bool { return l.until < s.now-simD })
		for i := range T {
			mx, mxTok := r.loan[i], r.loanTok[i]
			for _, l := range r.loanHist {
				mx, mxTok = max(mx, l.seq[i]), max(mxTok, l.tok[i])
			}
			if q := s.tot.Whole.ReservedTokens[i] / int64(max(s.tot.Whole.Reserved[i], 1)); mxTok > MaxLoan*q {
				s.t.Fatalf("t=%v: replica %s lends team %d %d tokens, above MaxLoan·⌊K/R⌋ = %d", s.now, r.id, i, mxTok, MaxLoan*q)
			}
			lentTokBound[i] += mxTok
			if lent[i] > mx {
				s.t.Fatalf("t=%v: replica %s runs %d lent requests of team %d, loans in force over the last D at most %d",
					s.now, r.id, lent[i], i, mx)
			}
			lentBound[i] += mx
		}
		if r.cutAt < 0 {
			continue
		}
		if r.backAt >= 0 && s.now-r.backAt >= simD {
			r.cutAt, r.backAt, r.hold, r.safeVec = -1, -1, nil, nil
			continue
		}
		for b := range bound {
			if r.backAt < 0 && s.now-r.cutAt >= simHold && r.safeVec != nil {
				bound[b] += r.safeVec[b]
			} else {
				bound[b] += r.hold[b]
			}
		}
	}
	for b := range total {
		if total[b] > bound[b] {
			s.t.Fatalf("t=%v: budget %d has %d in flight, bound %d (totals %v)", s.now, b, total[b], bound[b], s.tot.Whole.vec(T))
		}
	}
	for i := range T {
		if b := bound[bound.resOf(kindSeq, i)]; within[i] > int(b)+lentBound[i] {
			s.t.Fatalf("t=%v: team %d has %d within share, bound %d + loans %d", s.now, i, within[i], b, lentBound[i])
		}
		if b := bound[bound.resOf(kindTok, i)]; withinTok[i] > b+lentTokBound[i] {
			s.t.Fatalf("t=%v: team %d has %d tokens within share, bound %d + token loans %d", s.now, i, withinTok[i], b, lentTokBound[i])
		}
		if s.maxExcess != nil {
			s.maxExcess[i] = max(s.maxExcess[i], within[i]-s.tot.Whole.Reserved[i])
		}
	}
}

func (s *sim) alive() []*simReplica {
	var out []*simReplica
	for _, r := range s.replicas {
		if r.alive {
			out = append(out, r)
		}
	}
	return out
}

// TestReplicasBound runs random sequences of demand shifts, deaths,
// restarts, partitions and store outages, and checks the overshoot bound
// at every step; then heals everything, stops the load and checks that
// the slices converge to the targets and fill the pool.
func TestReplicasBound(t *testing.T) {
	for seed := range uint64(100) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := newSim(t, seed, 2+int(seed%3))
			for range 3000 {
				switch x := s.rng.IntN(1000); {
				case x < 10:
					live := s.alive()
					s.shift(live[s.rng.IntN(len(live))])
				case x < 12 && len(s.alive()) > 1:
					live := s.alive()
					r := live[s.rng.IntN(len(live))]
					r.alive, r.inflight, r.waiting = false, nil, nil
				case x < 14 && len(s.alive()) < 5:
					s.add()
				case x < 18:
					live := s.alive()
					r := live[s.rng.IntN(len(live))]
					r.cut = !r.cut
				case x < 19:
					s.down = !s.down
				}
				s.step()
			}
			// Heal, stop arrivals, and let it settle.
			s.down = false
			for _, r := range s.replicas {
				r.cut = false
				clear(r.rates)
				r.waiting = nil
			}
			for range int((2*simD + 3*simTTL + 5*simSync) / simStep) {
				s.step()
			}
			T := len(s.tot.Teams)
			sum := Slice{Reserved: make([]int, T), ReservedTokens: make([]int64, T)}
			_, ms := s.snapshot()
			targets := targets(s.tot, ms)
			for k, m := range ms {
				var r *simReplica
				for _, x := range s.replicas {
					if x.id == m.ID {
						r = x
					}
				}
				if r == nil || !r.alive {
					t.Fatalf("member %s in the store is not alive", m.ID)
				}
				if !reflect.DeepEqual(r.applied, targets[k]) {
					t.Errorf("settled replica %s applies %+v, want its target %+v", r.id, r.applied, targets[k])
				}
				sum = addSlice(sum, r.applied, T)
			}
			if len(ms) != len(s.alive()) {
				t.Errorf("settled store has %d members, want the %d alive", len(ms), len(s.alive()))
			}
			if !reflect.DeepEqual(sum, s.tot.Whole) {
				t.Errorf("settled slices sum to %+v, want the whole pool %+v", sum, s.tot.Whole)
			}
		})
	}
}

// TestReplicaDeathReturnsSlice: a dead replica's slice is back with the
// others within TTL + one sync (+ the write's latency).
func TestReplicaDeathReturnsSlice(t *testing.T) {
	s := newSim(t, 7, 3)
	for _, r := range s.replicas {
		clear(r.rates)
	}
	for range 100 {
		s.step()
	}
	dead := s.replicas[2]
	if dead.applied.Capacity == 0 {
		t.Fatalf("replica %s has no slice before its death: %+v", dead.id, dead.applied)
	}
	dead.alive = false
	for range int((simTTL + simSync + 3*simStep) / simStep) {
		s.step()
	}
	got := s.replicas[0].applied.Capacity + s.replicas[1].applied.Capacity
	if got != s.tot.Whole.Capacity {
		t.Errorf("TTL + one sync after a death the two others apply %d sequences, want the whole %d", got, s.tot.Whole.Capacity)
	}
}

// TestLoans checks the loan rule (lend.go) on its own: a team below its
// reservation across the pool gets min(MaxLoan, R − D) sequences at
// every replica; every team that reserves tokens gets the tokens of
// MaxLoan sequences (⌊K/R⌋ each) while its within-share tokens across
// the pool leave that much of K, less when they leave less, none at K,
// at least its sequence loan's tokens; a team that reserves nothing gets
// none.
func TestLoans(t *testing.T) {
	tot := totals3() // reservations 10, 6, 2; tokens 1000, 600, 200
	sl := func(tok ...int64) Slice { return Slice{Reserved: make([]int, 3), ReservedTokens: tok} }
	members := []Member{
		{ID: "a", Demand: []int{12, 1, 0}, Used: sl(850, 0, 0)},
		{ID: "b", Demand: []int{3, 1, 1}, Used: sl(100, 0, 0)},
		{ID: "c", Demand: []int{0, 2, 0}, Used: sl(0, 0, 0)},
	}
	seq, tok := Loans(tot, members, 1)
	// a: demand 15 ≥ 10: no sequence; its within-share tokens 950 of
	// 1000 leave 50 (below MaxLoan·100). b: 6 − 4 = 2 (MaxLoan), c:
	// 2 − 1 = 1 sequence, both the tokens of MaxLoan sequences (b: 2 ×
	// 100, c: 2 × 100).
	if want := []int{0, 2, 1}; !reflect.DeepEqual(seq, want) {
		t.Errorf("loans %v, want %v", seq, want)
	}
	if want := []int64{50, 200, 200}; !reflect.DeepEqual(tok, want) {
		t.Errorf("token loans %v, want %v", tok, want)
	}
	// a at its token reservation (and above it): no tokens.
	for _, used := range []int64{900, 1200} {
		members[0].Used.ReservedTokens[0] = used
		if _, tok := Loans(tot, members, 0); tok[0] != 0 {
			t.Errorf("team a with %d within-share tokens of 1000 gets a token loan %d, want 0", used+100, tok[0])
		}
	}
	// c's tokens nearly used: its sequence loan still carries its tokens.
	members[1].Used.ReservedTokens[2] = 190
	if seq, tok := Loans(tot, members, 0); seq[2] != 1 || tok[2] != 100 {
		t.Errorf("team c (1 sequence lent, 190 of 200 tokens within share) gets %d and %d tokens, want 1 and 100", seq[2], tok[2])
	}
	// At its reservation exactly: no sequence.
	members[2].Demand[2] = 1
	if seq, _ := Loans(tot, members, 0); seq[2] != 0 {
		t.Errorf("team c at its reservation (demand 2 of 2) gets loan %d, want 0", seq[2])
	}
	tot.Whole.Reserved[2], tot.Whole.ReservedTokens[2] = 0, 0
	if seq, tok := Loans(tot, members, 0); seq[2] != 0 || tok[2] != 0 {
		t.Errorf("a team that reserves nothing gets loans %d (%d tokens)", seq[2], tok[2])
	}
}

// TestLoansKeepSpreadTeamWithinShare: a team of reservation 2 whose
// light load reaches three of five replicas (more replicas than
// reserved slots),
// beside a team that saturates the pool. Its requests that arrive while
// the team is within its reservation across the pool borrow on slices
// alone (a replica whose slice holds none of its reservation); with
// loans less than half as often (the rest: the others' demand as they
// last reported it, up to a sync interval old, against requests that
// last 2.5 intervals on average here), and the bound holds at every
// step.
func TestLoansKeepSpreadTeamWithinShare(t *testing.T) {
	run := func(noLoans bool) (borrowed, admitted, excess int) {
		s := newSim(t, 3, 5)
		s.noLoans = noLoans
		T := len(s.tot.Teams)
		s.borrowedWithin, s.admitted, s.maxExcess = make([]int, T), make([]int, T), make([]int, T)
		for k, r := range s.replicas {
			r.rates = []int{12, 0, boolInt(k < 3)}
		}
		for range 20000 {
			s.step()
		}
		return s.borrowedWithin[2], s.admitted[2], s.maxExcess[2]
	}
	bOff, nOff, _ := run(true)
	bOn, nOn, ex := run(false)
	t.Logf("team c: %d of %d requests borrowed while within its reservation on slices alone, %d of %d with loans (most within share beyond R: %d)",
		bOff, nOff, bOn, nOn, ex)
	if nOff < 500 || nOn < 500 {
		t.Fatalf("too few requests of team c: %d, %d", nOff, nOn)
	}
	if 10*bOff < nOff {
		t.Errorf("on slices alone only %d of %d borrowed: the scenario does not show the edge of the slices", bOff, nOff)
	}
	// What is left: the team's demand that the others last reported
	// (up to one sync old) above what they run now.
	if 2*bOn > bOff {
		t.Errorf("with loans %d of %d requests within the team's reservation borrowed, on slices alone %d: want at most half", bOn, nOn, bOff)
	}
}
