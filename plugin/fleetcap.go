package plugin

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tidwall/gjson"
)

// Capacity from the engines across the proxies of a cluster (a pool with
// capacity_from and the cluster block: the fleet's capacity).
//
// Every replica reads the engines as one proxy does (capacity.go: its
// poller VM keeps the readings in shared data) but never applies them to
// its record: the replica's slice is Rebalance's, and what Rebalance
// divides must be the same C and K at every replica. So every replica
// publishes its readings in its member report, and every replica takes
// the pool's totals from the reports it reads at its sync, by one pure
// rule (agreeCapacity), before Rebalance:
//
//	poller VM ─▶ shared data (this proxy's readings)
//	                 │
//	sync ─▶ range <prefix>/<pool>/ ─▶ every member's readings + mine
//	        ─▶ agreeCapacity, agreeThroughput ─▶ C, K, X ─▶ Totals(C, K, X)
//	        ─▶ Rebalance ─▶ SetSliceOf ─▶ txn: my report (with my
//	        readings) if no member changed
//
// The rule: per engine address, the freshest observation in any report
// (a read or a failed read, the later of the two; ties to the member
// whose ID sorts first) counts when it is a read, of an engine awake,
// not older than capacity_from.expire before the newest report's time;
// C = Σ max_num_seqs × engine cores, K = Σ KV tokens over the engines
// that count; none: the configured capacity and kv_tokens. An engine
// read by only one replica counts at every replica, so a replica that
// has not yet served a request on a new engine does not hold C back.
// Engines "cluster" (a sidecar: one engine per proxy) are keyed by
// their replica's ID, so the fleet's C is the sum of the proxies'
// engines and a proxy's engine leaves with its report.
//
// A pool that declares throughput agrees on X the same way
// (agreeThroughput): every report carries, per engine, the throughput
// peak that replica measured (capacity.go's, decayed to the report's
// time); over the engines that count by the rule above, an engine's
// peak is the highest any report carries for it, decayed to the newest
// report's time (every replica measures its own peak from its own
// reads, and on one proxy a peak is the highest saturated rate seen:
// the highest of the replicas' is the peak one proxy that made all
// their reads would keep), and X = Σ peaks, over the engines counted
// that have one; none (or a sum below one cost unit per second): the
// configured throughput, as on one proxy. A report of a replica that
// does not carry peaks (an older plugin) gives its engines none.
//
// Why this agrees. A transaction writes a report only if no member's
// report changed since the range (the members' compare, cluster.go), so
// the reports a successful write leaves in etcd are exactly the ones
// its writer agreed from, its own included: any replica that reads that
// revision computes the same C and K. Replicas reading different
// revisions disagree for one sync at most, and Rebalance's growing into
// room only (fairshare/replicas.go) keeps Σ holds within the totals of
// the revision each replica read; when C falls, the replicas shrink at
// their next sync and requests in flight keep their standing, as on one
// proxy.
//
// A replica that cannot reach etcd decides against its last slice, of
// the last agreed totals, until its lease would have expired, then
// against fairshare.SafeSlice of those totals (cluster.go); it says so
// in its status (capacity_agreed.stale), in a warning and in the gauge
// capacity_stale.
//
// The record of a fleet pool is configured with fleetCeiling as its
// capacity (and K, X, if the pool has a KV or work resource): the core
// clamps a slice to the record's configured totals, and the agreed
// totals may exceed the configured ones when the engines scale up. The
// configured capacity, kv_tokens and throughput remain what the fleet
// decides against while no engine reading (no peak, for X) is fresh.
//
// A slice's work follows its sequences as a part of the agreed totals,
// not of the record's ceiling: the replica applies every slice with
// fairshare.SetSliceOf(the agreed totals, slice), which the record
// keeps, so a team's rate at a replica is ⌊W_t × s / R_t⌋ with W_t its
// share of the agreed X and R_t of the agreed C, and across the
// replicas the rates of a team add up to at most W_t (plus its loans)
// as its sequences add up to at most R_t.

// fleetCeilingC, fleetCeilingKV and fleetCeilingX are the configured
// totals of a fleet pool's record (see above): the most sum() and
// throughputSum ever return.
const (
	fleetCeilingC  = 1 << 20
	fleetCeilingKV = 1 << 40
	fleetCeilingX  = maxThroughput
)

// fleetPool reports whether pool p takes its capacity from the engines
// across the proxies of a cluster.
func (c *config) fleetPool(p *poolConfig) bool {
	return c.cluster != nil && p.capFrom != nil
}

