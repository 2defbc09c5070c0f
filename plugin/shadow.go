package plugin

import (
	"strconv"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Shadow mode (mode "shadow"): the plugin decides every scheduled request
// and accounts it exactly as in enforce mode (arrive, release, charge,
// settle on the same pool records, so usage, standings, gauges and
// requests_total evolve as they would), but forwards every request as the
// client sent it, and says in response headers and counters what it would
// have done:
//
//	request headers     nothing removed or added (client x-fairshare-*,
//	                    content-length and accept-encoding stay), never
//	                    stopped (hold_headers has no effect)
//	request body        buffered to be read, forwarded byte for byte: no
//	                    priority written, no include_usage added
//	would hold          a borrower that finds no room (fairshare.Outcome
//	                    Queued) is granted at once in the record as a
//	                    borrower at its team's rank now (Pool.ArriveShadow),
//	                    so that it counts in flight, sequences and KV
//	                    tokens, while it actually runs, and is released at
//	                    its end like any other; x-fairshare-would-hold:
//	                    true, would_hold_total
//	would refuse        every local reply of enforce mode on the request
//	                    path (no team, bad class or body, unknown team or
//	                    model, body too large, record unavailable with
//	                    failure_mode "closed", queue full) is counted as
//	                    would_refuse_<reason>_total where enforce counts
//	                    rejected_<reason>_total (a pool's reasons per team
//	                    as well: countWouldRefuse), and the request
//	                    forwarded; x-fairshare-would-refuse: <reason>
//	engine refusal      nothing is written, so nothing is watched or replaced
//	unscheduled paths   untouched: not even buffered
//
// Since nothing waits in shadow mode, the queue limits and max_queue_time
// never refuse anything there (a queue_full would-refuse needs requests
// waiting); what shadow reports is each arrival's decision on the record
// as it stands. Spill-over to another pool does not exist yet: when it
// does, shadowDecide is where a would-spill is to be decided and reported
// instead of taken.
//
// shadow_strip_priority opts back into the one protection that changes
// the request: a client's top-level priority is blanked out in place on
// every path (stripBody; the body keeps its length, no header changes),
// and a body that cannot be stripped (too large, unreadable and spelling
// priority) is refused as in enforce mode.

// Response headers added in shadow mode (with response_headers).
const (
	// HeaderMode is "shadow" on every response to a scheduled request in
	// shadow mode.
	HeaderMode = "x-fairshare-mode"
	// HeaderWouldHold is "true" when enforce mode would have held the
	// request at the gateway (a borrower that found no room), else
	// "false".
	HeaderWouldHold = "x-fairshare-would-hold"
	// HeaderWouldRefuse is the reason enforce mode would have answered
	// the request with an error (the reason of its rejected_<reason>_total
	// counter); absent when it would have forwarded it.
	HeaderWouldRefuse = "x-fairshare-would-refuse"
)

// Metric suffixes of shadow mode.
const (
	mWouldBorrow = "would_borrow_total" // counter, pool/team/class: decided at a borrower's priority
	mWouldHold   = "would_hold_total"   // counter, pool/team/class: enforce mode would have held it
)

// wouldRefuseName is the counter of requests enforce mode would have
// answered with an error for reason: would_refuse_<reason>_total, at the
// level of its rejected_<reason>_total (plugin or pool), and for a pool's
// reasons (unknown_team, queue_full, unavailable) per team as well (see
// countWouldRefuse).
func wouldRefuseName(reason string) string { return "would_refuse_" + reason + "_total" }

// countWouldRefuse counts a request that enforce mode would have answered with
// an error for reason in pool ps: fairshare.pool.<pool>.team.<team>.
// would_refuse_<reason>_total, the team as ps counts it (a configured team,
// or _unknown for every other, so the series are bounded by the
// configuration: at most pools × (teams + 1) per reason, and one per pool
// for unknown_team, whose team is never one of the pool's). The enforce
// counter it mirrors, rejected_<reason>_total, is the pool's: summed over
// team, the two compare.
func (h *httpContext) countWouldRefuse(ps *poolState, reason string) {
	h.pc.met.teamCounter(ps.cfg.name, teamOf(ps, h.team), wouldRefuseName(reason), 1)
}

// refuse answers the request with e in enforce mode (reply). In shadow
// mode it records that enforce mode would have, and lets the request go
// as the client sent it.
func (h *httpContext) refuse(e apiError, pool string) types.Action {
	pc := h.pc
	if !pc.cfg.shadow {
		return h.reply(e, pool)
	}
	if h.state == stIgnored && pc.cfg.shadowStrip {
		// Refused at its headers: its body is still stripped, as an
		// unscheduled one's (strip; unscheduled "reject" does not apply).
		h.state = stStrip
	} else {
		h.state = stIgnored
	}
	h.wouldRefuse = e.reason
	if ps := pc.poolNamed(pool); ps != nil {
		h.countWouldRefuse(ps, e.reason)
	} else {
		pc.met.pluginCounter(wouldRefuseName(e.reason), 1)
	}
	return types.ActionContinue
}

// unstrippable is refuse for a body the plugin cannot read whole (too
// large, or the host would not give it): with shadow_strip_priority it
// cannot be stripped, so it is refused as in enforce mode.
func (h *httpContext) unstrippable(e apiError) types.Action {
	if h.pc.cfg.shadow && h.pc.cfg.shadowStrip {
		return h.reply(e, "")
	}
	return h.refuse(e, "")
}

// shadowDecide is decide's end in shadow mode: the request is decided
// through the pool's record as enforce mode decides it (Pool.ArriveShadow
// returns Arrive's outcome), counted in flight in every case, and
// forwarded as it came.
func (h *httpContext) shadowDecide(now time.Time, ps *poolState, estimate float64, kv int64) types.Action {
	pc := h.pc
	g, outcome, err := pc.arriveShadow(now, ps, fairshare.Request{
		Holder: pc.holder, ID: pc.nextID, Team: h.team, Class: h.class,
		Tokens: kv, Estimate: estimate, Work: h.work, User: h.user,
	})
	h.pool = ps
	slot := ps.slot(h.team)
	switch {
	case err == nil:
		h.state = stGranted
		h.grant = g
		h.prio = g.Priority
		h.borrowing = borrows(&g)
		switch outcome {
		case fairshare.Granted:
		case fairshare.Queued:
			h.wouldHold = true
			pc.met.classRecord(slot, ps.cfg.name, slot.name, h.class, counterKind, mWouldHold, fWouldHold, 1)
		default:
			h.wouldRefuse = errQueueFull.reason
			h.countWouldRefuse(ps, errQueueFull.reason)
		}
	default:
		// failure_mode "open" forwards it, charged at its end; "closed"
		// would have answered 503.
		h.state = stForwarded
		h.prio = failOpenPriority(h.class)
		h.borrowing = true
		if pc.cfg.failClosed {
			h.wouldRefuse = errUnavailable.reason
			h.countWouldRefuse(ps, errUnavailable.reason)
		}
	}
	if h.borrowing {
		pc.met.classRecord(slot, ps.cfg.name, slot.name, h.class, counterKind, mWouldBorrow, fWouldBorrow, 1)
	}
	// Spill-over (not built yet) decides here whether the request would
	// have gone to another pool, and reports it without moving it.
	h.markDispatched(now)
	return types.ActionContinue
}

// arriveShadow is arrive in shadow mode: Pool.ArriveShadow through the
// pool's record, the grant counted as arrive counts one.
func (pc *pluginContext) arriveShadow(now time.Time, ps *poolState, r fairshare.Request) (g fairshare.Grant, out fairshare.Outcome, err error) {
	err = pc.updatePool(now, ps, "arrive", func(p *fairshare.Pool) {
		g, out = p.ArriveShadow(now, r)
	})
	if err != nil {
		if !pc.cfg.failClosed {
			pc.met.poolCounter(ps.cfg.name, mFailOpen, 1)
		}
		return g, out, err
	}
	pc.met.request(ps.cfg.name, &g, ps.slot(g.Team))
	return g, out, nil
}

// shadowHeaders adds the shadow-mode response headers: the mode, whether
// enforce mode would have held the request, and why it would have refused
// it.
func (h *httpContext) shadowHeaders() {
	_ = hostcalls.ReplaceHttpResponseHeader(HeaderMode, modeShadow)
	if h.tracking() {
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderWouldHold, strconv.FormatBool(h.wouldHold))
	}
	if h.wouldRefuse != "" {
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderWouldRefuse, h.wouldRefuse)
	}
}
