package trace

import (
	"math"
	"testing"
	"time"
)

// at returns requests arriving at the given seconds with prompt 10·i and
// output i (i the position).
func at(secs ...float64) []Request {
	out := make([]Request, len(secs))
	for i, s := range secs {
		out[i] = Request{Arrival: seconds(s), Prompt: 10 * (i + 1), Output: i + 1}
	}
	return out
}

func TestSummarize(t *testing.T) {
	cases := []struct {
		name string
		reqs []Request
		span time.Duration
		want Stats
	}{
		{name: "empty", want: Stats{}},
		{name: "empty with a span", span: 2 * time.Minute, want: Stats{Span: 2 * time.Minute, Minutes: 2}},
		{
			name: "one request",
			reqs: at(5),
			want: Stats{Count: 1, Span: 5 * time.Second, Rate: 0.2, Prompt: Summary{10, 10, 10}, Output: Summary{1, 1, 1}},
		},
		{
			name: "regular arrivals",
			reqs: at(0, 1, 2, 3),
			span: 4 * time.Second,
			want: Stats{Count: 4, Span: 4 * time.Second, Rate: 1, CV: 0, Prompt: Summary{25, 20, 40}, Output: Summary{2.5, 2, 4}},
		},
		{
			// Gaps 1 and 3: mean 2, standard deviation 1.
			name: "two gaps",
			reqs: at(0, 1, 4),
			span: 0,
			want: Stats{Count: 3, Span: 4 * time.Second, Rate: 0.75, CV: 0.5, Prompt: Summary{20, 20, 30}, Output: Summary{2, 2, 3}},
		},
		{
			// Unsorted input; minutes [0,60) has 3, [60,120) has 1,
			// [120,180) has 0; 190 s is in the partial fourth minute.
			name: "per minute",
			reqs: at(61, 0, 59.999, 30, 190),
			span: 200 * time.Second,
			want: Stats{Count: 5, Span: 200 * time.Second, Rate: 0.025, CV: cvOf(0, 30, 59.999, 61, 190), Minutes: 3, MinPerMinute: 0, MaxPerMinute: 3, Prompt: Summary{30, 30, 50}, Output: Summary{3, 3, 5}},
		},
		{
			// Nearest rank: the median of 1..100 is the 50th value, the
			// p99 the 99th.
			name: "percentiles",
			reqs: hundred(),
			span: time.Minute,
			want: Stats{Count: 100, Span: time.Minute, Rate: 100.0 / 60, CV: 0, Minutes: 1, MinPerMinute: 100, MaxPerMinute: 100, Prompt: Summary{505, 500, 990}, Output: Summary{50.5, 50, 99}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Summarize(c.reqs, c.span)
			if !statsEqual(got, c.want) {
				t.Errorf("Summarize\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// hundred returns 100 requests, one every 0.5 s from 0.
func hundred() []Request {
	secs := make([]float64, 100)
	for i := range secs {
		secs[i] = float64(i) * 0.5
	}
	return at(secs...)
}

// cvOf computes the inter-arrival CV of sorted secs the long way.
func cvOf(secs ...float64) float64 {
	var gaps []float64
	for i := 1; i < len(secs); i++ {
		gaps = append(gaps, secs[i]-secs[i-1])
	}
	var mean, ss float64
	for _, g := range gaps {
		mean += g
	}
	mean /= float64(len(gaps))
	for _, g := range gaps {
		ss += (g - mean) * (g - mean)
	}
	return math.Sqrt(ss/float64(len(gaps))) / mean
}

// statsEqual compares with a tolerance on the floating-point fields.
func statsEqual(a, b Stats) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return a.Count == b.Count && a.Span == b.Span && near(a.Rate, b.Rate) && near(a.CV, b.CV) &&
		a.Minutes == b.Minutes && a.MinPerMinute == b.MinPerMinute && a.MaxPerMinute == b.MaxPerMinute &&
		near(a.Prompt.Mean, b.Prompt.Mean) && a.Prompt.Median == b.Prompt.Median && a.Prompt.P99 == b.Prompt.P99 &&
		near(a.Output.Mean, b.Output.Mean) && a.Output.Median == b.Output.Median && a.Output.P99 == b.Output.P99
}

func TestStatsString(t *testing.T) {
	s := Summarize(at(0, 1, 4), 0)
	want := "3 requests in 4s: 0.75/s, inter-arrival CV 0.50, 0 to 0 a minute; prompt mean 20 (median 20, p99 30), output mean 2 (median 2, p99 3)"
	if got := s.String(); got != want {
		t.Errorf("String\n got %s\nwant %s", got, want)
	}
}
