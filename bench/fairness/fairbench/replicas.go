package fairbench

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// NativeReplicas is the plugin policy computed natively on R gateway
// replicas that share the pool as the plugin's cluster block does: each
// replica decides against its slice of the pool (fairshare.SetSlice), and
// every SyncTicks ticks each replica in turn rebalances its slice from
// every replica's demand (fairshare.Rebalance) and merges the others'
// usage contributions into its own (fairshare.SumUsage, its own being
// what its pool holds beyond the others' it last merged). The store is
// in-process and the replicas sync one after the other, so every write
// succeeds: the model of etcd without faults, on virtual time. Requests
// go to the replicas by Split (weights, request by request in turn).
//
// It records, after every decision, how far the within-share requests of
// a team across all replicas went above the team's reservation
// (MaxOverReservation): the stated bound is 0 without faults.
type NativeReplicas struct {
	// Split weighs the replicas' parts of the requests; its length is R.
	Split []int
	// SyncTicks is the sync interval in ticks (TickPeriod each).
	SyncTicks int

	name     string
	d        Dispatcher
	s        *Scenario
	cfg      fairshare.Config
	pools    []*fairshare.Pool
	store    []fairshare.Member      // every replica's last report
	reports  []fairshare.UsageReport // every replica's last usage contribution
	others   []map[string]float64    // others' usage merged into each pool
	othersAt []time.Time
	grants   map[int64]replicaGrant
	ticks    int
	over     int
}

type replicaGrant struct {
	r int
	g fairshare.Grant
}

// NewNativeReplicas returns the constructor of the R-replica policy
// (R = len(split)) syncing every syncTicks ticks.
func NewNativeReplicas(split []int, syncTicks int) NewGateway {
	return func() Gateway {
		return &NativeReplicas{Split: split, SyncTicks: syncTicks, name: fmt.Sprintf("plugin-native-%dx", len(split))}
	}
}

// Name implements Gateway.
func (g *NativeReplicas) Name() string { return g.name }

// EnginePolicy implements Gateway.
func (g *NativeReplicas) EnginePolicy() string { return EnginePriority }

// MaxOverReservation is the most within-share requests of one team were
// in flight across the replicas above the team's reservation.
func (g *NativeReplicas) MaxOverReservation() int { return g.over }

func (g *NativeReplicas) now() time.Time { return Epoch.Add(g.d.Now()) }

// Start implements Gateway: R pools with empty slices, then two syncs.
func (g *NativeReplicas) Start(d Dispatcher, s *Scenario, c int) error {
	g.d, g.s = d, s
	g.grants = map[int64]replicaGrant{}
	g.cfg = fairshare.Config{Capacity: c, HalfLife: s.halfLife(), EntryPenalty: true}
	for _, t := range s.Teams {
		g.cfg.Teams = append(g.cfg.Teams, fairshare.TeamConfig{Name: t.Name, Share: t.Share, Weight: t.Weight})
	}
	n := len(g.Split)
	g.pools = make([]*fairshare.Pool, n)
	g.store = make([]fairshare.Member, n)
	g.reports = make([]fairshare.UsageReport, n)
	g.others = make([]map[string]float64, n)
	g.othersAt = make([]time.Time, n)
	for r := range n {
		g.pools[r] = fairshare.NewPool("bench", g.cfg, g.now())
		g.pools[r].SetSlice(&fairshare.Slice{})
		g.store[r] = fairshare.Member{ID: fmt.Sprintf("r%d", r)}
		g.reports[r] = fairshare.UsageReport{ID: g.store[r].ID, At: g.now()}
		g.others[r] = map[string]float64{}
		g.othersAt[r] = g.now()
	}
	g.syncAll()
	g.syncAll()
	return nil
}

// replica is the replica request r goes to.
func (g *NativeReplicas) replica(id int64) int {
	sum := 0
	for _, w := range g.Split {
		sum += w
	}
	k := int(id % int64(sum))
	for i, w := range g.Split {
		if k < w {
			return i
		}
		k -= w
	}
	return 0
}

