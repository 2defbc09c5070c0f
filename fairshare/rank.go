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
// Rank is dense: rank_i = the number of distinct LF values above LF_i. The
// highest LF has rank 0, equal LF values share a rank, and the most
// over-served team has the largest rank. Priorities cap it at MaxRank.

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

// denseRank returns the number of distinct values of lf above x, using
// p.higher as scratch. Cost: O(n log n), no allocation once the scratch
// has grown.
func (p *Pool) denseRank(lf []float64, x float64) int {
	h := p.higher[:0]
	for _, v := range lf {
		if v > x {
			h = append(h, v)
		}
	}
	p.higher = h
	if len(h) == 0 {
		return 0
	}
	slices.Sort(h)
	r := 1
	for k := 1; k < len(h); k++ {
		if h[k] != h[k-1] {
			r++
		}
	}
	return r
}

// rank returns the dense LF rank of entry i (uncapped).
func (p *Pool) rank(i int) int {
	lf := p.levelFairshares()
	return p.denseRank(lf, lf[i])
}

// weightedUsage is usage/weight (without a division for weight 1, the
// same value).
func (e *entry) weightedUsage() float64 {
	if e.weight == 1 {
		return e.usage
	}
	return e.usage / e.weight
}
