package wasmgw

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// Several proxies, one pool (the plugin's cluster block).
//
// With Options.Cluster the gateway runs R proxies, each its own host
// (its own shared data, its own VMs, its own virtual clock) with the
// cluster block pointing at one real etcd, and routes every request to
// one of them by the scenario's gateway_replicas weights:
//
//	request ─▶ route (70/20/10) ─▶ proxy r0 ─┐
//	                              ─▶ proxy r1 ─┼─ http_call ─▶ etcd (embedded, real)
//	                              ─▶ proxy r2 ─┘
//
// The clocks move together, one plugin tick period at a time: at each
// step every proxy in turn runs the ticks due, and the gateway waits
// (Host.Wait) for the calls to etcd that its ticks started, and for the
// calls their answers started, before the next proxy steps. A sync is
// thus a whole keepalive, range and transaction chain at one virtual
// instant, the proxies sync in the order r0, r1, r2, and a run gives the
// same result every time: each proxy runs one VM (ClusterVMs), so no
// tick of the proxy runs while the answers arrive.
//
// etcd's leases run on the wall clock and the plugin's on the virtual
// one; the proxies hold leases of LeaseTTL, longer than any run in
// either time, so no lease expires during a run. The calls' timeout
// (cluster.timeout, at most the sync interval) is the one other wall
// clock: a call that etcd answers later than that (a machine overloaded
// for a second) fails that proxy's sync, which goes on with its slice
// until its next one, as in production; the run's Notes count such syncs
// (Gateway.Notes), and the run is then not exactly reproducible. Every
// run writes under a key prefix of its own, so runs can share one etcd.

// ClusterVMs is the number of worker VMs of each proxy of a cluster run:
// one, so that nothing runs in a proxy while the answers of its sync
// arrive (with several, the VMs ticking after the syncing one would race
// the answers, and runs would differ).
const ClusterVMs = 1

// LeaseTTL is cluster.lease_ttl of the proxies of a cluster run.
const LeaseTTL = time.Hour

// Cluster configures a gateway of several proxies sharing the pool.
type Cluster struct {
	// Etcd is the client URL of etcd (its JSON gateway answers under
	// /v3/ there).
	Etcd string
	// SyncInterval is cluster.sync_interval (0: the plugin's default,
	// 1 s).
	SyncInterval time.Duration
	// Bound is the overshoot the run accepts: after every submission
	// the borrowers in flight at the engines must be at most C + Bound
	// (with flow control: without, borrowers are never held), and every
	// team's within-share requests at most its reservation + Bound + the
	// proxies times fairshare.MaxLoan (the loans' over-admission bound: per
	// team and proxy), or the run fails. Without faults the plugin's
	// stated bound is 0. With the user level on (user_header in a scenario
	// with users) the within-share bound is reported, not checked: a user
	// below its portion is within share even while its teammates still
	// hold, as within share, the seats they took before it came (their
	// portions were larger then), so a team passes its reservation for as
	// long as those requests run (proxies.stats says by how much, and
	// when).
	Bound int
	// Split, if set, is the weights of the proxies (their number and
	// each one's part of the requests) instead of the scenario's
	// gateway_replicas.
	Split []int
}

func (c *Cluster) syncInterval() time.Duration {
	if c.SyncInterval > 0 {
		return c.SyncInterval
	}
	return time.Second
}

// proxies are the hosts of a cluster run.
type proxies struct {
	g      *Gateway
	hs     []*host.Host
	clocks []*host.VirtualClock
	split  []int
	next   []int // round-robin over each proxy's VMs
	start  time.Time
	period time.Duration
	prefix string
	// borrowing and within count the requests in flight at the engines:
	// borrowers, and every team's within-share requests; reserved is
	// every team's reservation.
	borrowing int
	within    map[string]int
	reserved  map[string]int
	// excess is the most within-share requests of a team in flight
	// beyond its reservation (the loans' over-admission), its team and
	// when.
	excess     int
	excessTeam string
	excessAt   time.Duration
	// users reports whether the proxies divide the teams among users
	// (user_header on): the within-share bound is then reported only
	// (Cluster.Bound).
	users bool
	// etcd counts the calls the proxies made to etcd and their bytes.
	etcd *etcdCounter
	// bound is the C the borrowers' bound is checked against: the
	// pool's C, or, after the engines shrank it (capacity_from), the C
	// before, until every proxy decides against the new one and runs
	// nothing beyond its slice (drained).
	bound int
}

