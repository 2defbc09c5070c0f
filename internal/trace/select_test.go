package trace

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// synthetic returns a jsonl trace of n rows, row i (line i+1) arriving at
// i/10 s with prompt i and two blocks {i%3, i}.
func synthetic(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"arrival_s": %g, "team": "t", "class": "batch", "prompt_tokens": %d, "output_tokens": 1, "blocks": [%d, %d]}`+"\n", float64(i)/10, 1024+i, i%3, i)
	}
	return b.String()
}

// lines returns the source lines of reqs in order.
func lines(reqs []Request) []int {
	out := make([]int, len(reqs))
	for i, q := range reqs {
		out[i] = q.Line
	}
	return out
}

func TestWindow(t *testing.T) {
	input := synthetic(20) // lines 1..20 at 0, 0.1, …, 1.9 s
	cases := []struct {
		name     string
		spec     Spec
		lines    []int
		arrivals []time.Duration
		window   int
		span     time.Duration
		empty    bool // read an empty trace instead
	}{
		{name: "all", spec: Spec{}, lines: seq(1, 20), window: 20, span: ms(1900)},
		{name: "window", spec: Spec{Start: 0.5, Duration: 0.3}, lines: []int{6, 7, 8}, arrivals: []time.Duration{0, ms(100), ms(200)}, window: 3, span: ms(300)},
		{name: "window to the end", spec: Spec{Start: 1.55}, lines: []int{17, 18, 19, 20}, arrivals: []time.Duration{ms(50), ms(150), ms(250), ms(350)}, window: 4, span: ms(350)},
		{name: "window past the end", spec: Spec{Start: 5, Duration: 10}, lines: nil, window: 0, span: 10 * time.Second},
		{name: "open window past the end", spec: Spec{Start: 5}, lines: nil, window: 0, span: 0},
		{name: "time scale", spec: Spec{Start: 0.5, Duration: 0.3, TimeScale: 2.5}, lines: []int{6, 7, 8}, arrivals: []time.Duration{0, ms(250), ms(500)}, window: 3, span: ms(750)},
		{name: "every 3", spec: Spec{Every: 3}, lines: []int{1, 4, 7, 10, 13, 16, 19}, window: 20, span: ms(1900)},
		{name: "every 3 offset 2", spec: Spec{Every: 3, Offset: 2}, lines: []int{3, 6, 9, 12, 15, 18}, window: 20, span: ms(1900)},
		{name: "empty trace", spec: Spec{Start: 1, Duration: 2, TimeScale: 3}, empty: true, span: 6 * time.Second},
		{name: "every counts in the window", spec: Spec{Start: 0.5, Duration: 0.5, Every: 2, Offset: 1}, lines: []int{7, 9}, arrivals: []time.Duration{ms(100), ms(300)}, window: 5, span: ms(500)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := input
			if c.empty {
				in = ""
			}
			tr := read(t, JSONL, in, c.spec)
			if got := lines(tr.Requests); !reflect.DeepEqual(got, c.lines) && len(got)+len(c.lines) > 0 {
				t.Errorf("lines %v, want %v", got, c.lines)
			}
			if c.arrivals != nil {
				var got []time.Duration
				for _, q := range tr.Requests {
					got = append(got, q.Arrival)
				}
				if !reflect.DeepEqual(got, c.arrivals) {
					t.Errorf("arrivals %v, want %v", got, c.arrivals)
				}
			}
			if tr.Window != c.window || tr.Span != c.span {
				t.Errorf("window %d span %v, want %d and %v", tr.Window, tr.Span, c.window, c.span)
			}
		})
	}
}

// seq returns lo..hi.
func seq(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

func TestEveryOffsetPartition(t *testing.T) {
	input := synthetic(1000)
	for _, every := range []int{1, 2, 3, 7} {
		for _, rate := range []float64{1, 0.5, 2.5} {
			t.Run(fmt.Sprintf("every %d rate %v", every, rate), func(t *testing.T) {
				seen := map[[2]int]int{}
				total := 0
				for off := 0; off < every; off++ {
					tr := read(t, JSONL, input, Spec{Start: 3, Duration: 50, Every: every, Offset: off, RateScale: rate})
					for _, q := range tr.Requests {
						k := [2]int{q.Line, q.Copy}
						if o, dup := seen[k]; dup {
							t.Fatalf("line %d copy %d taken by offsets %d and %d", q.Line, q.Copy, o, off)
						}
						seen[k] = off
						if (q.Line-31)%every != off {
							t.Fatalf("offset %d took line %d", off, q.Line)
						}
					}
					total += len(tr.Requests)
				}
				all := read(t, JSONL, input, Spec{Start: 3, Duration: 50, RateScale: rate})
				if total != len(all.Requests) {
					t.Errorf("offsets took %d requests together, the whole window %d", total, len(all.Requests))
				}
			})
		}
	}
}

// within reports whether got is within the package doc's tolerance of
// n·rate: 4·√(n·f·(1−f)) + 1 with f the fractional part of rate.
func within(got, n int, rate float64) (bool, float64) {
	f := rate - math.Floor(rate)
	tol := 4*math.Sqrt(float64(n)*f*(1-f)) + 1
	return math.Abs(float64(got)-float64(n)*rate) <= tol, tol
}

func TestRateScale(t *testing.T) {
	const n = 2000
	input := synthetic(n)
	base := read(t, JSONL, input, Spec{})
	for _, rate := range []float64{0.01, 0.1, 0.5, 0.9, 1, 1.5, 2, 3.7, 10} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			tr := read(t, JSONL, input, Spec{RateScale: rate})
			if ok, tol := within(len(tr.Requests), n, rate); !ok {
				t.Errorf("%d requests, want %v ± %.1f", len(tr.Requests), n*rate, tol)
			}
			again := read(t, JSONL, input, Spec{RateScale: rate})
			if !reflect.DeepEqual(tr, again) {
				t.Errorf("two reads differ")
			}
			orig := map[int]Request{}
			for _, q := range base.Requests {
				orig[q.Line] = q
			}
			per := map[int]int{}
			for i, q := range tr.Requests {
				o := orig[q.Line]
				per[q.Line]++
				if i > 0 && tr.Requests[i-1].Arrival > q.Arrival {
					t.Fatalf("request %d arrives before its predecessor", i)
				}
				if q.Prompt != o.Prompt || q.Output != o.Output || q.Team != o.Team || q.Class != o.Class {
					t.Fatalf("line %d copy %d: %+v is not a copy of %+v", q.Line, q.Copy, q, o)
				}
				next := o.Arrival + 100*time.Millisecond
				if q.Line == n {
					next = o.Arrival
				}
				if q.Arrival < o.Arrival || q.Arrival > next || (q.Copy > 0 && q.Line < n && q.Arrival == next) {
					t.Fatalf("line %d copy %d arrives at %v, outside [%v, %v)", q.Line, q.Copy, q.Arrival, o.Arrival, next)
				}
				if q.Copy == 0 && !reflect.DeepEqual(q.Blocks, o.Blocks) {
					t.Fatalf("line %d: blocks %v, want the original %v", q.Line, q.Blocks, o.Blocks)
				}
				if q.Copy > 0 && (len(q.Blocks) != len(o.Blocks) || q.Blocks[0] == o.Blocks[0] || q.Blocks[1] == o.Blocks[1]) {
					t.Fatalf("line %d copy %d: blocks %v not remapped from %v", q.Line, q.Copy, q.Blocks, o.Blocks)
				}
			}
			for line, k := range per {
				if lo := int(math.Floor(rate)); k != lo && k != lo+1 {
					t.Fatalf("line %d made %d requests, want %d or %d", line, k, lo, lo+1)
				}
			}
		})
	}
}

func TestRateScaleBlocksShareWithinCopy(t *testing.T) {
	// Lines 1 and 4 share block 0 (i%3 == 0); their k-th copies must share
	// its remapped id, and copies 1 and 2 must not share with each other.
	tr := read(t, JSONL, synthetic(6), Spec{RateScale: 3})
	first := map[[2]int]uint64{}
	for _, q := range tr.Requests {
		first[[2]int{q.Line, q.Copy}] = q.Blocks[0]
	}
	for k := 0; k < 3; k++ {
		if first[[2]int{1, k}] != first[[2]int{4, k}] {
			t.Errorf("copy %d: lines 1 and 4 do not share their first block", k)
		}
	}
	if first[[2]int{1, 1}] == first[[2]int{1, 2}] {
		t.Errorf("copies 1 and 2 share a block")
	}
}

func TestRateScaleKeepsDecisionAcrossWindows(t *testing.T) {
	input := synthetic(400)
	whole := read(t, JSONL, input, Spec{RateScale: 0.5})
	part := read(t, JSONL, input, Spec{Start: 10, Duration: 10, RateScale: 0.5})
	kept := map[int]bool{}
	for _, q := range whole.Requests {
		kept[q.Line] = true
	}
	for line := 101; line <= 200; line++ {
		if got := contains(part.Requests, line); got != kept[line] {
			t.Errorf("line %d kept %v in the window, %v in the whole trace", line, got, kept[line])
		}
	}
}

// contains reports whether a request of reqs comes from line.
func contains(reqs []Request, line int) bool {
	for _, q := range reqs {
		if q.Line == line {
			return true
		}
	}
	return false
}
