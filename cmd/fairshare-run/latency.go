package main

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// The live view's and the summary's TTFT columns come from the plugin: its
// first_byte_ms histogram (fairshare.pool.P.team.T.class.C.first_byte_ms,
// the request's arrival at the gateway to its first SSE event, or a JSON
// response's headers), which the local proxy's host records sample by
// sample. pluginLatency reads the new samples of every proxy's host at each
// frame and stamps them with the frame's time, so the view can keep its
// window; the summary's latency lines read the queue_time_ms (held at the
// gateway, held requests only) and total_time_ms (arrival to the end of
// the response) histograms the same way, and the pools' fairness_jain
// gauge at each frame. The client's own TTFT (sending to the first content
// chunk) is kept where the plugin has no figure: split by standing (p50
// within and p50 borrow of the summary: the histogram has no standing),
// and for a row the plugin recorded nothing for.

// The plugin's histograms the runner reads (plugin/latency.go).
const (
	firstByteMetric = "first_byte_ms"
	queueTimeMetric = "queue_time_ms"
	totalTimeMetric = "total_time_ms"
)

// The plugin's pool gauges of Jain's fairness index (plugin/latency.go):
// the index in thousandths over each tick's window, and the teams it is
// over (those that wanted more than their share).
const (
	jainMetric      = "fairness_jain"
	saturatedMetric = "saturated_teams"
)

// unknownTeam is the name the plugin gives the shared entry of teams the
// pool does not list, in its metrics, status and headers; the view's row
// of those teams has it too.
const unknownTeam = "_unknown"

// latencyKey names one histogram: pool, team segment, class and metric.
type latencyKey struct{ pool, team, class, metric string }

// stamped is one sample of the plugin's histogram, with the time the view
// first read it.
type stamped struct {
	at time.Time
	d  time.Duration
}

// jainReading is one reading of a pool's Jain gauges.
type jainReading struct {
	J         float64 // the index, in [1/n, 1]
	Saturated int     // n: the teams it is over
}

// maxHostSamples is the host's bound on a histogram's kept samples: past it
// the host drops the older half (hostcalls/host: maxHistogramSamples).
const maxHostSamples = 1 << 16

// pluginLatency collects the samples of the plugin's latency histograms
// and the readings of its Jain gauges. Safe for concurrent use.
type pluginLatency struct {
	mu      sync.Mutex
	read    map[string]int // "<proxy index>/<metric name>" -> samples already read
	samples map[latencyKey][]stamped
	// jain is every reading by pool (every proxy's, at every poll while
	// some team is saturated or was); now the last poll's, the lowest over
	// the proxies.
	jain    map[string][]jainReading
	jainNow map[string]jainReading
}

func newPluginLatency() *pluginLatency {
	return &pluginLatency{read: map[string]int{}, samples: map[latencyKey][]stamped{},
		jain: map[string][]jainReading{}, jainNow: map[string]jainReading{}}
}

// parseClassMetric splits fairshare.pool.P.team.T.class.C.<metric> for
// the histograms the runner reads.
func parseClassMetric(name string) (latencyKey, bool) {
	p := strings.Split(name, ".")
	if len(p) != 8 || p[0] != "fairshare" || p[1] != "pool" || p[3] != "team" || p[5] != "class" {
		return latencyKey{}, false
	}
	switch p[7] {
	case firstByteMetric, queueTimeMetric, totalTimeMetric:
		return latencyKey{pool: p[2], team: p[4], class: p[6], metric: p[7]}, true
	}
	return latencyKey{}, false
}

// parsePoolGauge splits fairshare.pool.P.<metric> for the Jain gauges.
func parsePoolGauge(name string) (pool, metric string, ok bool) {
	p := strings.Split(name, ".")
	if len(p) != 4 || p[0] != "fairshare" || p[1] != "pool" || p[3] != jainMetric && p[3] != saturatedMetric {
		return "", "", false
	}
	return p[2], p[3], true
}

// poll takes the samples recorded since the last poll from the metrics of
// proxy i, stamped now, and reads its Jain gauges. Call resetJain first
// when polling every proxy (pollLatency does).
func (l *pluginLatency) poll(now time.Time, i int, metrics []host.Metric) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gauges := map[string]jainReading{}
	for _, m := range metrics {
		if m.Type == hostcalls.MetricGauge {
			if pool, metric, ok := parsePoolGauge(m.Name); ok {
				r := gauges[pool]
				if metric == jainMetric {
					r.J = float64(m.Value) / 1000
				} else {
					r.Saturated = int(m.Value)
				}
				gauges[pool] = r
			}
			continue
		}
		if m.Type != hostcalls.MetricHistogram {
			continue
		}
		k, ok := parseClassMetric(m.Name)
		if !ok {
			continue
		}
		id := strconv.Itoa(i) + "/" + m.Name
		from := l.read[id]
		if from > len(m.Samples) {
			// The host dropped the older half since the last poll.
			from = max(from-maxHostSamples/2, 0)
		}
		for _, v := range m.Samples[from:] {
			l.samples[k] = append(l.samples[k], stamped{at: now, d: time.Duration(v) * time.Millisecond})
		}
		l.read[id] = len(m.Samples)
	}
	for pool, r := range gauges {
		if r.J <= 0 {
			continue // not recorded yet (the first heartbeat sets it)
		}
		if cur, ok := l.jainNow[pool]; !ok || r.J < cur.J {
			l.jainNow[pool] = r
		}
		l.jain[pool] = append(l.jain[pool], r)
	}
}

