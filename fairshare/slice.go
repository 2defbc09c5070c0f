package fairshare

// A pool's slice: the part of the pool one replica decides against when
// several proxies share it (see replicas.go for the rule that computes
// the slices).

// Totals returns what the slices of the pool divide: the configured
// teams in configuration order, the configured capacity and KV tokens,
// and every team's reservation in both as apportion.go gives them. It
// allocates. Cost: O(kinds · teams · log teams).
func (p *Pool) Totals() Totals {
	n := p.configured
	t := Totals{Teams: make([]string, n), Whole: makeSlice(n)}
	t.Whole.setCaps(p.total)
	shares := make([]float64, n)
	for i := range n {
		t.Teams[i], shares[i] = p.teams[i].name, p.teams[i].share
	}
	out := make([]int, n)
	res := make([]amounts, n)
	for k := range numKinds {
		apportion(int(p.total[k]), t.Teams, shares, out)
		for i := range n {
			res[i][k] = int64(out[i])
		}
	}
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
// 0). Values are clamped into [0, the configured totals], and
// reservations cut, every team in proportion to its reservation, until
// they fit the slice's capacities, so that within-share requests never outnumber the slice.
// Requests in flight keep their standing. A nil s returns the pool to
// the whole configuration (the live capacity becomes the configured
// one) and clears the loans (SetLoans; a slice keeps them). The slice is kept in the record; Reconfigure keeps it, each
// team's reservation with its team (a new team gets none until the next
// slice). Cost: O(teams · kinds).
func (p *Pool) SetSlice(s *Slice) {
	defer p.invalidate()
	if s == nil {
		p.sliced = false
		for i := range p.teams {
			p.teams[i].lent = amounts{}
		}
		p.live = p.total
		p.reapportion()
		return
	}
	p.sliced = true
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
}

// maxAmount bounds a reservation of a slice in every kind.
var maxAmount = amounts{kindSeq: maxCapacity, kindTok: maxTokens}

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
