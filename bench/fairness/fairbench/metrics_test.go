package fairbench

import (
	"math"
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		xs   []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of 4 is the 2nd (nearest rank)", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(seq(1, 100)...), 0.99, 99 * time.Millisecond},
		{"p99 of 101 is the 100th", ms(seq(1, 101)...), 0.99, 100 * time.Millisecond},
		{"p0 is the minimum", ms(5, 3, 9), 0, 3 * time.Millisecond},
		{"p100 is the maximum", ms(5, 3, 9), 1, 9 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := Percentile(tt.xs, tt.q); got != tt.want {
			t.Errorf("%s: Percentile(%v, %v) = %v, want %v", tt.name, tt.xs, tt.q, got, tt.want)
		}
	}
}

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

func TestPercentileDoesNotModify(t *testing.T) {
	xs := ms(3, 1, 2)
	Percentile(xs, 0.5)
	if xs[0] != 3*time.Millisecond || xs[1] != time.Millisecond {
		t.Errorf("Percentile sorted its argument: %v", xs)
	}
}

func TestJain(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{
		{nil, 1},
		{[]float64{0, 0}, 1},
		{[]float64{1, 1, 1}, 1},
		{[]float64{1, 0}, 0.5},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{1, 2}, 9.0 / 10},
		{[]float64{2, 4}, 9.0 / 10}, // scale-free
	}
	for _, tt := range tests {
		if got := Jain(tt.xs); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
}

func gs(f, g float64, bf, bg bool) GapSample {
	return GapSample{Service: []float64{f, g}, Backlogged: []bool{bf, bg}}
}