// clusterConfig returns proxy r's configuration: the scenario's, with the
// cluster block.
func (p *proxies) clusterConfig(c, r int) ([]byte, error) {
	cfg, err := p.g.config(p.g.s, c)
	if err != nil {
		return nil, err
	}
	cl := p.g.opt.Cluster
	block := fmt.Sprintf(`{"cluster":{"etcd_cluster":"etcd","replica":"r%d","key_prefix":%q,"sync_interval":%q,"lease_ttl":%q,"timeout":%q},`,
		r, p.prefix, cl.syncInterval().String(), LeaseTTL.String(), cl.syncInterval().String())
	return append([]byte(block), cfg[1:]...), nil
}

// startCluster starts one host per proxy, a few sync intervals before the
// run's start (the proxies are up and have split the pool when traffic
// comes), and steps their clocks to the run's start.
func (g *Gateway) startCluster() error {
	split := g.s.GatewayReplicas
	if w := g.opt.Cluster.Split; len(w) > 0 {
		split = w
	}
	if len(split) == 0 {
		return fmt.Errorf("wasmgw: scenario %s has no gateway_replicas", g.s.Name)
	}
	for _, w := range split {
		if w <= 0 {
			return fmt.Errorf("wasmgw: scenario %s: gateway_replicas: weights must be > 0, got %v", g.s.Name, split)
		}
	}
	id := vmIDs.Add(1)
	p := &proxies{g: g, split: split, next: make([]int, len(split)), prefix: "/fairbench/run-" + strconv.FormatUint(id, 10)}
	cl := g.opt.Cluster
	p.period = min(Tick, cl.syncInterval())
	if f := g.opt.Flow; f != nil && f.MaxQueueTime > 0 {
		p.period = min(p.period, f.tick())
	}
	now := fairbench.Epoch.Add(g.d.Now())
	p.start = now.Add(-3 * cl.syncInterval())
	g.cl = p
	p.within = map[string]int{}
	p.users = !g.opt.NoUsers && g.s.HasUsers()
	p.bound = g.c
	p.reserve(g.c)
	var originalDst map[string]string
	if g.s.CapacityFromEngines {
		ev, ok := g.d.(fairbench.EngineView)
		if !ok {
			return fmt.Errorf("wasmgw: capacity_from_engines: the dispatcher shows no engines")
		}
		g.engines = ev
		g.syncEngines()
		originalDst = map[string]string{EnginesCluster: ""}
	}
	ec, err := newEtcdCounter(cl.Etcd)
	if err != nil {
		return fmt.Errorf("wasmgw: %w", err)
	}
	p.etcd = ec
	for r := range split {
		cfg, err := p.clusterConfig(g.c, r)
		if err != nil {
			return fmt.Errorf("wasmgw: %w", err)
		}
		clock := host.NewVirtualClock(p.start)
		h, err := g.mod.Start(context.Background(), host.Options{
			VMs:          ClusterVMs,
			VMID:         fmt.Sprintf("fairness-bench-%d-r%d", id, r),
			PluginName:   "fairshare",
			RootID:       "fairshare",
			PluginConfig: cfg,
			Clock:        clock,
			Seed:         g.s.Seed + 1 + uint64(r),
			LogLevel:     hostcalls.LogLevelWarn,
			Logger:       g.Logger,
			Clusters:     map[string]string{"etcd": ec.url},
			// With capacity_from every proxy reads the engines too; the
			// answers (etcd's and the engines') wait for Host.Wait, as on
			// one proxy (elastic.go).
			OriginalDst:     originalDst,
			HTTPCallsOnWait: originalDst != nil,
		})
		if err != nil {
			return fmt.Errorf("wasmgw: start proxy r%d: %w", r, err)
		}
		p.hs = append(p.hs, h)
		p.clocks = append(p.clocks, clock)
	}
	p.stepTo(now)
	return nil
}

// stepTo moves every proxy's clock to t, one tick period at a time; at
// each step each proxy in turn runs its due ticks and the gateway waits
// for the calls they started.
func (p *proxies) stepTo(t time.Time) {
	for {
		now := p.clocks[0].Now()
		if !now.Before(t) {
			return
		}
		next := p.start.Add((now.Sub(p.start)/p.period + 1) * p.period)
		if next.After(t) {
			next = t
		}
		for i, h := range p.hs {
			if d := next.Sub(p.clocks[i].Now()); d > 0 {
				h.Advance(d)
			}
			h.Wait()
		}
	}
}

// route returns the proxy request id goes to: ids modulo the sum of the
// weights, in runs of each proxy's weight.
func (p *proxies) route(id int64) int {
	sum := 0
	for _, w := range p.split {
		sum += w
	}
	k := int(id % int64(sum))
	for i, w := range p.split {
		if k < w {
			return i
		}
		k -= w
	}
	return 0
}

