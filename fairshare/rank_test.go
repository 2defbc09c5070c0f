package fairshare

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortFloatsMatchesSlicesSort: sortFloats leaves every slice, short
// (insertion) or long (slices.Sort), bit for bit as slices.Sort does, on
// random values with many ties, zeros, infinities and NaNs.
func TestSortFloatsMatchesSlicesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := []float64{0, 1, 2.5, math.Inf(1), math.NaN(), 1e-300, 1 + 1e-12}
	for trial := range 20000 {
		n := rng.IntN(80)
		h := make([]float64, n)
		for i := range h {
			if rng.IntN(3) == 0 {
				h[i] = pick[rng.IntN(len(pick))]
			} else {
				h[i] = rng.ExpFloat64() * float64(1+trial%7)
			}
		}
		want := slices.Clone(h)
		slices.Sort(want)
		sortFloats(h)
		for i := range h {
			if math.Float64bits(h[i]) != math.Float64bits(want[i]) {
				t.Fatalf("trial %d (n=%d): [%d] = %v, slices.Sort %v", trial, n, i, h[i], want[i])
			}
		}
	}
}