func TestServiceGap(t *testing.T) {
	tests := []struct {
		name    string
		samples []GapSample
		want    float64
	}{
		{"no samples", nil, 0},
		{"never backlogged together", []GapSample{gs(0, 0, true, false), gs(100, 0, true, false)}, 0},
		{"equal service", []GapSample{gs(0, 0, true, true), gs(10, 10, true, true), gs(20, 20, true, true)}, 0},
		{"one pulls ahead", []GapSample{gs(0, 0, true, true), gs(30, 10, true, true)}, 20},
		{"ahead then behind: max - min of the difference", []GapSample{gs(0, 0, true, true), gs(30, 10, true, true), gs(30, 40, true, true)}, 30},
		{"a gap before a joint period does not count", []GapSample{gs(0, 0, true, false), gs(500, 0, true, false), gs(500, 0, true, true), gs(510, 5, true, true)}, 5},
		{"periods are separate", []GapSample{gs(0, 0, true, true), gs(10, 0, true, true), gs(10, 0, false, true), gs(100, 0, true, true), gs(104, 0, true, true)}, 10},
	}
	for _, tt := range tests {
		if got := ServiceGap(tt.samples); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: ServiceGap = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCDF(t *testing.T) {
	x, y := CDF(ms(300, 100, 200, 400))
	wantX := []float64{0.1, 0.2, 0.3, 0.4}
	wantY := []float64{0.25, 0.5, 0.75, 1}
	for i := range wantX {
		if math.Abs(x[i]-wantX[i]) > 1e-12 || y[i] != wantY[i] {
			t.Fatalf("CDF = %v, %v, want %v, %v", x, y, wantX, wantY)
		}
	}
}

func TestCollectorSharesAndJain(t *testing.T) {
	s := &Scenario{Name: "t", Duration: 10, Teams: []TeamSpec{{Name: "a", Share: 0.75}, {Name: "b", Share: 0.25}}}
	c := newCollector(s)
	a := &Request{Team: "a", Prompt: 10}
	b := &Request{Team: "b", Prompt: 10}
	// a gets 3 times b's service: exactly its entitlement.
	for k := 1; k <= 30; k++ {
		c.token(a, k, time.Second)
	}
	c.token(b, 1, time.Second) // 10 + 2
	for k := 2; k <= 25; k++ {
		c.token(b, k, time.Second) // 24 · 2
	}
	res := c.result(nil, 10*time.Second)
	if got, want := res.Teams[0].Service, 10+30*2.0; got != want {
		t.Errorf("service of a = %v, want %v", got, want)
	}
	if got, want := res.Teams[1].Service, 10+25*2.0; got != want {
		t.Errorf("service of b = %v, want %v", got, want)
	}
	// 70 vs 60: shares 0.538 / 0.462 against 0.75 / 0.25.
	if got := res.Teams[0].SatShare; math.Abs(got-70.0/130) > 1e-12 {
		t.Errorf("SatShare a = %v, want %v", got, 70.0/130)
	}
	x := []float64{(70.0 / 130) / 0.75, (60.0 / 130) / 0.25}
	if got, want := res.Pool.Jain, Jain(x); math.Abs(got-want) > 1e-12 {
		t.Errorf("Jain = %v, want %v", got, want)
	}
}

func TestCollectorCensorsUnfinished(t *testing.T) {
	s := &Scenario{Name: "t", Duration: 10, Teams: []TeamSpec{{Name: "a", Share: 1}}}
	c := newCollector(s)
	done := &Request{Team: "a", Arrival: 0, FirstToken: time.Second, Finished: 2 * time.Second}
	stuck := &Request{Team: "a", Arrival: 4 * time.Second, FirstToken: -1, Finished: -1}
	res := c.result([]*Request{done, stuck}, 15*time.Second)
	cr := res.Teams[0].Class[Interactive]
	if cr.Requests != 2 || cr.Unfinished != 1 || cr.NoToken != 1 {
		t.Errorf("requests/unfinished/no token = %d/%d/%d, want 2/1/1", cr.Requests, cr.Unfinished, cr.NoToken)
	}
	if cr.TTFTp99 != 11*time.Second {
		t.Errorf("TTFT p99 = %v, want 11s (censored at the end of the run)", cr.TTFTp99)
	}
}

func TestCollectorSequenceTime(t *testing.T) {
	// Window [2 s, 10 s). a holds a sequence 1–5 s (3 s in the window) and
	// 6–12 s (4 s); b 3–9 s (6 s) and 0–1 s (none in the window).
	s := &Scenario{Name: "t", Duration: 10, Warmup: 2, Teams: []TeamSpec{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}}
	c := newCollector(s)
	a := &Request{Team: "a"}
	b := &Request{Team: "b"}
	c.occupy(a, time.Second, 5*time.Second)
	c.occupy(a, 6*time.Second, 12*time.Second)
	c.occupy(b, 3*time.Second, 9*time.Second)
	c.occupy(b, 0, time.Second)
	res := c.result(nil, 12*time.Second)
	if got, want := res.Teams[0].SeqShare, 7.0/13; math.Abs(got-want) > 1e-12 {
		t.Errorf("SeqShare a = %v, want %v", got, want)
	}
	if got, want := res.Teams[1].SeqShare, 6.0/13; math.Abs(got-want) > 1e-12 {
		t.Errorf("SeqShare b = %v, want %v", got, want)
	}
}

func TestCollectorWithinInFlight(t *testing.T) {
	// Window [2 s, 10 s) of 8 s. a's within-share requests: in flight
	// 1–5 s (3 s in the window), 6 s to the end of the run at 12 s,
	// unfinished (4 s); its borrower 2–10 s does not count. b's: 3–9 s
	// (6 s); one held and never sent counts nothing.
	s := &Scenario{Name: "t", Duration: 10, Warmup: 2, Teams: []TeamSpec{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}}
	c := newCollector(s)
	sec := func(x float64) time.Duration { return Sec(x) }
	reqs := []*Request{
		{Team: "a", Arrival: 0, Submitted: sec(1), FirstToken: sec(2), Finished: sec(5)},
		{Team: "a", Arrival: sec(6), Submitted: sec(6), FirstToken: -1, Finished: -1},
		{Team: "a", Arrival: sec(2), Submitted: sec(2), FirstToken: sec(3), Finished: sec(10), Borrowing: true},
		{Team: "b", Arrival: sec(3), Submitted: sec(3), FirstToken: sec(4), Finished: sec(9)},
		{Team: "b", Arrival: sec(4), Submitted: -1, FirstToken: -1, Finished: -1},
	}
	res := c.result(reqs, sec(12))
	if got, want := res.Teams[0].WithinInFlight, 7.0/8; math.Abs(got-want) > 1e-12 {
		t.Errorf("WithinInFlight a = %v, want %v", got, want)
	}
	if got, want := res.Teams[1].WithinInFlight, 6.0/8; math.Abs(got-want) > 1e-12 {
		t.Errorf("WithinInFlight b = %v, want %v", got, want)
	}
}

// TestCollectorFairCapsOffered: a saturated team whose requests asked for
// less than its entitled part is entitled to what it asked, and the share
// error and Jain are measured against that.
func TestCollectorFairCapsOffered(t *testing.T) {
	s := &Scenario{Name: "t", Duration: 10, Teams: []TeamSpec{{Name: "a", Share: 0.75}, {Name: "b", Share: 0.25}}}
	c := newCollector(s)
	a := &Request{Team: "a", Client: -1, Prompt: 10, Output: 15, Arrival: time.Second, Finished: 2 * time.Second}
	b := &Request{Team: "b", Client: -1, Prompt: 10, Output: 500, Arrival: time.Second, Finished: -1}
	for k := 1; k <= 15; k++ {
		c.token(a, k, time.Second) // 10 + 15·2 = 40: all a asked for
	}
	for k := 1; k <= 45; k++ {
		c.token(b, k, time.Second) // 10 + 45·2 = 100
	}
	res := c.result([]*Request{a, b}, 10*time.Second)
	if got, want := res.Teams[0].Offered, 40.0; got != want {
		t.Errorf("Offered a = %v, want %v", got, want)
	}
	if got, want := res.Teams[0].Fair, 40.0/140; math.Abs(got-want) > 1e-12 {
		t.Errorf("Fair a = %v, want %v (capped at what it asked)", got, want)
	}
	if got := res.MaxShareError(); got > 1e-12 {
		t.Errorf("MaxShareError = %v, want 0: a got all it asked, b the rest", got)
	}
	if got := res.Pool.Jain; math.Abs(got-1) > 1e-12 {
		t.Errorf("Jain = %v, want 1", got)
	}
	if e := math.Abs(res.Teams[0].SatShare - res.Teams[0].Entitled); e < 0.4 {
		t.Errorf("SatShare − Entitled = %v, want the share-normalised error (about 0.46) still visible", e)
	}
}