// newStream opens the stream of request id at its proxy (round-robin
// over the proxy's VMs).
func (p *proxies) newStream(id int64) *host.Stream {
	r := p.route(id)
	s := p.hs[r].NewStream(p.next[r] % ClusterVMs)
	p.next[r]++
	return s
}

// checkBound fails the run when, after the submission of r (the only
// event that raises them), the borrowers in flight at the engines exceed
// C + the bound (with flow control), or a team's within-share requests
// in flight exceed its reservation + the bound + the loans
// (fairshare.MaxLoan per proxy; not with the user level on, see
// Cluster.Bound); it keeps the most within-share requests of a team
// beyond its reservation. On one proxy the same holds with bound 0 and
// no loans (without users);
// within-share requests are never held, so the total in flight may pass
// C by the within-share requests sent while the pool was full, on one
// proxy as on several.
func (p *proxies) checkBound(r *fairbench.Request) {
	if r.Borrowing {
		p.borrowing++
	} else {
		p.within[r.Team]++
	}
	b := p.g.opt.Cluster.Bound
	p.drained()
	if x := p.within[r.Team] - p.reserved[r.Team]; !r.Borrowing && x > p.excess {
		p.excess, p.excessTeam, p.excessAt = x, r.Team, p.g.d.Now()
	}
	switch {
	case p.holding() && p.borrowing > p.bound+b:
		p.g.fail(fmt.Errorf("wasmgw: %d borrowers in flight at %v (request %d of team %s just sent), above C = %d + the bound %d; %s",
			p.borrowing, p.g.d.Now(), r.ID, r.Team, p.bound, b, p.describe()))
	case !r.Borrowing && !p.users && p.within[r.Team] > p.reserved[r.Team]+b+fairshare.MaxLoan*len(p.hs):
		p.g.fail(fmt.Errorf("wasmgw: %d within-share requests of team %s in flight at %v (request %d just sent), above its reservation %d + the bound %d + the loans (%d per proxy); %s",
			p.within[r.Team], r.Team, p.g.d.Now(), r.ID, p.reserved[r.Team], b, fairshare.MaxLoan, p.describe()))
	}
}

// capacityChanged moves the bound's C to c, the engines' new C
// (capacity_from): at once when it grows (the plugin decides against
// less until it reads the engines), when it shrinks only once the
// proxies drained (drained).
func (p *proxies) capacityChanged(c int) {
	if c >= p.bound {
		p.bound = c
		p.reserve(c)
	}
	p.drained()
}

// drained ends the bound's wait after the engines shrank C: once every
// proxy decides against the new C (its capacity_agreed) and has no more
// requests in flight than its slice, the requests admitted against the
// old C have finished or fit the new one, and the bound is the new C
// again.
func (p *proxies) drained() {
	c := p.g.c
	if p.bound <= c {
		return
	}
	for _, h := range p.hs {
		if agreedCapacity(h) != c {
			return
		}
		v, _, ok := h.SharedData(recordKey())
		var pool fairshare.Pool
		if !ok || pool.UnmarshalBinary(v) != nil {
			return
		}
		s, _ := pool.Slice()
		if _, used := pool.Report(); used.Capacity > s.Capacity {
			return
		}
	}
	p.bound = c
	p.reserve(c)
}

// agreedCapacity is the C a proxy's fleet last agreed on (the plugin's
// capacity_agreed gauge; 0 before its first sync).
func agreedCapacity(h *host.Host) int {
	if m, ok := h.Metrics()["fairshare.pool.bench.capacity_agreed"]; ok {
		return int(m.Value)
	}
	return 0
}

// decided is the C every proxy decides against (its capacity_agreed), or
// -1 while they disagree.
func (p *proxies) decided() int {
	c := -1
	for i, h := range p.hs {
		a := agreedCapacity(h)
		if i > 0 && a != c {
			return -1
		}
		c = a
	}
	return c
}

// ledger sums every proxy's ledger (Gateway.Ledger).
func (p *proxies) ledger() (inFlight int, prompt, completion int64) {
	for i, h := range p.hs {
		n, pr, co := hostLedger(h, p.clocks[i].Now())
		inFlight, prompt, completion = inFlight+n, prompt+pr, completion+co
	}
	return inFlight, prompt, completion
}

// holding reports whether the proxies hold borrowers while their slice
// is full (flow control); without, borrowers go at once whatever the
// load, on one proxy as on several, and only the within-share requests
// are bounded.
func (p *proxies) holding() bool {
	f := p.g.opt.Flow
	return f != nil && f.MaxQueueTime > 0
}