// resetJain forgets the last poll's gauges (the view's current Jain).
func (l *pluginLatency) resetJain() {
	l.mu.Lock()
	clear(l.jainNow)
	l.mu.Unlock()
}

// jainOf returns pool's last reading (the lowest over the proxies).
func (l *pluginLatency) jainOf(pool string) (jainReading, bool) {
	if l == nil {
		return jainReading{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.jainNow[pool]
	return r, ok
}

// jainSummary is what the summary says of a pool's Jain index: its
// readings while at least two teams wanted more than their share (a
// window with fewer compares nobody).
type jainSummary struct {
	P50, Min float64
	Readings int // readings with at least two saturated teams
	All      int // every reading
}

// jainOver summarises pool's readings.
func (l *pluginLatency) jainOver(pool string) jainSummary {
	if l == nil {
		return jainSummary{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var js []float64
	for _, r := range l.jain[pool] {
		if r.Saturated >= 2 {
			js = append(js, r.J)
		}
	}
	s := jainSummary{Readings: len(js), All: len(l.jain[pool])}
	if len(js) > 0 {
		slices.Sort(js)
		s.Min, s.P50 = js[0], js[(len(js)-1)/2]
	}
	return s
}

// latencyStats is a team's figures of one histogram: its samples' count
// and percentiles.
type latencyStats struct {
	N        int
	P50, P99 time.Duration
}

// stats returns the count, p50 and p99 of the samples of metric for pool,
// team (its own histogram, else the unknown teams' when known is false)
// and class ("" for every class) read after since (the zero time: all).
func (l *pluginLatency) stats(metric, pool, team string, known bool, class string, since time.Time) latencyStats {
	if !known {
		team = unknownTeam
	}
	l.mu.Lock()
	var ds []time.Duration
	for k, ss := range l.samples {
		if k.metric != metric || k.pool != pool || k.team != team || class != "" && k.class != class {
			continue
		}
		for _, s := range ss {
			if s.at.After(since) {
				ds = append(ds, s.d)
			}
		}
	}
	l.mu.Unlock()
	if len(ds) == 0 {
		return latencyStats{}
	}
	slices.Sort(ds)
	return latencyStats{N: len(ds), P50: sortedPercentile(ds, 50), P99: sortedPercentile(ds, 99)}
}

// apply puts the plugin's TTFT percentiles of v's pool, team and class in
// v (window > 0: the samples read within the last window before now), and
// marks them the plugin's; v keeps the client's when the plugin has none.
// With window 0 (the summary) it also fills the queue-time and end-to-end
// figures.
func (l *pluginLatency) apply(v *teamView, pool string, known bool, now time.Time, window time.Duration) {
	if l == nil {
		return
	}
	var since time.Time
	if window > 0 {
		since = now.Add(-window)
	}
	if st := l.stats(firstByteMetric, pool, v.Name, known, v.Class, since); st.N > 0 {
		v.P50, v.P99, v.HasTTFT, v.PluginTTFT = st.P50, st.P99, true, true
	}
	if window == 0 {
		v.Queue = l.stats(queueTimeMetric, pool, v.Name, known, v.Class, since)
		v.Total = l.stats(totalTimeMetric, pool, v.Name, known, v.Class, since)
	}
}

// pollLatency reads every proxy's new latency samples and Jain gauges.
func (r *runner) pollLatency(now time.Time) {
	if r.lat == nil {
		return
	}
	r.lat.resetJain()
	for i, p := range r.proxies {
		if p != nil && p.host != nil {
			r.lat.poll(now, i, p.host.MetricList())
		}
	}
}

// ttftCell formats a TTFT for a table cell; the client's figure (the
// plugin recorded none for the row) is marked with a '*'. A row that
// completed no request has none: a first byte the plugin timed for it was
// an error's (a 429 after max_queue_time, say), not a token's.
func ttftCell(d time.Duration, t teamView) string {
	if t.Done == 0 {
		return "-"
	}
	s := fmtDur(d, t.HasTTFT)
	if t.HasTTFT && !t.PluginTTFT {
		s += "*"
	}
	return s
}

// ttftLegend says where the TTFT columns come from.
const ttftLegend = "TTFT: the plugin's first_byte_ms, arrival at the gateway to the first SSE event (JSON: the headers); " +
	"* the client's where the plugin has none"
