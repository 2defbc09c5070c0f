package plugin

import (
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// arrive decides a request through the pool's record (fairshare.Arrive):
// granted, queued or refused. retry is the Retry-After of a refused request.
func (pc *pluginContext) arrive(now time.Time, ps *poolState, r fairshare.Request) (g fairshare.Grant, w fairshare.Waiting, out fairshare.Outcome, retry time.Duration, err error) {
	err = pc.updatePool(now, ps, "arrive", func(p *fairshare.Pool) {
		g, w, out = p.Arrive(now, r)
		if out != fairshare.Granted && out != fairshare.Queued {
			retry = p.RetryAfter(now, r.Team)
		}
	})
	if err != nil {
		if !pc.cfg.failClosed {
			pc.met.poolCounter(ps.cfg.name, mFailOpen, 1)
		}
		return g, w, out, 0, err
	}
	if out == fairshare.Granted {
		pc.met.request(ps.cfg.name, &g, ps.slot(g.Team))
	}
	return g, w, out, retry, nil
}

// borrows reports whether a grant goes at a borrower's priority, as
// operators see it (x-fairshare-borrowing, the standing label): above its
// team's reservation in sequences, or within them but on KV tokens
// borrowed beyond the team's token reservation (Grant.BorrowsTokens).
func borrows(g *fairshare.Grant) bool { return g.Borrowing || g.BorrowsTokens }

// release ends grant g in its pool's record with the consumption; it
// reports whether the record was written.
func (pc *pluginContext) release(now time.Time, ps *poolState, g *fairshare.Grant, consumed float64) bool {
	var done fairshare.Grant
	err := pc.updatePool(now, ps, "release", func(p *fairshare.Pool) {
		gc := *g
		p.Release(now, &gc, consumed)
		done = gc
		ps.waiters = p.Waiters()
	})
	if err != nil {
		return false
	}
	*g = done
	return true
}

// charge adds the consumption of a request that held no grant (it was
// forwarded by failure_mode "open") to the team's usage; it reports whether
// the record was written.
func (pc *pluginContext) charge(now time.Time, ps *poolState, team string, consumed float64) bool {
	return pc.updatePool(now, ps, "charge", func(p *fairshare.Pool) {
		p.Charge(now, team, consumed)
	}) == nil
}

// pendingRelease is a release (or, for a request forwarded without a
// grant, a charge) whose record update failed: it is retried on every tick
// so that the request does not stay in flight and its usage is not lost.
type pendingRelease struct {
	pool     *poolState
	grant    fairshare.Grant // zero for a charge
	team     string          // the team charged, for a charge
	charge   bool
	consumed float64
}

// settle retries r; it reports whether the record was written.
func (pc *pluginContext) settle(now time.Time, r *pendingRelease) bool {
	if r.charge {
		return pc.charge(now, r.pool, r.team, r.consumed)
	}
	return pc.release(now, r.pool, &r.grant, r.consumed)
}

// maxPending bounds the releases kept for retry; beyond it the oldest are
// dropped (the pool then counts them until this holder dies).
const maxPending = 4096

// keep queues a release that failed for the tick to retry.
func (pc *pluginContext) keep(r pendingRelease) {
	if len(pc.pending) >= maxPending {
		pc.pending = pc.pending[1:]
	}
	pc.pending = append(pc.pending, r)
}

// undo ends the grant of a request that will not be forwarded after all
// (its body could not be rewritten): released with nothing consumed, so
// that it holds no slot and charges nothing.
func (h *httpContext) undo(now time.Time) {
	granted := h.state == stGranted
	h.state = stDone
	if !granted {
		return
	}
	r := pendingRelease{pool: h.pool, grant: h.grant, team: h.team}
	if !h.pc.settle(now, &r) {
		h.pc.keep(r)
	}
}
