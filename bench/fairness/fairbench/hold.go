package fairbench

import (
	"github.com/fairshare-wasm/fairshare/fairshare"
)

// AblationGatewayHold is a prototype of gateway-side holding on the native
// fairshare core (not a capability of plugin.wasm): a request that would
// borrow while the pool already has C requests in flight is held at the
// gateway instead of being sent to vLLM at a borrowing priority, and its
// standing is decided when it is dispatched, not when it arrived.
const AblationGatewayHold = "gateway-hold"

// hold is the AblationGatewayHold gateway.
type hold struct {
	native
	held  map[string]*fifo
	order []string
}

func newHold() Gateway {
	return &hold{native: native{name: "plugin-hold"}}
}

func (g *hold) Start(d Dispatcher, s *Scenario, c int) error {
	g.held = map[string]*fifo{}
	for _, t := range s.Teams {
		g.held[t.Name] = &fifo{}
		g.order = append(g.order, t.Name)
	}
	return g.native.Start(d, s, c)
}

// standing returns the priority a request of team and class would get now
// and whether it would be within share.
func standing(st *fairshare.TeamStat, class Class) (int, bool) {
	if st.InFlight-st.Borrowing < st.Reserved {
		return fairshare.WithinShareBase + int(class), true
	}
	return fairshare.BorrowBase + min(st.Rank, fairshare.MaxRank)*fairshare.RankStep + int(class), false
}

func (g *hold) Arrive(r *Request) {
	g.held[r.Team].push(r)
	g.dispatch()
}

func (g *hold) Finish(r *Request) {
	g.native.Finish(r)
	g.dispatch()
}

func (g *hold) SetCapacity(c int) {
	g.native.SetCapacity(c)
	g.dispatch()
}

// dispatch sends held requests in order of the standing they would get now
// (ties: earlier arrival, then configuration order): within-share ones
// always, borrowers only while the pool has fewer than C in flight.
func (g *hold) dispatch() {
	for {
		stats := map[string]*fairshare.TeamStat{}
		snap := g.pool.Snapshot(g.now())
		for i := range snap {
			stats[snap[i].Team] = &snap[i]
		}
		best, bestPrio, bestWithin := "", 0, false
		for _, t := range g.order {
			q := g.held[t]
			if q.len() == 0 {
				continue
			}
			head := q.q[q.head]
			p, within := standing(stats[t], head.Class)
			if best == "" || p < bestPrio || (p == bestPrio && head.Arrival < g.held[best].q[g.held[best].head].Arrival) {
				best, bestPrio, bestWithin = t, p, within
			}
		}
		if best == "" || (!bestWithin && g.pool.InFlight() >= g.cfg.Capacity) {
			return
		}
		g.native.Arrive(g.held[best].pop())
	}
}
