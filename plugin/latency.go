package plugin

import (
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// Latency and service per pool, team and class, measured with the host
// clock (time.Now reads it). A scheduled request's times:
//
//	arrived     on_request_headers
//	dispatched  the body forwarded upstream: at decide when granted at once
//	            (or forwarded without a grant), at dispatch when it was held
//	first byte  a JSON (or any non-stream) response: its response headers, the
//	            first byte the client gets; an event stream: the chunk that
//	            completes the field name of its first "data:" line, the first
//	            event (vLLM sends an event stream's headers before any token,
//	            so the headers measure nothing of the model)
//	end         the response complete (finish with complete: body or
//	            trailers at end of stream); a reset or aborted response
//	            records no end
//
// and the histograms, in milliseconds, under
// fairshare.pool.<pool>.team.<team>.class.<class>.<metric>:
//
//	queue_time_ms           held at the gateway (dispatched − arrival at decide),
//	                        held requests only
//	first_byte_ms           arrived → first byte (TTFT for a stream)
//	upstream_first_byte_ms  dispatched → first byte (what vLLM took)
//	total_time_ms           arrived → end
//
// with the counters prompt_tokens_total, cached_tokens_total and
// completion_tokens_total of the usage responses report (a response without
// usage counts nothing). Their ids are kept in the team's slot, by class, so
// that a warm request builds no name.
const (
	mFirstByte         = "first_byte_ms"           // histogram, pool/team/class
	mUpstreamFirstByte = "upstream_first_byte_ms"  // histogram, pool/team/class
	mTotalTime         = "total_time_ms"           // histogram, pool/team/class
	mPromptTokens      = "prompt_tokens_total"     // counter, pool/team/class
	mCachedTokens      = "cached_tokens_total"     // counter, pool/team/class
	mCompletionTokens  = "completion_tokens_total" // counter, pool/team/class
	mShare             = "share"                   // gauge, pool/team: normalised share, milli
	mJain              = "fairness_jain"           // gauge, pool: Jain's index over saturated teams, milli
	mSaturated         = "saturated_teams"         // gauge, pool: the teams the index is over
)

// classMetrics are the ids of one team and class's latency histograms and
// token counters.
type classMetrics struct {
	queue, firstByte, upstreamFirstByte, total metricID
	prompt, cached, completion                 metricID
	wouldBorrow, wouldHold                     metricID // shadow mode (shadow.go)
}

// appendClassMetric appends fairshare.pool.<pool>.team.<team>.class.<class>.<metric>.
func appendClassMetric(b []byte, pool, team string, class fairshare.Class, metric string) []byte {
	b = append(b, metricPrefix+"pool."...)
	b = append(b, pool...)
	b = append(b, ".team."...)
	b = append(b, teamSegment(team)...)
	b = append(b, ".class."...)
	b = append(b, className(class)...)
	b = append(b, '.')
	return append(b, metric...)
}

// classID returns the id kept in c, defining the metric of pool, team and
// class on first use.
func (m *metrics) classID(c *metricID, kind metricKind, pool, team string, class fairshare.Class, metric string) (uint32, bool) {
	if !c.ok {
		m.buf = appendClassMetric(m.buf[:0], pool, team, class, metric)
		c.id, c.ok = m.id(kind)
	}
	return c.id, c.ok
}

// classSlot returns the ids of s's class, or nil when s is not the slot
// of team (then the metric is looked up by name, see classRecord).
func classSlot(s *teamSlot, team string, class fairshare.Class) *classMetrics {
	if s == nil || s.name != team || uint(class) >= uint(len(s.class)) {
		return nil
	}
	return &s.class[class]
}

// classRecord records v in the histogram (or adds v to the counter) metric
// of pool, team and class, its id kept in the field of s's class that
// field picks.
func (m *metrics) classRecord(s *teamSlot, pool, team string, class fairshare.Class, kind metricKind, metric string, field func(*classMetrics) *metricID, v int64) {
	if kind == counterKind && v <= 0 {
		return
	}
	var id uint32
	var ok bool
	if c := classSlot(s, team, class); c != nil {
		id, ok = m.classID(field(c), kind, pool, team, class, metric)
	} else {
		m.buf = appendClassMetric(m.buf[:0], pool, team, class, metric)
		id, ok = m.id(kind)
	}
	if !ok {
		return
	}
	if kind == counterKind {
		_ = m.host.incrementMetric(id, v)
	} else {
		_ = m.host.recordMetric(id, v)
	}
}

// The fields of classMetrics, as classRecord takes them (functions, not
// closures: no allocation).
func fQueue(c *classMetrics) *metricID             { return &c.queue }
func fFirstByte(c *classMetrics) *metricID         { return &c.firstByte }
func fUpstreamFirstByte(c *classMetrics) *metricID { return &c.upstreamFirstByte }
func fTotal(c *classMetrics) *metricID             { return &c.total }
func fPrompt(c *classMetrics) *metricID            { return &c.prompt }
func fCached(c *classMetrics) *metricID            { return &c.cached }
func fCompletion(c *classMetrics) *metricID        { return &c.completion }
func fWouldBorrow(c *classMetrics) *metricID       { return &c.wouldBorrow }
func fWouldHold(c *classMetrics) *metricID         { return &c.wouldHold }

// millis is d in whole milliseconds, 0 when negative (a clock that went
// back).
func millis(d int64) int64 { return max(d, 0) / int64(time.Millisecond) }

// queueTime records a held request's time at the gateway (milliseconds)
// in its team and class's histogram, and counts it dispatched.
func (m *metrics) queueTime(pool string, s *teamSlot, g *fairshare.Grant) {
	m.teamCounter(pool, g.Team, mDispatched, 1)
	m.classRecord(s, pool, g.Team, g.Class, histogramKind, mQueueTime, fQueue, millis(g.At-g.Arrived))
}

// latencySlot is the slot a stream's latency is recorded in.
func (h *httpContext) latencySlot() *teamSlot {
	if h.slot != nil {
		return h.slot
	}
	return h.pool.slot(h.team)
}

// markArrived notes the stream's arrival (on_request_headers).
func (h *httpContext) markArrived(now time.Time) { h.arrived = now.UnixNano() }

// markDispatched notes when the request body went upstream.
func (h *httpContext) markDispatched(now time.Time) { h.dispatched = now.UnixNano() }

// firstByte records the first-byte histograms once per response.
func (h *httpContext) firstByte(now time.Time) {
	if h.firstSeen || h.pool == nil {
		return
	}
	h.firstSeen = true
	t := now.UnixNano()
	m, pool, s := h.pc.met, h.pool.cfg.name, h.latencySlot()
	team := s.name // the entry h.team is counted in: its own, or the unknown team's
	if h.arrived != 0 {
		m.classRecord(s, pool, team, h.class, histogramKind, mFirstByte, fFirstByte, millis(t-h.arrived))
	}
	if h.dispatched != 0 {
		m.classRecord(s, pool, team, h.class, histogramKind, mUpstreamFirstByte, fUpstreamFirstByte, millis(t-h.dispatched))
	}
}

// responseStarted is on_response_headers' hook: a response that is not an
// event stream has its first byte now.
func (h *httpContext) responseStarted() {
	if !h.sse {
		h.firstByte(time.Now())
	}
}

// eventChunk is on_response_body's hook for an event stream: the chunk
// that completes the "data:" at the start of the stream's first data line
// is its first byte (comments, other fields and blank lines are not).
// The line's start is found across chunks (ev tracks how much of "data:"
// the current line has matched; evMid that the line started otherwise).
func (h *httpContext) eventChunk(chunk []byte) {
	if h.firstSeen {
		return
	}
	for _, c := range chunk {
		switch {
		case c == '\n':
			h.ev, h.evMid = 0, false
		case h.evMid:
		case c == dataPrefix[h.ev]:
			h.ev++
			if int(h.ev) == len(dataPrefix) {
				h.firstByte(time.Now())
				return
			}
		default:
			h.ev, h.evMid = 0, true
		}
	}
}

// responseEnded is finish's hook: a complete response records its
// end-to-end time and the tokens its usage reports.
func (h *httpContext) responseEnded(now time.Time, complete bool, u *usage) {
	if !complete || h.pool == nil {
		return
	}
	m, pool, s := h.pc.met, h.pool.cfg.name, h.latencySlot()
	team := s.name
	if h.arrived != 0 {
		m.classRecord(s, pool, team, h.class, histogramKind, mTotalTime, fTotal, millis(now.UnixNano()-h.arrived))
	}
	if u.ok {
		m.classRecord(s, pool, team, h.class, counterKind, mPromptTokens, fPrompt, u.prompt)
		m.classRecord(s, pool, team, h.class, counterKind, mCachedTokens, fCached, min(u.cached, u.prompt))
		m.classRecord(s, pool, team, h.class, counterKind, mCompletionTokens, fCompletion, u.completion)
	}
}

// Jain's fairness index of a pool, recorded at every heartbeat of the
// VM (each tick period) from the pool's shared record, as the heartbeat
// reads it:
//
//	saturated  a team with a share that has requests held at the gateway
//	           or borrowing: it wants more than its share, so what it has
//	           is what the scheduler gave it, not what it asked for
//	x_i        usage_i / normalised share_i, usage_i the team's decayed
//	           usage (TeamStat.Usage: the scheduler's own measure of what
//	           the team got over the half-life, entry penalties included)
//	J          (Σ x_i)² / (n · Σ x_i²) over the n saturated teams, in [1/n, 1]
//
// 1 means the saturated teams were served in proportion to their shares;
// 1/n that one of them got everything. With no saturated team, or none
// with usage, J is 1 (nobody was short-changed). The gauge is J in
// thousandths (fairshare.pool.<pool>.fairness_jain), with n beside it
// (fairshare.pool.<pool>.saturated_teams).
//
// Every VM of the proxy reads the same record, and decay multiplies every
// team's usage by the same factor, which J does not see (it is the same
// for x and c·x): every VM computes the same J from the same record,
// whenever its heartbeat comes, so the gauge (one value, the last writer's)
// does not depend on which VM wrote it. Cost: O(teams), no allocation.
func jain(stats []fairshare.TeamStat) (j float64, n int) {
	var sum, sq float64
	for i := range stats {
		s := &stats[i]
		if s.NormalizedShare <= 0 || !saturated(s) {
			continue
		}
		x := max(s.Usage, 0) / s.NormalizedShare
		sum += x
		sq += x * x
		n++
	}
	if sq > 0 {
		return sum * sum / (float64(n) * sq), n
	}
	return 1, n
}

// saturated reports whether a team wants more than its share at the
// snapshot: requests held at the gateway, or requests borrowing.
func saturated(s *fairshare.TeamStat) bool { return s.Waiting > 0 || s.Borrowing > 0 }

// fairness records the pool's Jain index and saturated teams, and every
// team's normalised share (milli), from the heartbeat's snapshot.
func (pc *pluginContext) fairness(ps *poolState, stats []fairshare.TeamStat) {
	j, n := jain(stats)
	m := pc.met
	m.buf = appendPoolMetric(m.buf[:0], ps.cfg.name, mJain)
	m.set(milli(j))
	m.buf = appendPoolMetric(m.buf[:0], ps.cfg.name, mSaturated)
	m.set(int64(n))
	for i := range stats {
		m.teamGauge(ps.cfg.name, stats[i].Team, mShare, milli(stats[i].NormalizedShare))
	}
}
