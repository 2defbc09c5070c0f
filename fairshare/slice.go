package fairshare

import "math/bits"

// A pool's slice: the part of the pool one replica decides against when
// several proxies share it (see replicas.go for the rule that computes
// the slices).

// Work in a slice. The public shapes (Slice, Totals, Member, the loans)
// carry sequences and KV tokens; a slice's work is derived from its
// sequences, as a replica's part of a team's token reservation follows
// its sequences in the slice rule (replicas.go). With W_t and R_t the
// team's whole reservations in work and sequences, X and C the pool's:
//
//	res_t,work = ⌊W_t × res_t,seq / R_t⌋   (0 when R_t = 0)
//	X_slice    = ⌊X × C_slice / C⌋          (0 when C = 0)
//
// then cut, as the other kinds, until the reservations fit X_slice
// (fitVec), and a replica's loan in work is ⌊W_t × loan_t,seq / R_t⌋
// (lend.go). SetSlice and SetLoans derive them; the record carries them
// as it carries every kind's slice and loans.
//
// W_t, R_t, X and C are the configured totals' (apportion.go), unless
// the slice was cut from other totals (SetSliceOf: the capacity and
// throughput the replicas agreed on, when the record's configured totals
// are only a ceiling, as a fleet pool's are in the plugin): then they
// are those totals' capacity and throughput, apportioned by the same
// shares, and the record keeps the two numbers with the slice, so that
// SetLoans and Reconfigure derive from them too. The bound: across replicas
// whose sequences do not exceed R_t, Σ res_t,work ≤ W_t, so the
// within-share work rate a team is granted across the pool is at most
// its reserved rate, plus its loans' (at most MaxLoan·⌊W_t/R_t⌋ per
// lending replica, as tokens), plus the cut-off replicas' holds of the
// overshoot bound, in proportion to their sequences.

// wholeRes returns every configured team's reservation in every kind as
// apportion.go gives it from the capacities total (the configured ones:
// the reservations Totals reports; or sliceWhole), and the teams' names.
// It allocates. Cost: O(kinds · teams · log teams).
func (p *Pool) wholeRes(total amounts) ([]string, []amounts) {
	n := p.configured
	names := make([]string, n)
	shares := make([]float64, n)
	for i := range n {
		names[i], shares[i] = p.teams[i].name, p.teams[i].share
	}
	out := make([]int, n)
	res := make([]amounts, n)
	for k := range numKinds {
		apportion(int(total[k]), names, shares, out)
		for i := range n {
			res[i][k] = int64(out[i])
		}
	}
	return names, res
}

// workOf is the work that follows seq sequences of a team whose whole
// reservations are whole: ⌊W × seq / R⌋, 0 when R = 0, at most W.
func workOf(whole amounts, seq int64) int64 {
	r, w := whole[kindSeq], whole[kindWork]
	if r <= 0 || seq <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(w), uint64(min(seq, r)))
	q, _ := bits.Div64(hi, lo, uint64(r)) // hi < r since min(seq, r) ≤ r
	return int64(q)
}

// sliceWhole is the totals a slice's work is derived from (see above):
// the configured ones, with the capacity and throughput of the totals the
// slice was cut from when SetSliceOf gave them.
func (p *Pool) sliceWhole() amounts {
	t := p.total
	if p.sliced && p.wholeSet {
		t[kindSeq], t[kindWork] = p.whole[kindSeq], p.whole[kindWork]
	}
	return t
}

// clampWhole keeps the totals a slice was cut from within the configured
// ones, as the slice's own values are (SetSliceOf, Reconfigure).
func (p *Pool) clampWhole() {
	if !p.sliced {
		p.whole, p.wholeSet = amounts{}, false
	}
	for k := range numKinds {
		p.whole[k] = min(max(p.whole[k], 0), p.total[k])
	}
}

// deriveWork sets a slice's work capacity and every configured team's work
// reservation from its sequences (see above), then cuts them to fit.
func (p *Pool) deriveWork() {
	total := p.sliceWhole()
	_, whole := p.wholeRes(total)
	p.live[kindWork] = workOf(total, p.live[kindSeq])
	for i := range p.configured {
		e := &p.teams[i]
		e.res[kindWork] = workOf(whole[i], e.res[kindSeq])
		p.applyLimits(e)
	}
	p.fitSlice()
}

// Totals returns what the slices of the pool divide: the configured
// teams in configuration order, the configured capacity and KV tokens,
// and every team's reservation in both as apportion.go gives them, and
// the configured throughput (the work, derived from the sequences, is
// not a budget of its own: see above). It allocates. Cost: O(kinds ·
// teams · log teams).
func (p *Pool) Totals() Totals {
	n := p.configured
	names, res := p.wholeRes(p.total)
	t := Totals{Teams: names, Whole: makeSlice(n), Throughput: p.total[kindWork]}
	t.Whole.setCaps(p.total)
	for i := range n {
		t.Whole.setReserved(i, res[i])
	}
	return t
}

