package plugin

import (
	"slices"
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
//	                                  in its turn (spillHeads): while the head of its own
//	                                  pool's queue is a request held before it (Blocked),
//	                                    this VM's: offered to the fallbacks first, and
//	                                      resumed there if one takes it (as respill below,
//	                                      from this callback); none takes it: stop
//	                                    another VM's: that VM is woken (its respill
//	                                      offers its head); stop
//	                                  its own turn (it is the head, Blocked):
//	                                  for each fallback, in order:
//	                                    updatePool(fallback), Pool.TakeSpill: no request of
//	                                    the fallback's own waits, a borrower has room there
//	                                    (HasRoom: its teams' lending limits counted), and
//	                                    fewer than C in flight (TryAcquire's test), granted as
//	                                    the unknown team: decided and recorded in the same
//	                                    compare-and-swap
//	                                  moved: Cancel in its own pool; h.pool = fallback;
//	                                         x-fairshare-pool: <fallback> (the route),
//	                                         x-fairshare-spilled-from: <own> (request and
//	                                         response); spilled_total counted
//	                                  not its turn, or no fallback has room: held in its
//	                                  own pool as before
//
// A request arriving at a full pool thus never spills ahead of the
// requests already held there: the fallback's room goes to them first, in
// the pool's standing order, and the arrival gets what is left. Resuming a
// held stream from the arrival's on_request_body is what a release in
// another stream's on_done already does (dispatch): the held stream is
// made effective (proxy_set_effective_context, which takes any context of
// the calling VM: proxy-wasm/proxy-wasm-cpp-host src/exports.cc at
// 03da0e1), continue_stream acts on that effective context's own stream,
// and Envoy runs the continue once the callback returns
// (addAfterVmCallAction, docs/compatibility.md 3 (a)); the arrival's own
// stream is never continued from its own callback (3 (e)): it goes, if it
// moves, by the callback's return value. The arrival is not registered as
// held while this runs, so the home pool is not dispatched there (dispatch
// would grant it and, not knowing it, end it): what a move lets go at
// home goes on the next dispatch tick.
//
// A held request moves later. A fallback busy at a request's arrival may
// free room while the request is still held at home (a flood that begins
// while the fallback is busy). On the holding VM's dispatch tick (and
// queue wake-up), after dispatch has sent on what the home pool can take,
// the head of the home pool's queue is offered by the same rules
// (respill):
//
//	tick ── dispatch(home) ── head of home's queue: this VM's, Blocked,
//	        headers still held, before its deadline?
//	          └─ takeSpill: the first fallback whose record takes it
//	             (TakeSpill, one compare-and-swap of the fallback's record)
//	               moved: out of pc.held; Cancel in home (a second swap);
//	                      headers and counts as at arrival; resume in the
//	                      fallback (its priority written into the held body,
//	                      x-fairshare-pool: <fallback>); dispatch(home) again,
//	                      then the new head (another VM's: woken)
//	               none:  it stays held; nothing behind it is offered
//
// Only the head moves, repeatedly while a fallback takes it: the standing
// order of the home queue is kept (a request never overtakes one with a
// better standing by moving), and another VM's head is left to that VM
// (only its holder can resume it), woken through its queue after a move
// or at an arrival that waits behind it. The fallback's swap comes first:
// between the two swaps the request is in flight in the fallback and
// still waiting at home, where a waiter counts for nothing in flight, so
// nothing is counted twice; if the home swap fails, the waiter stays there
// until it is dispatched to this VM, which finds its stream no longer held
// and ends that grant at once (dispatch), or until respill meets it at the
// head and cancels it, or until its deadline. A stream gone before the
// move is cancelled at home, and one gone during resume has its fallback
// grant ended (undo): nothing leaks.
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
	var out []string
	strs(ps, path, v, "pool names", func(np, s string) {
		if slices.Contains(out, s) {
			ps.add(np, "duplicate fallback %q", s)
			return
		}
		out = append(out, s)
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
// fallbacks in order, in its turn (see the picture above): the requests
// held in own that stand before it are offered first, in standing order
// (spillHeads, which resumes those that move), and h only once it is the
// head and none before it was refused. On a move it cancels w in own,
// sets h's pool to the fallback and returns the fallback's grant and
// true; otherwise h stays queued in own. It is tried only while h's
// headers are held: once they have gone, the route is fixed.
func (h *httpContext) spill(now time.Time, own *poolState, w fairshare.Waiting, estimate float64, kv int64) (fairshare.Grant, bool) {
	if !h.headersHeld || len(own.cfg.spillTo) == 0 {
		return fairshare.Grant{}, false
	}
	if !h.pc.spillHeads(now, own, w.ID, h.ctxID) {
		return fairshare.Grant{}, false
	}
	w.Tokens, w.Estimate = kv, estimate
	fb, g, ok := h.pc.takeSpill(now, own, w)
	if !ok {
		return fairshare.Grant{}, false
	}
	// Out of its own pool's queue. On a failure the waiter stays there
	// until it is dispatched to this VM, which then ends it (dispatch:
	// the stream is not held), or until its deadline.
	h.pc.cancelWait(now, own, w.ID)
	h.moved(own, fb, g)
	return g, true
}

// takeSpill offers the request w, waiting (or about to wait) in pool own,
// to own's fallbacks in order: the first whose record takes it
// (fairshare.Pool.TakeSpill: none of the fallback's own requests waits, a
// borrower has room there, fewer than C in flight, decided and recorded in
// one compare-and-swap of the fallback's record) is returned with the
// grant. Removing w from own's queue is the caller's, afterwards.
func (pc *pluginContext) takeSpill(now time.Time, own *poolState, w fairshare.Waiting) (*poolState, fairshare.Grant, bool) {
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
			g, moved = p.TakeSpill(now, pc.holder, w)
		})
		if err == nil && moved {
			return fb, g, true
		}
	}
	return nil, fairshare.Grant{}, false
}

