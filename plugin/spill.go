package plugin

import (
	"strconv"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tidwall/gjson"
)

// Spill-over between pools (spill_to).
//
//	on_request_body(eos) ── Arrive in its own pool ──► Granted: stays
//	                            │
//	                            └─► Queued (it would be held), headers still held:
//	                                  for each fallback, in order:
//	                                    updatePool(fallback): no request of the fallback's
//	                                    own waits, a borrower has room there (HasRoom: its
//	                                    teams' lending limits counted), and TryAcquire
//	                                    (unknown team) finds fewer than C in flight: decided
//	                                    and recorded in the same compare-and-swap
//	                                  moved: Cancel in its own pool; h.pool = fallback;
//	                                         x-fairshare-pool: <fallback> (the route),
//	                                         x-fairshare-spilled-from: <own> (request and
//	                                         response); spilled_total counted
//	                                  no fallback has room: held in its own pool as before
//
// A spilled request is decided by TryAcquire in the fallback as the
// unknown team (fairshare.UnknownTeam): share 0, so it always borrows and
// ranks after every configured team's borrowers there, whatever its team
// is in the fallback; the fallback's teams keep their reservations and
// their place. It moves only while the fallback has fewer than C requests
// in flight and room for a borrower beside what its teams' lending limits
// keep, so a spill never pushes a pool past C, never takes a kept
// reservation, and two saturated pools never hand requests to each other.
// It is counted there in sequences only (TryAcquire records no KV
// tokens); its token demand is checked by HasRoom. Its release, charge and settle go to
// the pool it runs in (h.pool), so every end of stream ends it there.
//
// Routing: the decision goes into the request headers, which hold_headers
// "on" keeps stopped until then; a proxy-wasm 0.2.1 header change clears
// Envoy's route cache, and the router selects the route when the headers
// reach it (RATIONALE.md, "Why spill-over routes by a request header").

// HeaderSpilledFrom names, on a request that spill-over moved, the pool it
// was for (request header to the upstream, response header to the client
// when response_headers is true).
const HeaderSpilledFrom = "x-fairshare-spilled-from"

// mSpilled is the counter of requests moved to a fallback pool:
// fairshare.pool.<from>.team.<team>.to_pool.<to>.spilled_total.
const mSpilled = "spilled_total"

// parseSpillTo reads a pool's spill_to: an array of pool names (checked
// against the pools by checkSpill).
func parseSpillTo(ps *problems, path string, v gjson.Result) []string {
	if !v.IsArray() {
		ps.add(path, "must be an array of pool names, got %s", typeName(v))
		return nil
	}
	var out []string
	j := 0
	v.ForEach(func(_, n gjson.Result) bool {
		np := path + "[" + strconv.Itoa(j) + "]"
		j++
		s, ok := str(ps, np, n)
		if !ok {
			return true
		}
		for _, prev := range out {
			if prev == s {
				ps.add(np, "duplicate fallback %q", s)
				return true
			}
		}
		out = append(out, s)
		return true
	})
	return out
}

