package fairshare

// A pool's slice: the part of the pool one replica decides against when
// several proxies share it (see replicas.go for the rule that computes
// the slices).

// Totals returns what the slices of the pool divide: the configured
// teams in configuration order, the configured capacity and KV tokens,
// and every team's reservation in both as apportion.go gives them. It
// allocates. Cost: O(teams · log teams).
func (p *Pool) Totals() Totals {
	n := p.configured
	t := Totals{Teams: make([]string, n), Whole: Slice{
		Capacity: p.cfgCapacity, KVTokens: p.kvTokens,
		Reserved: make([]int, n), ReservedTokens: make([]int64, n),
	}}
	shares := make([]float64, n)
	for i := range n {
		t.Teams[i], shares[i] = p.teams[i].name, p.teams[i].share
	}
	tok := make([]int, n)
	apportion(p.cfgCapacity, t.Teams, shares, t.Whole.Reserved)
	apportion(int(p.kvTokens), t.Teams, shares, tok)
	for i := range n {
		t.Whole.ReservedTokens[i] = int64(tok[i])
	}
	return t
}

// Report returns what the pool's member report carries (Member): every
// configured team's demand (requests in flight, phantoms included, plus
// waiting) and what is in flight against each budget: all requests
// (Capacity, KVTokens; removed teams and UnknownTeam included) and every
// configured team's within-share requests (Reserved, ReservedTokens). It
// allocates. Cost: O(teams).
func (p *Pool) Report() (demand []int, used Slice) {
	n := p.configured
	demand = make([]int, n)
	used = Slice{Reserved: make([]int, n), ReservedTokens: make([]int64, n)}
	for i := range p.teams {
		e := &p.teams[i]
		used.Capacity += e.inFlight()
		used.KVTokens += e.inFlightTokens()
		if i < n {
			demand[i] = e.inFlight() + e.waiting
			used.Reserved[i] = e.within + e.pWithin
			used.ReservedTokens[i] = e.wTok + e.pwTok
		}
	}
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
// slice). Cost: O(teams).
func (p *Pool) SetSlice(s *Slice) {
	defer p.invalidate()
	if s == nil {
		p.sliced, p.sliceTok = false, 0
		for i := range p.teams {
			p.teams[i].lent, p.teams[i].lentTok = 0, 0
		}
		p.capacity = p.cfgCapacity
		p.reapportion()
		return
	}
	p.sliced = true
	p.capacity = min(max(s.Capacity, 0), p.cfgCapacity)
	p.sliceTok = min(max(s.KVTokens, 0), p.kvTokens)
	for i := range p.teams {
		e := &p.teams[i]
		e.reserved, e.resTok = 0, 0
		if i < p.configured && i < len(s.Reserved) {
			e.reserved = min(max(s.Reserved[i], 0), maxCapacity)
		}
		if i < p.configured && i < len(s.ReservedTokens) && p.kvTokens > 0 {
			e.resTok = min(max(s.ReservedTokens[i], 0), maxTokens)
		}
	}
	p.reapportion()
}

// fitSlice cuts a slice's reservations until they fit its capacity and
// tokens, every team in proportion to its reservation (fitVec without
// demand),
// and recomputes the limits.
func (p *Pool) fitSlice() {
	n := p.configured
	seq, tok := make([]int64, n), make([]int64, n)
	for i := range n {
		seq[i], tok[i] = int64(p.teams[i].reserved), p.teams[i].resTok
	}
	v := make([]int64, 2+2*n)
	v[0], v[1] = int64(p.capacity), p.sliceTok
	copy(v[2:], seq)
	copy(v[2+n:], tok)
	fitVec(v, n, nil)
	for i := range n {
		e := &p.teams[i]
		if int64(e.reserved) != v[2+i] || e.resTok != v[2+n+i] {
			e.reserved, e.resTok = int(v[2+i]), v[2+n+i]
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
	s := Slice{Capacity: p.capacity, KVTokens: p.sliceTok, Reserved: make([]int, n), ReservedTokens: make([]int64, n)}
	for i := range n {
		s.Reserved[i], s.ReservedTokens[i] = p.teams[i].reserved, p.teams[i].resTok
	}
	return s, true
}