// engineObs is one engine as one replica last observed it.
type engineObs struct {
	addr  string
	read  int64 // last successful read (unix ns; 0: never)
	fail  int64 // last failed read (unix ns; 0: never)
	cores int   // engine cores awake at the read (0: all asleep)
	seqs  int   // sequences per core (max_num_seqs)
	kv    int64 // KV tokens of the cores awake
	// peak is the engine's throughput peak as this replica measured it
	// (cost units per second, decayed to the report's time; 0: none).
	peak float64
}

// fleetReport is one member's readings as its report carries them.
type fleetReport struct {
	id      string
	at      int64 // when the member wrote the report (unix ns)
	engines []engineObs
}

// countedEngines returns the time of the newest report and, by the rule
// above, every engine's freshest observation that counts (sorted by
// address). It is a pure function of the reports: the order of reports
// and of their engines does not matter. Cost: O(reports × engines · log).
func countedEngines(expire time.Duration, reports []fleetReport) (ref int64, counted []engineObs) {
	rs := slices.Clone(reports)
	slices.SortFunc(rs, func(a, b fleetReport) int { return strings.Compare(a.id, b.id) })
	for _, r := range rs {
		ref = max(ref, r.at)
	}
	best := map[string]engineObs{}
	for _, r := range rs {
		for _, e := range r.engines {
			b, ok := best[e.addr]
			if !ok || max(e.read, e.fail) > max(b.read, b.fail) {
				best[e.addr] = e // later observation; a tie keeps the first ID's
			}
		}
	}
	for _, a := range slices.Sorted(maps.Keys(best)) {
		e := best[a]
		if e.read == 0 || e.fail > e.read || ref-e.read > int64(expire) || e.cores <= 0 {
			continue
		}
		counted = append(counted, e)
	}
	return ref, counted
}

// agreeCapacity returns C, K and the engine cores counted (0: none
// counts; the caller then uses the configuration) from the members'
// reports, by the rule above. It is a pure function of the reports:
// the order of reports and of their engines does not matter. Cost:
// O(reports × engines · log).
func agreeCapacity(expire time.Duration, reports []fleetReport) (c int, kv int64, n int) {
	_, counted := countedEngines(expire, reports)
	for _, e := range counted {
		n += e.cores
		c = min(c+max(e.seqs, 1)*e.cores, fleetCeilingC)
		kv = min(kv+max(e.kv, 0), fleetCeilingKV)
	}
	return c, kv, n
}

// agreeThroughput returns X and the engines whose peaks make it (0: no
// engine that counts has one, or their sum is below one cost unit per
// second; the caller then uses the configured throughput) from the
// members' reports, by the rule above: over the engines agreeCapacity
// counts, each engine's highest peak in any report, decayed from that
// report's time to the newest report's. It is a pure function of the
// reports, whatever their order. Cost: O(reports × engines · log).
func agreeThroughput(expire time.Duration, reports []fleetReport) (x int64, n int) {
	ref, counted := countedEngines(expire, reports)
	if len(counted) == 0 {
		return 0, 0
	}
	peaks := make(map[string]float64, len(counted))
	for _, e := range counted {
		peaks[e.addr] = 0
	}
	for _, r := range reports {
		for _, e := range r.engines {
			p, ok := peaks[e.addr]
			if !ok || !(e.peak > 0) {
				continue
			}
			if r.at < ref {
				e.peak *= math.Exp2(-float64(ref-r.at) / float64(throughputHalfLife))
			}
			peaks[e.addr] = max(p, e.peak)
		}
	}
	var total float64
	for _, e := range counted { // in address order: every replica sums alike
		if p := peaks[e.addr]; p > 0 {
			total += p
			n++
		}
	}
	if n == 0 || total < 1 {
		return 0, 0
	}
	return int64(min(math.Round(total), maxThroughput)), n
}

// ownReport is this replica's readings from its engine set (nil: never
// polled), at now: the engines observed within expire, engines
// "cluster"'s one engine keyed by the replica's ID.
func ownReport(now time.Time, replica string, cf *capacityFrom, s *engineSet) fleetReport {
	r := fleetReport{id: replica, at: now.UnixNano()}
	if s == nil {
		return r
	}
	for a, e := range s.engines {
		if last := max(e.read, e.fail); last == 0 || now.UnixNano()-last > int64(cf.expire) {
			continue
		}
		seqs := cf.maxNumSeqs
		if e.r.maxNumSeqs > 0 {
			seqs = e.r.maxNumSeqs
		}
		if a == localEngine {
			a = localEngine + "/" + replica
		}
		r.engines = append(r.engines, engineObs{addr: a, read: e.read, fail: e.fail, cores: e.r.cores, seqs: seqs, kv: e.r.kvTokens,
			peak: e.peakNow(r.at)})
	}
	slices.SortFunc(r.engines, func(a, b engineObs) int { return strings.Compare(a.addr, b.addr) })
	return r
}

