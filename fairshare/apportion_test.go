package fairshare

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestApportion(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name     string
		capacity int
		names    []string
		shares   map[string]float64
		want     map[string]int
	}{
		{"seed example: 8 + 2, never 9 + 2", 10, []string{"a", "b"}, map[string]float64{"a": 0.8125, "b": 0.1875}, map[string]int{"a": 8, "b": 2}},
		{"exact quotas", 10, []string{"a", "b"}, map[string]float64{"a": 0.6, "b": 0.4}, map[string]int{"a": 6, "b": 4}},
		{"decimal shares summing to 1 fill C", 10, []string{"x", "y", "z"}, map[string]float64{"x": 0.1, "y": 0.2, "z": 0.7}, map[string]int{"x": 1, "y": 2, "z": 7}},
		{"largest remainder wins", 7, []string{"a", "b", "c"}, map[string]float64{"a": 0.5, "b": 0.3, "c": 0.2}, map[string]int{"a": 4, "b": 2, "c": 1}},
		{"ties in name order", 1, []string{"b", "a"}, map[string]float64{"a": 0.5, "b": 0.5}, map[string]int{"a": 1, "b": 0}},
		{"ties in name order, two left", 2, []string{"c", "b", "a"}, map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3}, map[string]int{"a": 1, "b": 1, "c": 0}},
		{"shares below 1 leave slots free", 10, []string{"a", "b"}, map[string]float64{"a": 0.45, "b": 0.3}, map[string]int{"a": 4, "b": 3}},
		{"shares above 1 scaled to 1", 4, []string{"a", "b"}, map[string]float64{"a": 1, "b": 1}, map[string]int{"a": 2, "b": 2}},
		{"NaN, negative and infinite count as 0", 4, []string{"a", "b", "c", "d"}, map[string]float64{"a": nan, "b": -1, "c": inf, "d": 1}, map[string]int{"a": 0, "b": 0, "c": 0, "d": 4}},
		{"missing share counts as 0", 3, []string{"a", "b"}, map[string]float64{"a": 1}, map[string]int{"a": 3, "b": 0}},
		{"duplicates count once", 3, []string{"a", "a"}, map[string]float64{"a": 1}, map[string]int{"a": 3}},
		{"capacity 0", 0, []string{"a"}, map[string]float64{"a": 1}, map[string]int{"a": 0}},
		{"negative capacity", -5, []string{"a"}, map[string]float64{"a": 1}, map[string]int{"a": 0}},
		{"no names", 5, nil, nil, map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := apportionMap(tt.capacity, tt.names, tt.shares)
			if len(got) != len(tt.want) {
				t.Fatalf("apportionMap(%d, %v, %v) = %v, want %v", tt.capacity, tt.names, tt.shares, got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("apportionMap(%d, %v, %v) = %v, want %v", tt.capacity, tt.names, tt.shares, got, tt.want)
				}
			}
		})
	}
}

// TestApportionProperties: Σ ≤ C, Σ = C when the shares sum to 1, and
// every reservation is its quota rounded down or up.
func TestApportionProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	for range 5000 {
		n := 1 + r.IntN(len(names))
		c := r.IntN(200)
		raw := make([]float64, n)
		sum := 0.0
		for i := range raw {
			raw[i] = r.Float64()
			sum += raw[i]
		}
		toOne := r.IntN(2) == 0
		shares := map[string]float64{}
		for i := range n {
			s := raw[i]
			if toOne {
				s /= sum
			} else {
				s /= sum * (1 + r.Float64())
			}
			shares[names[i]] = s
		}
		got := apportionMap(c, names[:n], shares)
		total := 0
		for _, name := range names[:n] {
			q := shares[name] * float64(c)
			if v := got[name]; float64(v) < math.Floor(q)-1e-6 || float64(v) > math.Ceil(q)+1e-6 {
				t.Fatalf("apportionMap(%d, %v)[%s] = %d, quota %v", c, shares, name, v, q)
			}
			total += got[name]
		}
		if total > c || toOne && total != c {
			t.Fatalf("apportionMap(%d, %v) sums to %d (shares sum to 1: %v)", c, shares, total, toOne)
		}
	}
}