// checkSpill validates spill_to across the pools: every fallback is
// another configured pool, and spill-over needs hold_headers "on" (the
// route is chosen from request headers that must still be held at the
// decision). Naming a fallback declares that its engines serve this
// pool's models under the same names (vLLM's --served-model-name takes
// several): the request goes there as it is, its model unchanged, and
// models stay unique across pools (a request's pool is the one listing
// its model).
func checkSpill(ps *problems, c *config) {
	index := map[string]bool{}
	for i := range c.pools {
		if c.pools[i].name != "" {
			index[c.pools[i].name] = true
		}
	}
	for i := range c.pools {
		p := &c.pools[i]
		if len(p.spillTo) == 0 {
			continue
		}
		pp := "pools[" + strconv.Itoa(i) + "]"
		if !c.holdHeaders {
			ps.add(pp+".spill_to", "needs hold_headers \"on\" (and so flow control): the route to a fallback is chosen from request headers that must still be held when the request is decided")
		}
		for j, name := range p.spillTo {
			fp := pp + ".spill_to[" + strconv.Itoa(j) + "]"
			switch {
			case !index[name]:
				ps.add(fp, "no pool named %q", name)
			case name == p.name:
				ps.add(fp, "a pool cannot spill to itself")
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// poolNamed returns the pool state of the pool called name, or nil.
func (pc *pluginContext) poolNamed(name string) *poolState {
	for _, ps := range pc.pools {
		if ps.cfg.name == name {
			return ps
		}
	}
	return nil
}

// spill offers request h, queued in its own pool own as w, to own's
// fallbacks in order (see the picture above). On a move it cancels w in
// own, sets h's pool to the fallback and returns the fallback's grant and
// true; otherwise h stays queued in own. It is tried only while h's
// headers are held: once they have gone, the route is fixed.
func (h *httpContext) spill(now time.Time, own *poolState, w fairshare.Waiting, estimate float64, kv int64) (fairshare.Grant, bool) {
	pc := h.pc
	if !h.headersHeld || len(own.cfg.spillTo) == 0 {
		return fairshare.Grant{}, false
	}
	for _, name := range own.cfg.spillTo {
		fb := pc.poolNamed(name)
		if fb == nil {
			continue
		}
		var (
			g     fairshare.Grant
			moved bool
		)
		err := pc.updatePool(now, fb, "spill", func(p *fairshare.Pool) {
			moved = false
			// The fallback's held requests go first, and what its teams'
			// lending limits keep free is theirs (HasRoom); then
			// TryAcquire moves it only below C, in this same swap.
			if p.Waiters() > 0 || !p.HasRoom(fairshare.UnknownTeam, kv) {
				return
			}
			g, moved = p.TryAcquire(now, pc.holder, fairshare.UnknownTeam, h.class, estimate)
		})
		if err != nil || !moved {
			continue
		}
		// Out of its own pool's queue. On a failure the waiter stays there
		// until it is dispatched to this VM, which then ends it (dispatch:
		// the stream is not held), or until its deadline.
		_ = pc.updatePool(now, own, "cancel", func(p *fairshare.Pool) { p.Cancel(now, pc.holder, w.ID) })
		h.pool = fb
		h.slot = fb.slot(g.Team) // latency and completion means where it runs
		h.spilledFrom = own
		pc.met.spilled(own.cfg.name, teamOf(own, h.team), fb.cfg.name)
		pc.countSpill(own.cfg.name, fb.cfg.name)
		return g, true
	}
	return fairshare.Grant{}, false
}

// spilled counts one request of team moved from pool from to pool to.
func (m *metrics) spilled(from, team, to string) {
	m.buf = appendTeamMetric(m.buf[:0], from, team, "to_pool.")
	m.buf = append(m.buf, to...)
	m.buf = append(m.buf, '.')
	m.buf = append(m.buf, mSpilled...)
	m.count(1)
}

// spillHeader adds x-fairshare-spilled-from to the held request headers of
// a request that spill-over moved (decisionHeaders calls it).
func (h *httpContext) spillHeader() {
	if h.spilledFrom != nil {
		_ = hostcalls.AddHttpRequestHeader(HeaderSpilledFrom, h.spilledFrom.cfg.name)
	}
}

// spillKey is the shared-data key counting the requests spill-over moved
// from pool from to pool to, on every VM of this proxy (a decimal number;
// the status endpoint reads it).
func spillKey(plugin, from, to string) string {
	return plugin + "/fairshare/spilled/" + from + "/" + to
}

// spillCountRetries bounds the compare-and-swap attempts of one count; a
// count that loses them all is missing from the status endpoint only (the
// spilled_total metric has it).
const spillCountRetries = 8

// countSpill adds one to the shared count of moves from from to to.
func (pc *pluginContext) countSpill(from, to string) {
	key := spillKey(pc.name, from, to)
	for i := 0; i < spillCountRetries; i++ {
		v, cas, err := pc.rs.st.GetSharedData(key)
		if err != nil || len(v) == 0 {
			if ok, err := pc.rs.createIfAbsent(key, []byte("1")); ok || err != nil {
				return
			}
			continue
		}
		n, _ := strconv.ParseInt(string(v), 10, 64)
		if pc.rs.st.SetSharedData(key, strconv.AppendInt(nil, n+1, 10), cas) == nil {
			return
		}
	}
}

// spillCount reads the shared count of moves from from to to (0 when
// none).
func (pc *pluginContext) spillCount(from, to string) int64 {
	v, _, err := pc.rs.st.GetSharedData(spillKey(pc.name, from, to))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n
}

// spillStatus is a pool's spill-over in the status snapshot: its
// fallbacks, the requests moved to each of them, and those moved to it
// from other pools (counted on every VM of this proxy).
type spillStatus struct {
	to    []string
	moved []int64 // by fallback, as to
	in    int64
}

// spillStatusOf returns ps's spill-over for the status snapshot, nil when
// no pool spills to or from it.
func (pc *pluginContext) spillStatusOf(ps *poolState) *spillStatus {
	st := &spillStatus{to: ps.cfg.spillTo}
	for _, to := range ps.cfg.spillTo {
		st.moved = append(st.moved, pc.spillCount(ps.cfg.name, to))
	}
	fallback := false
	for _, o := range pc.pools {
		if contains(o.cfg.spillTo, ps.cfg.name) {
			fallback = true
			st.in += pc.spillCount(o.cfg.name, ps.cfg.name)
		}
	}
	if len(st.to) == 0 && !fallback {
		return nil
	}
	return st
}

// appendSpillStatus appends a pool's "spill_to": [names], "spilled_to":
// {name: n} and "spilled_in": n (nothing when st is nil).
func appendSpillStatus(b []byte, st *spillStatus) []byte {
	if st == nil {
		return b
	}
	b = append(b, `,"spill_to":[`...)
	for i, n := range st.to {
		if i > 0 {
			b = append(b, ',')
		}
		b = gjson.AppendJSONString(b, n)
	}
	b = append(b, `],"spilled_to":{`...)
	for i, n := range st.to {
		if i > 0 {
			b = append(b, ',')
		}
		b = gjson.AppendJSONString(b, n)
		b = append(b, ':')
		b = strconv.AppendInt(b, st.moved[i], 10)
	}
	b = append(b, `},"spilled_in":`...)
	return strconv.AppendInt(b, st.in, 10)
}
