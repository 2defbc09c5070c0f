package fairbench

import (
	"math"
	"testing"
)

// TestFairShares: weighted max-min fairness over the saturated teams'
// service, each team capped at what it offered.
func TestFairShares(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name         string
		total        float64
		shares, caps []float64
		want         []float64
	}{
		{"no caps: shares normalised", 100, []float64{0.2, 0.1}, []float64{inf, inf}, []float64{2.0 / 3, 1.0 / 3}},
		{"caps above the shares change nothing", 100, []float64{0.2, 0.1}, []float64{70, 40}, []float64{2.0 / 3, 1.0 / 3}},
		// t1's case: the larger share asks for less than two thirds.
		{"a capped team leaves the rest to the other", 100, []float64{0.2, 0.1}, []float64{55, inf}, []float64{0.55, 0.45}},
		{"the rest is divided by share among the uncapped", 100, []float64{0.5, 0.3, 0.2}, []float64{10, inf, inf}, []float64{0.10, 0.54, 0.36}},
		{"a cap freed by one lifts another over its cap", 100, []float64{0.4, 0.3, 0.3}, []float64{10, 40, inf}, []float64{0.10, 0.40, 0.50}},
		{"caps below the total: each its cap over their sum", 100, []float64{0.5, 0.5}, []float64{30, 20}, []float64{0.6, 0.4}},
		{"nothing served", 0, []float64{0.5, 0.5}, []float64{inf, inf}, []float64{0, 0}},
		{"no teams", 100, nil, nil, []float64{}},
	}
	for _, tc := range tests {
		got := FairShares(tc.total, tc.shares, tc.caps)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: FairShares = %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: FairShares(%v, %v, %v) = %v, want %v", tc.name, tc.total, tc.shares, tc.caps, got, tc.want)
				break
			}
		}
	}
}
