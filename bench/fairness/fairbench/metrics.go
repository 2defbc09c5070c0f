package fairbench

import (
	"math"
	"sort"
	"time"
)

// Percentile returns the q-quantile (q in [0, 1]) of xs by the nearest-rank
// method: the smallest x such that at least q·n values are <= x. xs need
// not be sorted and is not modified. It returns 0 for an empty slice.
func Percentile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return percentileSorted(s, q)
}

func percentileSorted(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(s)))) - 1
	if k < 0 {
		k = 0
	}
	if k >= len(s) {
		k = len(s) - 1
	}
	return s[k]
}

// Jain returns Jain's fairness index (Σx)² / (n·Σx²) of xs: 1 when all are
// equal, 1/n when one value takes everything. Callers pass share-normalised
// throughputs (throughput / share) so that 1 means "everyone got its share".
// It returns 1 for an empty slice or all zeros.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// GapSample is the state of the teams at one sampling instant, as
// ServiceGap reads it.
type GapSample struct {
	// Service is each team's cumulative service divided by its weight.
	Service []float64
	// Backlogged tells which teams had requests waiting for service.
	Backlogged []bool
}

// ServiceGap returns VTC's fairness measure on sampled curves: the largest
// |ΔW_f − ΔW_g| over every pair of teams f, g and every interval [t1, t2]
// during which both were backlogged at every sample, where ΔW is a team's
// weighted service received in the interval. For one pair and one joint
// backlog period it is max D − min D of D = W_f − W_g over the period's
// samples. It returns 0 when no two teams are ever backlogged together.
func ServiceGap(samples []GapSample) float64 {
	if len(samples) == 0 {
		return 0
	}
	n := len(samples[0].Service)
	gap := 0.0
	for f := 0; f < n; f++ {
		for g := f + 1; g < n; g++ {
			in := false
			lo, hi := 0.0, 0.0
			for _, s := range samples {
				if !(s.Backlogged[f] && s.Backlogged[g]) {
					in = false
					continue
				}
				d := s.Service[f] - s.Service[g]
				if !in {
					in, lo, hi = true, d, d
				}
				lo, hi = math.Min(lo, d), math.Max(hi, d)
				gap = math.Max(gap, hi-lo)
			}
		}
	}
	return gap
}

// CDF returns the points of the empirical CDF of xs in seconds: for the
// i-th smallest value, (x_i, (i+1)/n).
func CDF(xs []time.Duration) (x, y []float64) {
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	for i, v := range s {
		x = append(x, v.Seconds())
		y = append(y, float64(i+1)/float64(len(s)))
	}
	return x, y
}