// cancelWait takes request id of this VM out of pool ps's queue. On a
// failure the waiter stays there until it is dispatched to this VM, which
// then ends it (dispatch: the stream is no longer held), or until its
// deadline.
func (pc *pluginContext) cancelWait(now time.Time, ps *poolState, id uint64) {
	_ = pc.updatePool(now, ps, "cancel", func(p *fairshare.Pool) { p.Cancel(now, pc.holder, id) })
}

// moved records that spill-over moved h from pool own to pool fb with
// grant g: h runs, is released and is charged in fb, its headers name
// own in x-fairshare-spilled-from, and the move is counted (metric and
// status).
func (h *httpContext) moved(own, fb *poolState, g fairshare.Grant) {
	pc := h.pc
	h.pool = fb
	h.slot = fb.slot(g.Team) // latency and completion means where it runs
	h.spilledFrom = own
	pc.met.spilled(own.cfg.name, teamOf(own, h.team), fb.cfg.name)
	pc.countSpill(own.cfg.name, fb.cfg.name)
}

// respill offers this VM's held requests of pool ps to ps's fallbacks
// after dispatch has sent on what ps itself can take (see "A held request
// moves later" above): the head of ps's queue, while it is this VM's, may
// not go in ps (Blocked) and a fallback takes it; then dispatch runs again
// (the head gone, the next may fit) and the new head is offered in turn.
func (pc *pluginContext) respill(now time.Time, ps *poolState) {
	pc.spillHeads(now, ps, 0, 0)
}

// spillHeads moves the heads of pool ps's queue to ps's fallbacks, in
// standing order, while a fallback takes them (the loop of respill and of
// spillInTurn, see the pictures above). It stops at the first head that
// cannot move: one that may go in ps itself (dispatch's), one whose route
// is fixed or whose deadline has passed, one no fallback takes, or
// another VM's, which it wakes when it has just moved a request or when
// arrival is set (that VM's respill then offers its head: only its holder
// can resume it).
//
// arrival, when not 0, is the id of the request whose on_request_body is
// running, in the stream of context restore:
// Arrive has just queued it in ps, it is not in pc.held (hold registers it
// only if it stays), and its stream, the running callback's, must not be
// resumed from that callback (a continue_stream there is dropped by Envoy,
// docs/compatibility.md (e)). spillHeads reports true when arrival's turn
// has come, its caller then offering it; the held requests it moved
// before were resumed from arrival's callback, as a release in another
// stream's on_done dispatches them (proxy_set_effective_context, then
// continue_stream, which Envoy runs when the callback returns), and the
// effective context is restore again on return. With arrival set, ps is not dispatched after a move (dispatch would grant arrival,
// which it does not know yet, and end it as gone): the request the move
// lets go in ps waits for the dispatch tick.
func (pc *pluginContext) spillHeads(now time.Time, ps *poolState, arrival uint64, restore uint32) (arrivalsTurn bool) {
	if len(ps.cfg.spillTo) == 0 {
		return false
	}
	moved, switched := false, false
	defer func() {
		if switched && restore != 0 {
			_ = hostcalls.SetEffectiveContext(restore)
		}
	}()
	for i := 0; i < maxDispatch; i++ {
		if _, err := pc.rs.load(now, ps.rec); err != nil {
			return false
		}
		w, st := ps.rec.p.Next(now)
		if st != fairshare.Blocked {
			// Empty, or free to go: dispatch sends it.
			return false
		}
		if w.Holder != pc.holder {
			// Another VM's head: that VM's respill offers it.
			if moved || arrival != 0 {
				pc.wake(w.Holder)
			}
			return false
		}
		if arrival != 0 && w.ID == arrival {
			return true
		}
		h := pc.held[w.ID]
		if h == nil || h.state != stHeld {
			// Its stream is gone and its cancel failed: take it out now,
			// so that it holds no request behind it.
			pc.cancelWait(now, ps, w.ID)
			continue
		}
		if !h.headersHeld || h.deadline <= now.UnixNano() {
			// Its route is fixed (hold_headers_probe continued it), or
			// expire answers it: nothing behind it overtakes it.
			return false
		}
		if hostcalls.SetEffectiveContext(h.ctxID) != nil {
			// The stream is gone without its on_done having run here.
			h.cancel(now)
			continue
		}
		switched = true                        // the effective context is another stream's now
		w.Tokens, w.Work = h.kv, int64(h.work) // its demand now (Reestimate may have lowered it)
		fb, g, ok := pc.takeSpill(now, ps, w)
		if !ok {
			return false
		}
		moved = true
		delete(pc.held, w.ID)
		pc.cancelWait(now, ps, w.ID)
		h.moved(ps, fb, g)
		pc.met.request(fb.cfg.name, &g, h.slot)
		pc.met.queueTime(fb.cfg.name, h.slot, &g)
		h.resume(now, fb, g) // ends the grant in fb if the stream cannot go on
		if arrival == 0 {
			pc.dispatch(now, ps, 0)
		}
	}
	return false
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