// Report returns what the pool's member report carries (Member): every
// configured team's demand (requests in flight, phantoms included, plus
// waiting) and what is in flight against each budget: all requests
// (Capacity, KVTokens; removed teams and UnknownTeam included) and every
// configured team's within-share requests (Reserved, ReservedTokens). It
// allocates. Cost: O(teams · kinds).
func (p *Pool) Report() (demand []int, used Slice) {
	n := p.configured
	demand = make([]int, n)
	used = makeSlice(n)
	var all amounts
	for i := range p.teams {
		e := &p.teams[i]
		all = all.add(e.use())
		if i < n {
			demand[i] = e.inFlight() + e.waiting
			used.setReserved(i, e.inWithin())
		}
	}
	used.setCaps(all)
	return demand, used
}

// SetSlice makes the pool decide against s, a replica's slice of the
// pool (teams in the order of Totals), instead of the whole pool: the
// live capacity becomes s.Capacity, the KV tokens s.KVTokens (K stays
// the configured one for clamping demands), and every configured team's
// reservation s.Reserved and s.ReservedTokens (missing entries count as
// 0); with a work resource, the slice's throughput and every team's
// reserved rate follow its sequences (see above). Values are clamped
// into [0, the configured totals], and
// reservations cut, every team in proportion to its reservation, until
// they fit the slice's capacities, so that within-share requests never
// outnumber the slice. The debts are first paid down to the latest time
// the pool has seen, at the old rates.
// Requests in flight keep their standing. A nil s returns the pool to
// the whole configuration (the live capacity becomes the configured
// one) and clears the loans (SetLoans; a slice keeps them). The slice is kept in the record; Reconfigure keeps it, each
// team's reservation with its team (a new team gets none until the next
// slice). The slice's work follows the configured totals; see SetSliceOf
// for a slice of other totals. Cost: O(teams · kinds).
func (p *Pool) SetSlice(s *Slice) { p.setSlice(nil, s) }

// SetSliceOf is SetSlice of a slice s cut from totals t other than the
// configured ones (Rebalance's of t): with a work resource, the slice's
// throughput and every team's reserved rate follow its sequences as a
// part of t's capacity and throughput (t.Whole.Capacity, t.Throughput,
// every team's part of both apportioned by its share; see above), not of
// the configured totals. The two numbers are clamped into [0, the
// configured totals] and kept with the slice in the record (SetLoans and
// Reconfigure derive from them) until the next SetSlice or SetSliceOf;
// t's teams and reservations are not read. A nil s is SetSlice(nil).
// The plugin calls it for a pool whose replicas agree on its totals
// (capacity_from with the cluster block), whose record is configured
// with a ceiling. Cost: O(kinds · teams · log teams).
func (p *Pool) SetSliceOf(t Totals, s *Slice) { p.setSlice(&t, s) }

// setSlice is SetSlice (t nil) and SetSliceOf.
func (p *Pool) setSlice(t *Totals, s *Slice) {
	defer p.invalidate()
	p.decayTo(p.now) // the debts paid down at the old rates
	if s == nil {
		p.sliced = false
		for i := range p.teams {
			p.teams[i].lent = amounts{}
		}
		p.live = p.total
		p.clampWhole()
		p.reapportion()
		return
	}
	p.sliced = true
	p.whole, p.wholeSet = amounts{}, t != nil
	if t != nil {
		p.whole[kindSeq], p.whole[kindWork] = int64(t.Whole.Capacity), t.Throughput
	}
	p.clampWhole()
	caps := s.caps()
	d := p.declared()
	for k := range numKinds {
		p.live[k] = min(max(caps[k], 0), p.total[k])
	}
	for i := range p.teams {
		e := &p.teams[i]
		e.res = amounts{}
		if i >= p.configured {
			continue
		}
		r := s.reserved(i)
		for k := range numKinds {
			if d.has(k) {
				e.res[k] = min(max(r[k], 0), maxAmount[k])
			}
		}
	}
	p.reapportion()
	if d.has(kindWork) {
		p.deriveWork()
	}
}

// maxAmount bounds a capacity and a reservation of a slice in every kind.
var maxAmount = amounts{kindSeq: maxCapacity, kindTok: maxTokens, kindWork: maxWork}

// fitSlice cuts a slice's reservations until they fit its capacities,
// every team in proportion to its reservation (fitVec without demand),
// and recomputes the limits.
func (p *Pool) fitSlice() {
	n := p.configured
	v := newBudgets(n)
	v.setCaps(p.live)
	for i := range n {
		v.setRes(i, p.teams[i].res)
	}
	fitVec(v, n, nil)
	for i := range n {
		e := &p.teams[i]
		if r := v.res(i); r != e.res {
			e.res = r
			p.applyLimits(e)
		}
	}
}

// Sliced reports whether the pool decides against a slice (SetSlice).
// Cost: O(1).
func (p *Pool) Sliced() bool { return p.sliced }

// Slice returns the slice the pool decides against and true, or false
// when it decides against the whole pool. It allocates.
func (p *Pool) Slice() (Slice, bool) {
	if !p.sliced {
		return Slice{}, false
	}
	n := p.configured
	s := makeSlice(n)
	s.setCaps(p.live)
	for i := range n {
		s.setReserved(i, p.teams[i].res)
	}
	return s, true
}
