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
// window. The client's own TTFT (sending to the first content chunk) is
// kept where the plugin has no figure: split by standing (p50 within and
// p50 borrow of the summary: the histogram has no standing), and for a row
// the plugin recorded nothing for.

// firstByteMetric is the suffix of the plugin's first-byte histograms.
const firstByteMetric = ".first_byte_ms"

// unknownTeam is the name the plugin gives the shared entry of teams the
// pool does not list, in its metrics, status and headers; the view's row
// of those teams has it too.
const unknownTeam = "_unknown"

// latencyKey names one histogram: pool, team segment and class.
type latencyKey struct{ pool, team, class string }

// stamped is one sample of the plugin's histogram, with the time the view
// first read it.
type stamped struct {
	at time.Time
	d  time.Duration
}

// maxHostSamples is the host's bound on a histogram's kept samples: past it
// the host drops the older half (hostcalls/host: maxHistogramSamples).
const maxHostSamples = 1 << 16

// pluginLatency collects the first-byte samples of the plugin's
// histograms. Safe for concurrent use.
type pluginLatency struct {
	mu      sync.Mutex
	read    map[string]int // "<proxy index>/<metric name>" -> samples already read
	samples map[latencyKey][]stamped
}

func newPluginLatency() *pluginLatency {
	return &pluginLatency{read: map[string]int{}, samples: map[latencyKey][]stamped{}}
}

// parseFirstByte splits fairshare.pool.P.team.T.class.C.first_byte_ms.
func parseFirstByte(name string) (latencyKey, bool) {
	rest, ok := strings.CutSuffix(name, firstByteMetric)
	if !ok {
		return latencyKey{}, false
	}
	p := strings.Split(rest, ".")
	if len(p) != 7 || p[0] != "fairshare" || p[1] != "pool" || p[3] != "team" || p[5] != "class" {
		return latencyKey{}, false
	}
	return latencyKey{pool: p[2], team: p[4], class: p[6]}, true
}

// poll takes the samples recorded since the last poll from the metrics of
// proxy i, stamped now.
func (l *pluginLatency) poll(now time.Time, i int, metrics []host.Metric) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range metrics {
		if m.Type != hostcalls.MetricHistogram {
			continue
		}
		k, ok := parseFirstByte(m.Name)
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
}

// percentiles returns the p50 and p99 of the samples of pool, team (its
// own histogram, else the unknown teams' when known is false) and class
// ("" for every class) read after since (the zero time: all).
func (l *pluginLatency) percentiles(pool, team string, known bool, class string, since time.Time) (p50, p99 time.Duration, ok bool) {
	if !known {
		team = unknownTeam
	}
	l.mu.Lock()
	var ds []time.Duration
	for k, ss := range l.samples {
		if k.pool != pool || k.team != team || class != "" && k.class != class {
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
		return 0, 0, false
	}
	slices.Sort(ds)
	return sortedPercentile(ds, 50), sortedPercentile(ds, 99), true
}

// apply puts the plugin's TTFT percentiles of v's pool, team and class in
// v (window > 0: the samples read within the last window before now), and
// marks them the plugin's; v keeps the client's when the plugin has none.
func (l *pluginLatency) apply(v *teamView, pool string, known bool, now time.Time, window time.Duration) {
	if l == nil {
		return
	}
	var since time.Time
	if window > 0 {
		since = now.Add(-window)
	}
	if p50, p99, ok := l.percentiles(pool, v.Name, known, v.Class, since); ok {
		v.P50, v.P99, v.HasTTFT, v.PluginTTFT = p50, p99, true, true
	}
}

// pollLatency reads every proxy's new first-byte samples.
func (r *runner) pollLatency(now time.Time) {
	if r.lat == nil {
		return
	}
	for i, p := range r.proxies {
		if p != nil && p.host != nil {
			r.lat.poll(now, i, p.host.MetricList())
		}
	}
}

// ttftCell formats a TTFT for a table cell; the client's figure (the
// plugin recorded none for the row) is marked with a '*'.
func ttftCell(d time.Duration, t teamView) string {
	s := fmtDur(d, t.HasTTFT)
	if t.HasTTFT && !t.PluginTTFT {
		s += "*"
	}
	return s
}

// ttftLegend says where the TTFT columns come from.
const ttftLegend = "TTFT: the plugin's first_byte_ms, arrival at the gateway to the first SSE event (JSON: the headers); " +
	"* the client's where the plugin has none"
