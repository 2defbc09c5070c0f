package fairshare

import (
	"math"
	"slices"
	"strings"
)

// apportionEps absorbs floating-point error in share × C, so that shares
// that sum to 1 in decimal (0.1 + 0.2 + 0.7) still fill all C slots.
const apportionEps = 1e-9

// Apportion divides the C slots of a pool into integer reservations with the
// largest-remainder (Hamilton) method: every team first gets
// floor(share × C), then the slots left up to floor(Σ share × C) go one each
// to the largest fractional parts, ties broken by name order (the smaller
// name first). The sum never exceeds C, and equals C when the shares sum to
// 1. Rounding each quota up instead could promise more within-share slots
// than C: with C = 10 and shares 0.8125 / 0.1875 it gives 9 + 2 = 11, where
// Apportion gives 8 + 2.
//
// Every name of names gets an entry (0 when it has no share); duplicate
// names count once. Shares that are negative, NaN or infinite count as 0;
// when the shares sum to more than 1 they are scaled down to sum to 1. A
// capacity below 1 gives every team 0. Cost: O(n log n) for n names; it
// allocates the result map.
func Apportion(capacity int, names []string, shares map[string]float64) map[string]int {
	uniq := make([]string, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	s := make([]float64, len(uniq))
	for i, n := range uniq {
		s[i] = shares[n]
	}
	r := make([]int, len(uniq))
	apportion(capacity, uniq, s, r)
	out := make(map[string]int, len(uniq))
	for i, n := range uniq {
		out[n] = r[i]
	}
	return out
}

// cleanShare maps negative, NaN and infinite shares to 0.
func cleanShare(s float64) float64 {
	if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
		return 0
	}
	return s
}

// apportion is Apportion on parallel slices: out[i] receives the
// reservation of names[i] with share shares[i]. names must be distinct.
func apportion(capacity int, names []string, shares []float64, out []int) {
	for i := range out {
		out[i] = 0
	}
	if capacity <= 0 || len(names) == 0 {
		return
	}
	sum := 0.0
	for _, s := range shares {
		sum += cleanShare(s)
	}
	if sum <= 0 {
		return
	}
	scale := 1.0
	if sum > 1 {
		scale = 1 / sum
		sum = 1
	}
	c := float64(capacity)
	target := int(math.Floor(sum*c + apportionEps))
	if target > capacity {
		target = capacity
	}
	rem := make([]float64, len(names))
	given := 0
	for i, s := range shares {
		q := cleanShare(s) * scale * c
		f := math.Floor(q + apportionEps)
		out[i] = int(f)
		rem[i] = q - f
		given += out[i]
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	// Largest remainder first; equal remainders in name order.
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return strings.Compare(names[a], names[b])
	})
	for k := 0; given < target && k < len(order); k++ {
		i := order[k]
		if cleanShare(shares[i]) == 0 {
			continue
		}
		out[i]++
		given++
	}
	// Floors with the epsilon cannot exceed the target in practice; keep
	// the bound unconditional anyway, taking back from the smallest
	// remainders.
	for k := len(order) - 1; given > capacity && k >= 0; k-- {
		if i := order[k]; out[i] > 0 {
			out[i]--
			given--
			k++
		}
	}
}
