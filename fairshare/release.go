package fairshare

import "time"

// settleEps is the relative size below which what is left of a team's
// usage after removing a penalty counts as rounding error (0).
const settleEps = 1e-12

// Release ends the request of g at time now and charges the resources it
// actually consumed (cost units; negative, NaN and infinite values count as
// 0) to its team's usage. It reports false, doing nothing, if g was
// already released; otherwise it marks g released and reports true.
//
// The request leaves the count of its holder. If that holder was presumed
// dead and its requests turned into phantoms, one phantom of the team is
// dropped instead (one of the grant's standing if there is one); if those
// phantoms have expired too, nothing is left to drop. A request released
// so late that it was already dropped as lost (more than one to two
// RequestTimeouts after it was granted, see leases.go) only settles usage. Usage is settled
// either way: what remains of the entry penalty after decay,
// Penalty·exp(−λ(now−At)), is removed and the consumption is added, so once
// every request has been released the team's usage is exactly the decayed
// sum of what it consumed (the pool keeps the consumption apart from the
// penalties not yet settled, so a penalty far larger than the usage does
// not cost the usage its low digits). A Release never removes more
// penalty than is still charged.
// A grant that outlived its team's entry (the team was removed, its
// requests expired as phantoms, and a later configuration added it again)
// only charges its consumption to the new entry. A Release counts as a heartbeat of its holder if
// the holder is still in the record.
//
// A grant charged to its team's work debt (Grant.Work > 0, resources.go)
// settles it: the debt becomes debt + consumed − Work, at least 0, so a
// request that cost less than its estimate gives the difference back and
// one that cost more owes it.
//
// Usage is charged from consumption, never from time in flight: a request
// waiting in vLLM's queue is in flight but consumes nothing.
//
// CAS callers copy the grant per attempt (gc := *g; p.Release(now, &gc, c))
// and keep gc only if the write succeeded. Cost: O(teams).
func (p *Pool) Release(now time.Time, g *Grant, consumed float64) bool {
	if g == nil || g.released {
		return false
	}
	g.released = true
	t := now.UnixNano()
	p.advance(t)
	hi := p.findHolder(g.Holder)
	if hi >= 0 && t > p.holders[hi].seen {
		p.holders[hi].seen = t
	}
	i := p.find(g.Team)
	if i < 0 {
		return true // the team's entry is gone with all its requests
	}
	// A grant that outlived its team's entry (dropped, then created again
	// by a later configuration) only charges its consumption.
	current := p.teams[i].epoch == g.epoch
	// A request not released within its window and the next one was
	// dropped from the count already (leases.go): nothing to uncount.
	gen := p.window(g.At)
	counted := p.requestTimeout <= 0 || gen >= p.window(p.now)-1
	residual := 0.0
	if current {
		if d := g.demand(); counted && !(hi >= 0 && p.uncount(hi, i, gen, g.Borrowing, d)) {
			p.dropPhantom(i, g.Borrowing, d)
		}
		e := &p.teams[i]
		e.estimate -= g.Estimate
		if e.estimate < 0 || e.inFlight() == 0 {
			e.estimate = 0
		}
		residual = sanitizeAmount(g.Penalty)
	}
	p.decayTo(t)
	if te := max(t, p.usageAt); te > g.At {
		residual *= p.decayFactor(te - g.At)
	}
	e := &p.teams[i]
	// Only what is still charged can be removed; the consumption settled
	// is never touched by it.
	residual = min(residual, e.penalty)
	e.penalty -= residual
	if e.penalty < settleEps*residual {
		e.penalty = 0
	}
	e.usage = min(e.usage+sanitizeAmount(consumed), maxUsage)
	e.updated, e.lastUpdate = true, max(t, p.usageAt)
	if current {
		p.releaseUser(i, g, residual, sanitizeAmount(consumed))
	}
	if current && g.Work > 0 && p.total[kindWork] > 0 {
		// The debt was paid down to now (decayTo above): it now owes
		// what the request cost rather than its estimate.
		e.debt = min(max(0, e.debt+sanitizeAmount(consumed)-g.Work), maxUsage)
	}
	if hi >= 0 && p.holderTimeout == 0 && p.holders[hi].idle() {
		p.removeHolder(hi)
	}
	p.compact()
	return true
}

// uncount removes one request of entry i granted in window gen with the
// given standing, demanding d, from holder hi and reports whether the
// holder had one. A count never gives back more than it holds in any
// kind (a grant forged or from another record). When no count of window
// gen holds such a request, the one of the nearest window does: a
// Reconfigure that changed RequestTimeout re-windowed the holder's counts,
// and a grant's window computed anew may then fall next to its count's
// (without this, the request stayed counted until it expired).
func (p *Pool) uncount(hi, i int, gen int64, borrowing bool, d amounts) bool {
	h := &p.holders[hi]
	best, dist := -1, int64(-1)
	for k := range h.counts {
		c := &h.counts[k]
		if c.team != i || borrowing && c.borrowing[kindSeq] == 0 || !borrowing && c.within[kindSeq] == 0 {
			continue
		}
		dg := c.gen - gen
		if dg < 0 {
			dg = -dg
		}
		if best < 0 || dg < dist {
			best, dist = k, dg
		}
	}
	if best < 0 {
		return false
	}
	return p.uncountAt(hi, best, borrowing, d)
}

// uncountAt removes one request of the given standing, demanding d, from
// count k of holder hi, which holds one.
func (p *Pool) uncountAt(hi, k int, borrowing bool, d amounts) bool {
	h := &p.holders[hi]
	c := &h.counts[k]
	e := &p.teams[c.team]
	x, sum := &c.within, &e.within
	if borrowing {
		x, sum = &c.borrowing, &e.borrowing
	}
	if x[kindSeq] == 0 {
		return false
	}
	for r := 1; r < numCounted; r++ {
		y := min(max(d[r], 0), x[r])
		if x[kindSeq] == 1 {
			y = x[r]
		}
		x[r] -= y
		sum[r] -= y
	}
	x[kindSeq]--
	sum[kindSeq]--
	if c.within[kindSeq] == 0 && c.borrowing[kindSeq] == 0 {
		h.counts = append(h.counts[:k], h.counts[k+1:]...)
	}
	return true
}
