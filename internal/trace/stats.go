package trace

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Stats summarises a request stream, to say honestly which window a run
// replayed.
type Stats struct {
	// Count is the number of requests.
	Count int
	// Span is the stream's length: the span given to Summarize, or the
	// last arrival when that was 0.
	Span time.Duration
	// Rate is Count per second of Span (0 when Span is 0).
	Rate float64
	// CV is the coefficient of variation (population standard deviation
	// over mean) of the inter-arrival times of the requests sorted by
	// arrival: about 1 for Poisson arrivals, above 1 for bursty ones; 0
	// with fewer than two gaps or a zero mean gap.
	CV float64
	// Minutes is the number of whole minutes in Span; MinPerMinute and
	// MaxPerMinute are the fewest and most arrivals in one of them
	// ([m, m+1) minutes from 0; a partial last minute is not counted; both
	// 0 when Minutes is 0).
	Minutes, MinPerMinute, MaxPerMinute int
	// Prompt and Output summarise the prompt and output lengths in tokens.
	Prompt, Output Summary
}

// Summary summarises a set of token counts.
type Summary struct {
	// Mean is the arithmetic mean (0 for no values).
	Mean float64
	// Median and P99 are nearest-rank percentiles: the ⌈q·n⌉-th smallest
	// value (0 for no values).
	Median, P99 int
}

// Summarize returns the statistics of reqs (in any order) over span; a
// span of 0 or less means up to the last arrival.
func Summarize(reqs []Request, span time.Duration) Stats {
	s := Stats{Count: len(reqs), Span: span}
	at := make([]time.Duration, len(reqs))
	prompt := make([]int, len(reqs))
	output := make([]int, len(reqs))
	for i, q := range reqs {
		at[i], prompt[i], output[i] = q.Arrival, q.Prompt, q.Output
	}
	slices.Sort(at)
	if s.Span <= 0 {
		s.Span = 0
		if len(at) > 0 && at[len(at)-1] > 0 {
			s.Span = at[len(at)-1]
		}
	}
	if s.Span > 0 {
		s.Rate = float64(s.Count) / s.Span.Seconds()
	}
	if len(at) >= 3 {
		n := float64(len(at) - 1)
		mean := float64(at[len(at)-1]-at[0]) / n
		var ss float64
		for i := 1; i < len(at); i++ {
			d := float64(at[i]-at[i-1]) - mean
			ss += d * d
		}
		if mean > 0 {
			s.CV = math.Sqrt(ss/n) / mean
		}
	}
	s.Minutes = int(s.Span / time.Minute)
	if s.Minutes > 0 {
		per := make([]int, s.Minutes)
		for _, a := range at {
			if m := int(a / time.Minute); a >= 0 && m < s.Minutes {
				per[m]++
			}
		}
		s.MinPerMinute, s.MaxPerMinute = slices.Min(per), slices.Max(per)
	}
	s.Prompt, s.Output = summary(prompt), summary(output)
	return s
}

// summary returns the mean and percentiles of xs (sorted in place).
func summary(xs []int) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	slices.Sort(xs)
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	return Summary{Mean: sum / float64(len(xs)), Median: rank(xs, 0.5), P99: rank(xs, 0.99)}
}

// rank returns the nearest-rank q-percentile of sorted xs.
func rank(xs []int, q float64) int {
	k := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(k, len(xs)-1))]
}

// String renders the statistics on one line, as a run's summary shows
// them.
func (s Stats) String() string {
	return fmt.Sprintf("%d requests in %s: %.2f/s, inter-arrival CV %.2f, %d to %d a minute; prompt mean %.0f (median %d, p99 %d), output mean %.0f (median %d, p99 %d)",
		s.Count, s.Span.Round(time.Millisecond), s.Rate, s.CV, s.MinPerMinute, s.MaxPerMinute,
		s.Prompt.Mean, s.Prompt.Median, s.Prompt.P99, s.Output.Mean, s.Output.Median, s.Output.P99)
}
