package fairshare

import (
	"math"
	"slices"
)

// Level fairshare (Slurm's Fair Tree) of entry i:
//
//	S_i = share_i / Σ_j share_j                  (0 if Σ share = 0)
//	U_i = (usage_i/w_i) / Σ_j (usage_j/w_j)      (0 if Σ = 0)
//	LF_i = S_i / U_i
//
// with the sums over every entry of the pool (removed teams and
// UnknownTeam have share 0). Special cases, in this order: S_i = 0 gives
// LF 0 (unknown, removed and zero-share teams: always last, whatever their
// usage); U_i = 0 gives +Inf (a team with a share that has used nothing
// comes first). Shares and weights are finite and positive and usage is
// finite and bounded (see Config), so LF is never NaN.
//
// Rank is dense: rank_i = the number of distinct LF values (tie groups,
// below) above LF_i. The
// highest LF has rank 0, equal LF values share a rank, and the most
// over-served team has the largest rank. Priorities cap it at MaxRank.
//
// Equal means equal up to floating-point error: LF values within a
// relative lfTieEps of each other are one value. Two teams whose LF is the
// same in exact arithmetic (shares 0.05 and 0.15 with usage in the same
// proportion) often differ in the last bits once computed, and would
// otherwise be ranked apart by rounding noise. Values are grouped from the
// highest down: a group is every value within lfTieEps (relative) of its
// highest one, so a rank never spans more than that.

// lfTieEps is the relative difference below which two LF values tie.
const lfTieEps = 1e-9

// sameLF reports whether lf value v (<= head) belongs to the tie group
// whose highest value is head.
func sameLF(head, v float64) bool {
	return v == head || v >= head*(1-lfTieEps)
}

// levelFairshares fills p.lf with every entry's LF and returns it.
func (p *Pool) levelFairshares() []float64 {
	n := len(p.teams)
	if cap(p.lf) < n {
		p.lf = make([]float64, n, n+4)
	}
	lf := p.lf[:n]
	sumS, sumU := 0.0, 0.0
	for i := range p.teams {
		e := &p.teams[i]
		sumS += e.share
		sumU += e.weightedUsage()
	}
	for i := range p.teams {
		e := &p.teams[i]
		s, u := 0.0, 0.0
		if sumS > 0 {
			s = e.share / sumS
		}
		if s == 0 {
			lf[i] = 0
			continue
		}
		if sumU > 0 {
			u = e.weightedUsage() / sumU
		}
		if u == 0 {
			lf[i] = math.Inf(1)
		} else {
			lf[i] = s / u
		}
	}
	return lf
}

// denseRank returns the dense rank of x, a value of lf: the number of tie
// groups (see lfTieEps) above x's, using p.higher as scratch. Cost:
// O(n log n), no allocation once the scratch has grown.
func (p *Pool) denseRank(lf []float64, x float64) int {
	h := p.higher[:0]
	for _, v := range lf {
		if v >= x { // values below x do not change the groups down to x
			h = append(h, v)
		}
	}
	p.higher = h
	slices.Sort(h)
	return tieGroups(h, nil)
}

// tieGroups walks h, sorted ascending, from its highest value down,
// starting a new tie group wherever a value is not sameLF as its group's
// highest, and returns the dense rank of h[0] (0 if h is empty). When
// ranks is not nil, ranks[k] receives the rank of h[k].
func tieGroups(h []float64, ranks []int) int {
	r := 0
	head := 0.0
	for k := len(h) - 1; k >= 0; k-- {
		if k == len(h)-1 {
			head = h[k]
		} else if !sameLF(head, h[k]) {
			head = h[k]
			r++
		}
		if ranks != nil {
			ranks[k] = r
		}
	}
	return r
}

// rank returns the dense LF rank of entry i (uncapped).
func (p *Pool) rank(i int) int {
	lf := p.levelFairshares()
	return p.denseRank(lf, lf[i])
}

// weightedUsage is total usage/weight (without a division for weight 1,
// the same value).
func (e *entry) weightedUsage() float64 {
	if e.weight == 1 {
		return e.total()
	}
	return e.total() / e.weight
}