// finish counts r out of the requests in flight.
func (p *proxies) finish(r *fairbench.Request) {
	if r.Borrowing {
		p.borrowing--
	} else {
		p.within[r.Team]--
	}
}

// reserve sets every team's reservation in a pool of capacity c, as the
// plugin apportions it (fairshare.Pool.Totals).
func (p *proxies) reserve(c int) {
	cfg := fairshare.Config{Capacity: c}
	for _, t := range p.g.s.Teams {
		cfg.Teams = append(cfg.Teams, fairshare.TeamConfig{Name: t.Name, Share: t.Share, Weight: t.Weight})
	}
	tot := fairshare.NewPool("bench", cfg, fairbench.Epoch).Totals()
	p.reserved = map[string]int{}
	for i, t := range tot.Teams {
		p.reserved[t] = tot.Whole.Reserved[i]
	}
}

// describe returns every proxy's slice and what it has in flight against
// it, for a failure message.
func (p *proxies) describe() string {
	var b strings.Builder
	for i, h := range p.hs {
		v, _, ok := h.SharedData("fairshare/fairshare/pool/bench/v" + strconv.Itoa(fairshare.RecordVersion))
		var pool fairshare.Pool
		if !ok || pool.UnmarshalBinary(v) != nil {
			fmt.Fprintf(&b, "[r%d: no record]", i)
			continue
		}
		s, _ := pool.Slice()
		demand, used := pool.Report()
		fmt.Fprintf(&b, "[r%d: slice %+v, demand %v, used %+v]", i, s, demand, used)
	}
	return b.String()
}

// reconfigure gives every proxy the configuration of capacity c.
func (p *proxies) reconfigure(c int) error {
	p.reserve(c)
	for r, h := range p.hs {
		cfg, err := p.clusterConfig(c, r)
		if err == nil {
			err = h.Reconfigure(cfg)
		}
		if err != nil {
			return fmt.Errorf("proxy r%d: %w", r, err)
		}
	}
	return nil
}

// failures returns the plugin's cluster_failures_total summed over the
// proxies (syncs that could not reach etcd) and the proxies' last log
// line about the cluster.
func (p *proxies) failures() (int64, string) {
	var n int64
	last := ""
	for i, h := range p.hs {
		for name, m := range h.Metrics() {
			if strings.HasSuffix(name, "cluster_failures_total") {
				n += m.Value
			}
		}
		for _, l := range h.Logs() {
			if strings.Contains(l.Message, "cluster:") {
				last = fmt.Sprintf("r%d at %v: %s", i, l.Time.Sub(fairbench.Epoch), l.Message)
			}
		}
	}
	return n, last
}

func (p *proxies) close() {
	for _, h := range p.hs {
		h.Close(context.Background())
	}
	if p.etcd != nil {
		p.etcd.close()
	}
}

// stats returns what the proxies' syncs cost and the loans'
// over-admission, for the run's notes: the calls to etcd per proxy and
// second of virtual time, the bytes (request and response bodies) per
// sync (cluster_syncs_total: reports written), and the most
// within-share requests of a team in flight beyond its reservation.
func (p *proxies) stats() string {
	calls, bytes := p.etcd.counts()
	var syncs int64
	for _, h := range p.hs {
		for name, m := range h.Metrics() {
			if strings.HasSuffix(name, "cluster_syncs_total") {
				syncs += m.Value
			}
		}
	}
	secs := p.clocks[0].Now().Sub(p.start).Seconds()
	perSync := "—"
	if syncs > 0 {
		perSync = fmt.Sprintf("%.0f", float64(bytes)/float64(syncs))
	}
	over := "none"
	if p.excess > 0 {
		over = fmt.Sprintf("%d (`%s` at %.2f s; bound: the loans, %d per proxy, %d)", p.excess, p.excessTeam, p.excessAt.Seconds(), fairshare.MaxLoan, fairshare.MaxLoan*len(p.hs))
		if p.users {
			over += ", not checked with users within teams (a user below its portion is within share while its teammates still hold the seats they took before it came)"
		}
	}
	return fmt.Sprintf("%d proxies: %.2f etcd calls per proxy per second, %s bytes per sync (%d syncs), most within-share requests of a team beyond its reservation %s",
		len(p.hs), float64(calls)/float64(len(p.hs))/secs, perSync, syncs, over)
}

// Proxies returns the hosts of a cluster run, in proxy order (nil for one
// proxy): tests read their records and metrics.
func (g *Gateway) Proxies() []*host.Host {
	if g.cl == nil {
		return nil
	}
	return g.cl.hs
}
