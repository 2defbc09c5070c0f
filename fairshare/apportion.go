package fairshare

import (
	"math"
	"slices"
	"strings"
)

// apportionEps absorbs floating-point error in share × C, so that shares
// that sum to 1 in decimal (0.1 + 0.2 + 0.7) still fill all C slots, and
// remainders equal in decimal (0.01 and 0.11 of 40: 0.4 both) tie. The
// tolerance grows with C above 10^6 (apportionTol), as the error of
// share × C does.
const apportionEps = 1e-9

// apportionTol is the tolerance of share × C for a capacity c.
func apportionTol(c float64) float64 {
	return apportionEps * max(1, c*1e-6)
}

// cleanShare maps negative, NaN and infinite shares to 0 and clamps the
// others to maxShare, so that the sum of a pool's shares stays finite.
func cleanShare(s float64) float64 {
	if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
		return 0
	}
	return min(s, maxShare)
}

// apportion divides the C slots of a pool into integer reservations with the
// largest-remainder (Hamilton) method: every team first gets
// floor(share × C), then the slots left up to floor(Σ share × C) go one each
// to the largest fractional parts, ties broken by name order (the smaller
// name first). The sum never exceeds C, and equals C when the shares sum to
// 1. Both hold up to floating-point error: fractional parts within about
// 1e-9 of each other tie (0.01 × 40 and 0.11 × 40 are both 0.4), and
// shares that sum to 1 in decimal (ten of 0.1) fill C. Rounding each quota up instead could promise more within-share slots
// than C: with C = 10 and shares 0.8125 / 0.1875 it gives 9 + 2 = 11, where
// apportion gives 8 + 2.
//
// out[i] receives the reservation of names[i] with share shares[i];
// names must be distinct. Shares that are negative, NaN or infinite count as 0,
// shares above 1e9 as 1e9; when the shares sum to more than 1 they are
// scaled down to sum to 1. A
// capacity below 1 gives every team 0. Cost: O(n log n) for n names.
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
	tol := apportionTol(c)
	target := int(math.Floor(sum*c + tol))
	if target > capacity {
		target = capacity
	}
	rem := make([]float64, len(names))
	given := 0
	for i, s := range shares {
		q := cleanShare(s) * scale * c
		f := math.Floor(q + tol)
		out[i] = int(f)
		rem[i] = q - f
		given += out[i]
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	// Largest remainder first; equal remainders in name order. Equal
	// means within tol of the largest remainder of the tie group (a
	// group starts at the largest remainder not in the groups before).
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return strings.Compare(names[a], names[b])
	})
	for k := 0; k < len(order); {
		j := k + 1
		for j < len(order) && rem[order[j]] >= rem[order[k]]-tol {
			j++
		}
		if j-k > 1 {
			slices.SortFunc(order[k:j], func(a, b int) int { return strings.Compare(names[a], names[b]) })
		}
		k = j
	}
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
