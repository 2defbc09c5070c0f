package main

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// percentile returns the p-th percentile (0 ≤ p ≤ 100) of xs by the
// nearest-rank method on a sorted copy: the smallest sample such that at least
// p percent of the samples are less than or equal to it. p ≤ 0 gives the
// minimum, p ≥ 100 the maximum. It reports false when xs is empty. Cost:
// O(n log n); xs is not modified.
func percentile(xs []time.Duration, p float64) (time.Duration, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedPercentile(s, p), true
}

// sortedPercentile is percentile on an already sorted, non-empty slice.
func sortedPercentile(s []time.Duration, p float64) time.Duration {
	if p <= 0 {
		return s[0]
	}
	if p >= 100 {
		return s[len(s)-1]
	}
	// rank = ceil(p/100 · n), 1-based.
	rank := int(p / 100 * float64(len(s)))
	if float64(rank) < p/100*float64(len(s)) {
		rank++
	}
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// rateMeter counts events (tokens) in fixed-width time buckets and reports
// the rate over a sliding window. Time is an argument so tests are step
// scripts. The zero value is not usable: use newRateMeter. Not safe for
// concurrent use (teamStats guards it).
type rateMeter struct {
	width   time.Duration // bucket width
	start   time.Time     // the rate never divides by more than now-start
	counts  []int64       // ring of buckets
	indexes []int64       // absolute bucket index held by each ring slot
}

// newRateMeter returns a meter with a window of n buckets of the given width,
// starting at start.
func newRateMeter(start time.Time, width time.Duration, n int) *rateMeter {
	m := &rateMeter{width: width, start: start, counts: make([]int64, n), indexes: make([]int64, n)}
	for i := range m.indexes {
		m.indexes[i] = -1
	}
	return m
}

func (m *rateMeter) bucket(t time.Time) int64 { return int64(t.Sub(m.start) / m.width) }

// add counts n events at time t. Events before start or older than the
// window are dropped.
func (m *rateMeter) add(t time.Time, n int64) {
	b := m.bucket(t)
	if b < 0 {
		return
	}
	i := int(b % int64(len(m.counts)))
	if m.indexes[i] != b {
		if m.indexes[i] > b {
			return // older than the window
		}
		m.indexes[i], m.counts[i] = b, 0
	}
	m.counts[i] += n
}

// rate returns the events per second over the window ending at t (or since
// start, when the run is younger than the window).
func (m *rateMeter) rate(t time.Time) float64 {
	cur := m.bucket(t)
	if cur < 0 {
		return 0
	}
	first := cur - int64(len(m.counts)) + 1
	var sum int64
	for i, b := range m.indexes {
		if b >= first && b <= cur {
			sum += m.counts[i]
		}
	}
	span := time.Duration(len(m.counts)) * m.width
	if age := t.Sub(m.start); age < span {
		span = age
	}
	if span <= 0 {
		return 0
	}
	return float64(sum) / span.Seconds()
}

// sample is one TTFT observation.
type sample struct {
	at        time.Time
	ttft      time.Duration
	borrowing bool
	held      time.Duration // x-fairshare-queue-time: time held at the gateway
}

// result is the outcome of one demo request, as the client saw it.
type result struct {
	// Priority is the x-fairshare-priority response header, -1 if absent.
	Priority int
	// Over is the x-fairshare-over response header: the request took a
	// reserved slot its teammates left (the plugin's user level).
	Over bool
	// Borrowing is the x-fairshare-borrowing response header.
	Borrowing bool
	// Held is the x-fairshare-queue-time response header: how long the
	// plugin held the request at the gateway (0 when absent).
	Held time.Duration
	// WouldHold is the x-fairshare-would-hold response header of shadow
	// mode: enforce mode would have held the request at the gateway.
	WouldHold bool
	// TTFT is the time from sending the request to the first content chunk;
	// HasTTFT is false when no content arrived.
	TTFT    time.Duration
	HasTTFT bool
	// Tokens is usage.completion_tokens (or the content chunks counted when
	// the response had no usage).
	Tokens int64
	// Err is the failure, if any; Canceled when the run stopped it.
	Err      error
	Canceled bool
}

// teamStats aggregates the demo requests of one team. Safe for concurrent
// use.
type teamStats struct {
	mu        sync.Mutex
	name      string
	inFlight  int // sent, not finished
	waiting   int // sent, response headers not yet received
	borrowNow int // in flight and known to be borrowing
	done      int
	errors    int
	canceled  int
	within    int // finished requests that were within share
	borrowing int // finished requests that borrowed
	wouldHold int // requests whose headers said x-fairshare-would-hold: true (shadow mode)
	tokens    int64
	rate      *rateMeter
	samples   []sample
	prios     map[int]time.Time // priority -> last seen
	lastErr   string
}

// lastError returns the last request error seen ("" if none).
func (s *teamStats) lastError() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func newTeamStats(name string, start time.Time) *teamStats {
	return &teamStats{
		name:  name,
		rate:  newRateMeter(start, 250*time.Millisecond, 20),
		prios: map[int]time.Time{},
	}
}

// begin counts a request sent.
func (s *teamStats) begin() {
	s.mu.Lock()
	s.inFlight++
	s.waiting++
	s.mu.Unlock()
}

// headers records the standing the gateway gave a request in flight (in
// shadow mode, the standing enforce mode would have given it, and whether
// it would have held it).
func (s *teamStats) headers(now time.Time, priority int, borrowing, wouldHold bool) {
	s.mu.Lock()
	s.waiting--
	if borrowing {
		s.borrowNow++
	}
	if wouldHold {
		s.wouldHold++
	}
	if priority >= 0 {
		s.prios[priority] = now
	}
	s.mu.Unlock()
}

// token counts n streamed tokens at now (for the live tokens/s).
func (s *teamStats) token(now time.Time, n int64) {
	s.mu.Lock()
	s.rate.add(now, n)
	s.mu.Unlock()
}

// end records a finished request. gotHeaders says whether headers() was
// called for it.
func (s *teamStats) end(now time.Time, r result, gotHeaders bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	if !gotHeaders {
		s.waiting--
	} else if r.Borrowing {
		s.borrowNow--
	}
	switch {
	case r.Canceled:
		s.canceled++
		return
	case r.Err != nil:
		s.errors++
		s.lastErr = r.Err.Error()
		return
	}
	s.done++
	s.tokens += r.Tokens
	if r.Priority >= 0 || gotHeaders {
		if r.Borrowing {
			s.borrowing++
		} else {
			s.within++
		}
	}
	if r.HasTTFT {
		s.samples = append(s.samples, sample{at: now, ttft: r.TTFT, borrowing: r.Borrowing, held: r.Held})
	}
}

// teamView is what the live view and the summary show of one team. All
// durations are zero and Has* false when there is no sample.
type teamView struct {
	Name  string
	Pool  string  // the pool of the team ("" when there is one)
	Label string  // "pool/team" when the configuration has several pools, else ""
	Share float64 // entitled share of the pool, 0 if unknown
	Class string  // the demo's request class

	InFlight  int // client side: sent and not finished
	Within    int // in flight within share
	Borrowing int // in flight borrowing
	Waiting   int // in flight, standing not known yet (no response headers)

	Bands     string  // priorities seen, e.g. "0" or "1, 11-21"
	Prios     []int   // the distinct priorities seen, ascending
	TokPerSec float64 // completion tokens per second (window)

	P50, P99 time.Duration // TTFT percentiles
	HasTTFT  bool
	// PluginTTFT says P50 and P99 are the plugin's (its first_byte_ms
	// histogram, latency.go), not the client's.
	PluginTTFT bool
	// Queue and Total are the plugin's queue_time_ms (held requests only)
	// and total_time_ms (arrival to the response's end) over the run
	// (summary only; N 0 when none).
	Queue, Total latencyStats

	Done, Errors, Canceled int
	DoneWithin, DoneBorrow int
	Tokens                 int64
	// WouldHold counts the requests enforce mode would have held at the
	// gateway (shadow mode's x-fairshare-would-hold), since the start.
	WouldHold int

	// Borrowers' and within-share requests' TTFT p50 (summary), and the
	// p50 of the time they were held at the gateway (part of that TTFT).
	P50Within, P50Borrow       time.Duration
	HasP50Within, HasP50Borrow bool
	HeldWithin, HeldBorrow     time.Duration

	Status *statusTeam // the plugin's view, nil if unknown
}

// label names the team in lines and the summary: Label, else Name.
func (v teamView) label() string {
	if v.Label != "" {
		return v.Label
	}
	return v.Name
}

// view returns the team's figures at now. window > 0 restricts the
// priorities and TTFT percentiles to the last window; 0 means the whole run.
func (s *teamStats) view(now time.Time, window time.Duration, elapsed time.Duration) teamView {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := teamView{
		Name:       s.name,
		InFlight:   s.inFlight,
		Borrowing:  s.borrowNow,
		Waiting:    s.waiting,
		Within:     s.inFlight - s.borrowNow - s.waiting,
		Done:       s.done,
		Errors:     s.errors,
		Canceled:   s.canceled,
		DoneWithin: s.within,
		DoneBorrow: s.borrowing,
		Tokens:     s.tokens,
		WouldHold:  s.wouldHold,
	}
	var since time.Time
	if window > 0 {
		since = now.Add(-window)
		v.TokPerSec = s.rate.rate(now)
	} else if elapsed > 0 {
		v.TokPerSec = float64(s.tokens) / elapsed.Seconds()
	}
	var prios []int
	for p, at := range s.prios {
		if window == 0 || at.After(since) {
			prios = append(prios, p)
		}
	}
	sort.Ints(prios)
	v.Prios = prios
	v.Bands = formatBands(prios)
	var all, within, borrow, heldWithin, heldBorrow []time.Duration
	for _, x := range s.samples {
		if window > 0 && !x.at.After(since) {
			continue
		}
		all = append(all, x.ttft)
		if x.borrowing {
			borrow, heldBorrow = append(borrow, x.ttft), append(heldBorrow, x.held)
		} else {
			within, heldWithin = append(within, x.ttft), append(heldWithin, x.held)
		}
	}
	v.HeldWithin, _ = percentile(heldWithin, 50)
	v.HeldBorrow, _ = percentile(heldBorrow, 50)
	if len(all) > 0 {
		slices.Sort(all)
		v.P50, v.P99, v.HasTTFT = sortedPercentile(all, 50), sortedPercentile(all, 99), true
	}
	v.P50Within, v.HasP50Within = percentile(within, 50)
	v.P50Borrow, v.HasP50Borrow = percentile(borrow, 50)
	return v
}

// formatBands writes a set of priorities compactly: within-share values
// (below fairshare.BorrowBase = 10) one by one, borrowing values as their
// range: [0] → "0", [1 11 21 31] → "1, 11-31", [] → "-".
func formatBands(prios []int) string {
	if len(prios) == 0 {
		return "-"
	}
	prios = slices.Clone(prios)
	sort.Ints(prios)
	var parts []string
	var borrow []int
	for _, p := range prios {
		if p < borrowBase {
			parts = append(parts, strconv.Itoa(p))
		} else {
			borrow = append(borrow, p)
		}
	}
	switch len(borrow) {
	case 0:
	case 1:
		parts = append(parts, strconv.Itoa(borrow[0]))
	default:
		parts = append(parts, strconv.Itoa(borrow[0])+"-"+strconv.Itoa(borrow[len(borrow)-1]))
	}
	return strings.Join(parts, ", ")
}

// borrowBase is fairshare.BorrowBase: the lowest priority of a borrower. It is
// repeated here so the runner does not depend on the scheduling core.
const borrowBase = 10
