package plugin

import (
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// DefaultPluginName prefixes the shared-data keys when the host does not
// report the plugin_name property.
const DefaultPluginName = "fairshare"

// NewVMContext returns the VM context of the fair-share filter; the Wasm
// main package passes it to hostcalls.SetVMContext from init. It makes no
// host call.
func NewVMContext() types.VMContext { return &vmContext{} }

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

// pluginContext is one configured instance of the filter in one VM.
type pluginContext struct {
	types.DefaultPluginContext
	cfg      config
	name     string // plugin name: the shared-data key prefix
	holder   uint32 // this VM's holder id, random, chosen at the first start
	rs       records
	pools    []*poolState // parallel to cfg.pools
	met      *metrics
	body     []byte           // rewrite buffer, reused
	reqBuf   []byte           // decide's request body read buffer, reused (readBody)
	scratch  []byte           // response header values, formatted (reused)
	hdrBuf   []byte           // headers read (readHeaders), reused
	respBuf  []byte           // a one-chunk response body (readResponse), reused
	hdrPairs [][2]string      // the pairs of hdrBuf, reused
	edit     editScratch      // the body edits' values (request.send)
	pending  []pendingRelease // releases and charges that failed, retried on tick
	free     []*httpContext   // deleted stream contexts, cleared, for new streams

	// Flow control (flow.go): the requests this VM holds, by id; the last
	// id given; the wake-up queues of other holders, resolved; when the
	// pools were last heartbeaten (the tick runs at dispatch_tick while
	// holding is on).
	held     map[uint64]*httpContext
	means    completionMeans // per team, for the KV demand
	meansNew bool            // means learnt since this VM last shared them
	nextID   uint64
	queues   map[uint32]uint32
	wakeQ    uint32
	lastBeat time.Time
	// probing holds, by context id, the streams stopped at their headers
	// (hold_headers "on") that have had no body callback yet (flow.go
	// probe); probeWarned: the critical line naming Envoy's setting was
	// logged.
	probing     map[uint32]*httpContext
	probeWarned bool

	// cl syncs the pools with the other proxies (cluster.go); nil
	// without a cluster block.
	cl *clusterSync
	// caps reads the engines of the pools with capacity_from
	// (capacity.go); nil when no pool has it.
	caps *capacitySync
}

// poolState is a configured pool and its shared record.
type poolState struct {
	cfg *poolConfig
	rec *record
	// waiters is the pool's queue length as this VM last saw it.
	waiters int
	// eng is the pool's engine priority (engine.go).
	eng engineState
	// slots are what a request looks up by its team's name, per entry of
	// the record (cfg.teams in order, then fairshare.UnknownTeam), made
	// at the first use (slot).
	slots []teamSlot
	// fleet caches the totals of a pool whose capacity the proxies of a
	// cluster agree on from the engines (fleetcap.go).
	fleet fleetCache
}

// teamSlot is what the request path needs of one entry of a pool, kept
// so that a request hashes no name: the ids of its requests_total
// counters and of its borrowed_total counter, and its completion mean.
type teamSlot struct {
	name     string         // the configured team, or fairshare.UnknownTeam
	mean     *runningMean   // the entry of the plugin's completion means once found (completionMeans.at)
	requests [2][2]metricID // by class (Interactive, Batch) and borrowing
	borrowed metricID
	class    [2]classMetrics // latency and tokens by class (latency.go)
}

// metricID is a metric's id once defined.
type metricID struct {
	id uint32
	ok bool
}

// slot returns the slot of the entry team is counted in (see teamOf):
// its configured team's, or the unknown team's. It costs a search of the
// pool's teams, as teamOf does.
func (ps *poolState) slot(team string) *teamSlot {
	teams := ps.cfg.teams
	if len(ps.slots) != len(teams)+1 {
		ps.slots = make([]teamSlot, len(teams)+1)
		for i := range teams {
			ps.slots[i].name = teams[i].Name
		}
		ps.slots[len(teams)].name = fairshare.UnknownTeam
	}
	for i := range teams {
		if teams[i].Name == team {
			return &ps.slots[i]
		}
	}
	return &ps.slots[len(teams)]
}

// teamOf returns the pool entry a team is counted in: the team, or
// fairshare.UnknownTeam for a team the pool does not list.
func teamOf(ps *poolState, team string) string {
	if ps.cfg.hasTeam(team) {
		return team
	}
	return fairshare.UnknownTeam
}

// OnPluginStart reads and validates the configuration, creates missing
// pool records (or applies this configuration to existing ones) and starts
// the tick. A bad configuration is logged as critical, one line per
// problem, and fails the start.
func (pc *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	now := time.Now()
	data, err := hostcalls.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		hostcalls.LogCriticalf("fairshare: reading the plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := parse(data)
	if err != nil {
		if ce, ok := err.(*configError); ok {
			for _, p := range ce.problems {
				hostcalls.LogCritical("fairshare: invalid configuration: " + p)
			}
		} else {
			hostcalls.LogCritical("fairshare: invalid configuration: " + err.Error())
		}
		return types.OnPluginStartStatusFailed
	}
	if pc.name == "" {
		pc.name = DefaultPluginName
		if v, err := hostcalls.GetProperty([]string{"plugin_name"}); err == nil && len(v) > 0 {
			pc.name = string(v)
		}
	}
	if pc.holder == 0 {
		pc.holder = pc.newHolder(now, cfg)
	}
	if pc.met == nil {
		pc.met = newMetrics(hostMetrics{})
	}
	if pc.held == nil {
		pc.means = completionMeans{}
		pc.held = map[uint64]*httpContext{}
		pc.queues = map[uint32]uint32{}
		pc.probing = map[uint32]*httpContext{}
	}
	if pc.wakeQ == 0 && cfg.holding() {
		if id, err := hostcalls.RegisterSharedQueue(wakeQueueName(pc.holder)); err != nil {
			hostcalls.LogWarnf("fairshare: register wake-up queue: %v (held requests are dispatched on ticks)", err)
		} else {
			pc.wakeQ = id
		}
	}
	pc.cfg = cfg
	for _, w := range cfg.warnings() {
		hostcalls.LogWarn("fairshare: " + w)
	}
	if len(pc.means) == 0 {
		// A new VM: what the others have learnt of the teams' completions.
		pc.takeMeans()
	}
	pc.rs = records{
		st:       hostStore{},
		holder:   pc.holder,
		sentinel: sentinelKey(pc.name, pc.holder),
		retries:  cfg.casRetries,
		warn:     hostcalls.LogWarn,
		plugin:   pc.name,
		gen:      generation{started: now.UnixNano(), fp: cfg.fingerprint()},
		sliced:   cfg.cluster != nil,
	}
	if err := pc.rs.publish(); err != nil {
		hostcalls.LogWarnf("fairshare: publish configuration: %v", err)
	}
	pc.pools = pc.pools[:0]
	for i := range cfg.pools {
		p := &pc.cfg.pools[i]
		rec := newRecord(pc.name, p.name, cfg.coreConfig(p))
		if cfg.fleetPool(p) {
			t := fleetTotalsOf(p.name, rec.cfg, p.capacity, p.kvTokens, p.throughput)
			rec.fleet = &t
		}
		pc.pools = append(pc.pools, &poolState{cfg: p, rec: rec})
	}
	for _, ps := range pc.pools {
		pc.startEngine(ps)
		pc.heartbeat(now, ps)
	}
	pc.lastBeat = now
	period := cfg.tick
	if cfg.holding() && cfg.dispatchTick < period {
		period = cfg.dispatchTick
	}
	pc.cl = nil
	if cfg.cluster != nil {
		pc.cl = &clusterSync{pc: pc, cfg: cfg.cluster, call: hostEtcdCaller(cfg.cluster), now: time.Now}
		period = min(period, cfg.cluster.syncInterval)
	}
	pc.caps = nil
	if cfg.capacityFrom() {
		pc.caps = newCapacitySync(pc)
		period = min(period, pc.caps.minInterval())
	}
	if err := hostcalls.SetTickPeriodMilliSeconds(uint32(period / time.Millisecond)); err != nil {
		hostcalls.LogWarnf("fairshare: set tick period: %v", err)
	}
	hostcalls.LogInfof("fairshare: started %s holder %x with %d pools", pc.name, pc.holder, len(pc.pools))
	return types.OnPluginStartStatusOK
}

// newHolder chooses this VM's holder id: random, mixed with the clock
// (a host that seeds every VM's random source alike, as a deterministic
// test host does for a reconfiguration's new VMs, must not give two live
// VMs one id), and absent from every pool record, so that no two VMs
// dispatch, heartbeat or release as one.
func (pc *pluginContext) newHolder(now time.Time, cfg config) uint32 {
	seed := uint64(now.UnixNano())
	for attempt := 0; ; attempt++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		id := uint32(hostcalls.RandomUint64()) ^ uint32(seed>>32)
		if id == 0 {
			continue
		}
		if attempt >= 8 {
			return id
		}
		taken := false
		for i := range cfg.pools {
			v, _, err := hostcalls.GetSharedData(recordKey(pc.name, cfg.pools[i].name))
			var rec fairshare.Pool
			if err == nil && rec.UnmarshalBinary(v) == nil && rec.HasHolder(id) {
				taken = true
				break
			}
		}
		if !taken {
			return id
		}
	}
}

// heartbeat marks this holder alive in the pool's record (expiring dead
// holders and stale phantoms) and records the pool's gauges.
func (pc *pluginContext) heartbeat(now time.Time, ps *poolState) {
	if pc.updatePool(now, ps, "heartbeat", func(p *fairshare.Pool) { p.Heartbeat(now, pc.holder) }) != nil {
		return
	}
	p := ps.rec.p
	stats := p.Snapshot(now)
	pc.met.gauges(ps.cfg.name, p.Capacity(), pc.throughput(ps), stats)
	if pc.cfg.userHeader != "" {
		pc.met.userGauges(ps.cfg.name, stats)
	}
	if k := p.KVTokens(); (k > 0 || ps.cfg.capFrom != nil) && !pc.cfg.fleetPool(ps.cfg) {
		pc.met.poolGauge(ps.cfg.name, mKVTokens, k)
	}
	pc.fairness(ps, stats)
}

// OnTick answers held requests past their deadline and dispatches the
// others whose turn has come, retries failed releases, and every tick
// period heartbeats every pool and records its gauges. With holding on it
// runs every dispatch_tick.
func (pc *pluginContext) OnTick() {
	now := time.Now()
	if len(pc.probing) > 0 {
		pc.probe(now)
	}
	if len(pc.held) > 0 {
		pc.expire(now)
		pc.dispatchHeld(now)
	}
	if pc.cl != nil {
		pc.cl.tick(now)
	}
	if pc.caps != nil {
		pc.caps.tick(now)
	}
	if len(pc.pending) > 0 {
		kept := pc.pending[:0]
		for _, r := range pc.pending {
			if !pc.settle(now, &r) {
				kept = append(kept, r)
			}
		}
		clear(pc.pending[len(kept):])
		pc.pending = kept
	}
	if now.Sub(pc.lastBeat) < pc.cfg.tick-pc.cfg.tick/8 {
		return
	}
	pc.lastBeat = now
	for _, ps := range pc.pools {
		pc.heartbeat(now, ps)
	}
	pc.shareMeans()
}