// appendFleet appends a report's readings to a member report (which ends
// with its closing brace): ,"cap_at":ns,"engines":[[addr, read, fail,
// cores, seqs, kv], ...] and, when an engine has a throughput peak,
// ,"peaks":[peak, ...], one per engine in the order of "engines" (a
// field of its own, so that a replica that does not know it reads the
// engines as before).
func appendFleet(b []byte, r fleetReport) []byte {
	b = b[:len(b)-1]
	b = append(b, `,"cap_at":`...)
	b = strconv.AppendInt(b, r.at, 10)
	b = append(b, `,"engines":[`...)
	for i, e := range r.engines {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendJSONString(b, e.addr)
		for _, x := range []int64{e.read, e.fail, int64(e.cores), int64(e.seqs), e.kv} {
			b = append(b, ',')
			b = strconv.AppendInt(b, x, 10)
		}
		b = append(b, ']')
	}
	b = append(b, ']')
	if slices.ContainsFunc(r.engines, func(e engineObs) bool { return e.peak > 0 }) {
		b = append(b, `,"peaks":[`...)
		for i, e := range r.engines {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, max(e.peak, 0), 'g', -1, 64)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// decodeFleet reads a member report's readings (false: the report has
// none, as a proxy without capacity_from writes it). An engine's peak is
// 0 when the report carries none for it (no "peaks": a replica that does
// not publish them) or one that is not a number in [0, 2^40].
func decodeFleet(id string, b []byte) (fleetReport, bool) {
	if !gjson.ValidBytes(b) {
		return fleetReport{}, false
	}
	v := gjson.ParseBytes(b)
	at := v.Get("cap_at")
	if !at.Exists() {
		return fleetReport{}, false
	}
	r := fleetReport{id: id, at: at.Int()}
	peaks := v.Get("peaks").Array()
	for i, e := range v.Get("engines").Array() {
		f := e.Array()
		if len(f) != 6 || f[0].Type != gjson.String {
			continue
		}
		var peak float64
		if i < len(peaks) && peaks[i].Type == gjson.Number {
			if p := peaks[i].Float(); p > 0 && p <= maxThroughput {
				peak = p
			}
		}
		r.engines = append(r.engines, engineObs{addr: f[0].String(), read: f[1].Int(), fail: f[2].Int(),
			cores: int(min(max(f[3].Int(), 0), 1<<20)), seqs: int(min(max(f[4].Int(), 0), 1<<20)), kv: min(max(f[5].Int(), 0), fleetCeilingKV),
			peak: peak})
	}
	return r, true
}

// fleetTotals returns what the slices of ps divide when the fleet agreed
// on capacity c, kv tokens kv and throughput x: the pool's teams, c, kv
// (only if the pool has a KV resource) and x (only if it has a work
// resource), and every team's reservation in c and kv as the core
// apportions them (fleetTotalsOf; cached until c, kv or x change).
func fleetTotals(ps *poolState, c int, kv, x int64) fairshare.Totals {
	if ps.cfg.kvTokens == 0 {
		kv = 0
	}
	if ps.cfg.throughput == 0 {
		x = 0
	}
	if fc := &ps.fleet; fc.valid && fc.c == c && fc.kv == kv && fc.x == x {
		return fc.tot
	}
	tot := fleetTotalsOf(ps.cfg.name, ps.rec.cfg, c, kv, x)
	ps.fleet = fleetCache{valid: true, c: c, kv: kv, x: x, tot: tot}
	return tot
}

// fleetTotalsOf is the Totals of a scratch pool of the record's
// configuration cfg with capacity c, kv tokens kv and throughput x.
func fleetTotalsOf(name string, cfg fairshare.Config, c int, kv, x int64) fairshare.Totals {
	cfg.Capacity, cfg.KVTokens, cfg.Throughput = c, kv, x
	return fairshare.NewPool(name, cfg, time.Unix(0, 0)).Totals()
}

// fleetCache is a pool's last fleet totals (poolState.fleet).
type fleetCache struct {
	valid bool
	c     int
	kv    int64
	x     int64
	tot   fairshare.Totals
}

// agreed is what a fleet pool's totals were last agreed on, kept in the
// cluster state (poolSync) so that the VM that syncs next goes on with
// them.
type agreed struct {
	c     int   // C agreed (0: never agreed)
	kv    int64 // K agreed
	n     int   // engine cores counted (0: the configuration)
	x     int64 // X agreed (0: no work resource)
	xn    int   // engines whose peaks made X (0: the configured throughput)
	at    int64 // when (unix ns)
	stale bool  // the last sync could not reach etcd
}

// agree computes ps's totals from the member reports kvs (under the
// pool's prefix pre) and this replica's readings, records them in sync
// and returns them with this replica's readings to publish.
func (cs *clusterSync) agree(now time.Time, ps *poolState, sync *poolSync, pre string, kvs []etcdKV) (fairshare.Totals, fleetReport) {
	cf := ps.cfg.capFrom
	var set *engineSet
	if cs.pc.caps != nil {
		set = cs.pc.caps.loadEngines(ps)
	}
	mine := ownReport(now, cs.st.replica, cf, set)
	reports := []fleetReport{mine}
	members := 1
	for _, kv := range kvs {
		id, ok := strings.CutPrefix(kv.key, pre+"m/")
		if !ok || id == cs.st.replica {
			continue
		}
		members++
		if r, ok := decodeFleet(id, kv.value); ok {
			reports = append(reports, r)
		}
	}
	c, kv, n := agreeCapacity(cf.expire, reports)
	if n == 0 {
		c, kv = ps.cfg.capacity, ps.cfg.kvTokens
	}
	if ps.cfg.kvTokens == 0 {
		kv = 0
	}
	var x int64
	var xn int
	if ps.cfg.throughput > 0 {
		if x, xn = agreeThroughput(cf.expire, reports); xn == 0 {
			x = ps.cfg.throughput
		}
	}
	prev := sync.cap
	if prev.c != c || prev.kv != kv || prev.n == 0 != (n == 0) {
		src := "the configuration"
		if n > 0 {
			src = strconv.Itoa(n) + " engine cores across " + strconv.Itoa(members) + " replicas"
		}
		hostcalls.LogInfof("fairshare: pool %s: fleet capacity %d -> %d, kv_tokens %d -> %d (agreed from %s)", ps.cfg.name, prev.c, c, prev.kv, kv, src)
	}
	if ps.cfg.throughput > 0 && (prev.x != x || prev.xn == 0 != (xn == 0)) {
		src := "the configuration"
		if xn > 0 {
			src = "the peaks of " + strconv.Itoa(xn) + " engines across " + strconv.Itoa(members) + " replicas"
		}
		hostcalls.LogInfof("fairshare: pool %s: fleet throughput %d -> %d cost units/s (agreed from %s)", ps.cfg.name, prev.x, x, src)
	}
	if prev.stale {
		hostcalls.LogInfof("fairshare: pool %s: etcd reached again: the fleet's capacity is agreed anew", ps.cfg.name)
	}
	sync.cap = agreed{c: c, kv: kv, n: n, x: x, xn: xn, at: now.UnixNano()}
	cs.pc.met.poolGauge(ps.cfg.name, mCapacityAgreed, int64(c))
	cs.pc.met.poolGauge(ps.cfg.name, mCapacityEngines, int64(n))
	cs.pc.met.poolGauge(ps.cfg.name, mCapacityStale, 0)
	if ps.cfg.kvTokens > 0 {
		cs.pc.met.poolGauge(ps.cfg.name, mKVTokens, kv)
	}
	if ps.cfg.throughput > 0 {
		cs.pc.met.poolGauge(ps.cfg.name, mThroughput, x)
	}
	return fleetTotals(ps, c, kv, x), mine
}

// lastTotals is what ps's slices divide when this replica cannot agree
// anew: the totals last agreed, else the configured ones.
func (cs *clusterSync) lastTotals(ps *poolState, p *fairshare.Pool) fairshare.Totals {
	if !cs.pc.cfg.fleetPool(ps.cfg) {
		return p.Totals()
	}
	if s := cs.st.pools[ps.cfg.name]; s != nil && s.cap.c > 0 {
		x := s.cap.x
		if x == 0 {
			x = ps.cfg.throughput // agreed before the pool declared throughput
		}
		return fleetTotals(ps, s.cap.c, s.cap.kv, x)
	}
	return fleetTotals(ps, ps.cfg.capacity, ps.cfg.kvTokens, ps.cfg.throughput)
}

// setSlice makes s ps's slice in p: of the totals tot the fleet agreed
// on for a fleet pool (SetSliceOf: its work follows them, not the
// record's ceiling), of the record's configured totals otherwise.
func (cs *clusterSync) setSlice(ps *poolState, p *fairshare.Pool, tot fairshare.Totals, s *fairshare.Slice) {
	if cs.pc.cfg.fleetPool(ps.cfg) {
		p.SetSliceOf(tot, s)
		return
	}
	p.SetSlice(s)
}

// fleetStale marks every fleet pool's agreed totals as kept from before
// a sync that could not reach etcd: its status, a warning (once per
// outage) and the gauge capacity_stale say so.
func (cs *clusterSync) fleetStale(now time.Time) {
	if cs.st == nil {
		return
	}
	for _, ps := range cs.pc.pools {
		if !cs.pc.cfg.fleetPool(ps.cfg) {
			continue
		}
		s := cs.st.pools[ps.cfg.name]
		if s == nil {
			s = &poolSync{others: map[string]float64{}}
			cs.st.pools[ps.cfg.name] = s
		}
		if !s.cap.stale {
			s.cap.stale = true
			age := "never agreed: the configured capacity"
			if s.cap.at > 0 {
				age = "agreed " + now.Sub(time.Unix(0, s.cap.at)).Round(time.Millisecond).String() + " ago"
			}
			hostcalls.LogWarnf("fairshare: pool %s: etcd unreachable: keeping the last agreed fleet capacity %d, kv_tokens %d, throughput %d (%s) and this replica's slice of it", ps.cfg.name, s.cap.c, s.cap.kv, s.cap.x, age)
		}
		cs.pc.met.poolGauge(ps.cfg.name, mCapacityStale, 1)
	}
}

// fleetStatus is a fleet pool's part of the status document: the totals
// the fleet last agreed on, as the cluster state keeps them.
type fleetStatus struct {
	a agreed
}

// loadFleetStatus reads ps's agreed totals from the cluster state (nil
// when never synced).
func (pc *pluginContext) loadFleetStatus(ps *poolState) *fleetStatus {
	v, _, err := pc.rs.st.GetSharedData(clusterKey(pc.name))
	if err != nil {
		return nil
	}
	s, ok := decodeClusterState(v)
	if !ok {
		return nil
	}
	p := s.pools[ps.cfg.name]
	if p == nil || p.cap.at == 0 {
		return nil
	}
	return &fleetStatus{a: p.cap}
}

// append appends ,"capacity_agreed":{"capacity","kv_tokens"?,
// "engine_cores","throughput"?,"throughput_engines"?,"age_seconds",
// "stale"} (throughput with a work resource, work).
func (f *fleetStatus) append(b []byte, now time.Time, kv, work bool) []byte {
	b = append(b, `,"capacity_agreed":{"capacity":`...)
	b = strconv.AppendInt(b, int64(f.a.c), 10)
	if kv {
		b = appendIntField(b, "kv_tokens", int(f.a.kv))
	}
	b = appendIntField(b, "engine_cores", f.a.n)
	if work {
		b = appendIntField(b, "throughput", int(f.a.x))
		b = appendIntField(b, "throughput_engines", f.a.xn)
	}
	b = appendFloatField(b, "age_seconds", float64(now.UnixNano()-f.a.at)/1e9)
	b = append(b, `,"stale":`...)
	b = strconv.AppendBool(b, f.a.stale)
	return append(b, '}')
}

// checkFleet reports the capacity_from settings that cannot work with
// the cluster block: a reading reaches the other replicas in a report
// written at a sync, up to one sync interval after it was taken, and is
// judged against the newest report's time, so expire must cover the
// poll interval and the sync interval, or the replicas would count the
// engines that another replica read only now and then. The default (3
// intervals) holds whenever the interval is at least half the sync
// interval.
func checkFleet(ps *problems, c *config) {
	if c.cluster == nil {
		return
	}
	for i := range c.pools {
		cf := c.pools[i].capFrom
		if cf == nil {
			continue
		}
		if need := cf.interval + c.cluster.syncInterval; cf.expire < need {
			ps.add("pools["+strconv.Itoa(i)+"].capacity_from.expire",
				"must be at least interval + cluster.sync_interval (%s) with the cluster block: a replica's reading reaches the others one sync later, got %s (by default 3 × interval)", need, cf.expire)
		}
	}
}

// throughput is the X pool ps decides against, for its status and
// gauges: the record's, or for a fleet pool (whose record's X is a
// ceiling) the one the fleet last agreed on, the configured one before
// the first agreement; 0 without a work resource.
func (pc *pluginContext) throughput(ps *poolState) int64 {
	if !pc.cfg.fleetPool(ps.cfg) {
		return ps.rec.p.Throughput()
	}
	if ps.cfg.throughput == 0 {
		return 0
	}
	if f := pc.loadFleetStatus(ps); f != nil && f.a.x > 0 {
		return f.a.x
	}
	return ps.cfg.throughput
}