// Arrive implements Gateway.
func (g *NativeReplicas) Arrive(r *Request) {
	k := g.replica(r.ID)
	gr := g.pools[k].Acquire(g.now(), 1, r.Team, fairshare.Class(r.Class), Estimate(r))
	g.grants[r.ID] = replicaGrant{k, gr}
	r.Borrowing = gr.Borrowing
	g.d.Submit(r, gr.Priority)
	g.checkReservations()
}

// checkReservations records how far within-share requests across the
// replicas exceed a team's reservation.
func (g *NativeReplicas) checkReservations() {
	tot := g.pools[0].Totals()
	within := make([]int, len(tot.Teams))
	for _, p := range g.pools {
		_, used := p.Report()
		for i := range within {
			within[i] += used.Reserved[i]
		}
	}
	for i, w := range within {
		g.over = max(g.over, w-tot.Whole.Reserved[i])
	}
}

// Finish implements Gateway.
func (g *NativeReplicas) Finish(r *Request) {
	rg, ok := g.grants[r.ID]
	if !ok {
		return
	}
	delete(g.grants, r.ID)
	g.pools[rg.r].Release(g.now(), &rg.g, r.Service())
}

// SetCapacity implements Gateway: every replica's configuration changes;
// the slices follow at the next sync.
func (g *NativeReplicas) SetCapacity(c int) {
	g.cfg.Capacity = c
	for _, p := range g.pools {
		p.Reconfigure(g.now(), g.cfg)
	}
	g.syncAll()
}

// Tick implements Gateway.
func (g *NativeReplicas) Tick() {
	for _, p := range g.pools {
		p.Heartbeat(g.now(), 1)
	}
	g.ticks++
	if g.ticks%max(g.SyncTicks, 1) == 0 {
		g.syncAll()
	}
}

// syncAll syncs every replica in turn, starting with a different one each
// time.
func (g *NativeReplicas) syncAll() {
	n := len(g.pools)
	for k := range n {
		g.sync((g.ticks + k) % n)
	}
}

// sync is one replica's sync, as the plugin's (plugin/cluster.go).
func (g *NativeReplicas) sync(r int) {
	now := g.now()
	p := g.pools[r]
	tot := p.Totals()
	applied, _ := p.Slice()
	demand, used := p.Report()
	// No flow control: borrowers go whatever the capacity.
	used.Capacity = min(used.Capacity, applied.Capacity)
	used.KVTokens = min(used.KVTokens, applied.KVTokens)
	members := slices.Clone(g.store)
	members[r] = fairshare.Member{ID: members[r].ID, Demand: demand, Applied: applied, Used: used}
	_, next := fairshare.Rebalance(tot, members, r)
	// Usage: own = the pool's beyond the others' merged; then own + others.
	cur, _ := p.Usage(now)
	decay := 1.0
	if hl := g.cfg.HalfLife; hl > 0 {
		decay = math.Exp(-math.Ln2 * float64(now.Sub(g.othersAt[r])) / float64(hl))
	}
	var others []fairshare.UsageReport
	for k, rep := range g.reports {
		if k != r {
			others = append(others, rep)
		}
	}
	sum := fairshare.SumUsage(now, g.cfg.HalfLife, others)
	own := map[string]float64{}
	for t, x := range cur {
		own[t] = max(x-g.others[r][t]*decay, 0)
		p.SetUsage(now, t, own[t]+sum[t])
	}
	g.others[r], g.othersAt[r] = sum, now
	g.reports[r] = fairshare.UsageReport{ID: members[r].ID, At: now, Usage: own}
	// The write: in-process, it always succeeds.
	members[r].Applied = next
	g.store[r] = members[r]
	p.SetSlice(&next)
}

// Close implements Gateway.
func (g *NativeReplicas) Close() {}
