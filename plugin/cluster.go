package plugin

import (
	"cmp"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"
)

// One pool across several proxies (the cluster block).
//
// Every proxy (an Envoy, a replica of the gateway) decides its requests
// against its slice of each pool, locally, in its own shared data, as a
// single proxy decides against the whole pool: nothing on the request
// path talks to etcd. One VM per proxy, the one that holds the cluster
// key of shared data (re-elected when it stops writing it for three sync
// intervals), syncs with etcd on its tick:
//
//	tick ─▶ lease keepalive (or grant) ─▶ for each pool:
//	          range <prefix>/<pool>/     every member's report and usage
//	          Rebalance (fairshare)      shrink now, usage = own + others
//	          txn if no member changed:  put my report (under my lease)
//	                                     and my usage contribution
//	          on success: apply the grown slice
//
// Keys: <prefix>/<pool>/m/<replica> is a member's report (team names,
// demand, applied slice, in flight), under the replica's lease, so it
// disappears when the replica stops keeping its lease alive;
// <prefix>/<pool>/u/<replica> is its usage contribution (every team's
// usage it charged, decayed to a time), kept without a lease so that
// usage outlives the replicas. A replica's own contribution is what its
// record holds beyond the others' contributions it last merged in.
//
// Departed replicas. A usage key whose member report is gone (the
// replica died, or was cut off past its lease) is folded by the next
// replica that syncs: in its transaction it adds the key's usage (decayed
// to now) to <prefix>/<pool>/departed and deletes the key, so keys do not
// pile up as replicas come and go under random names. Every replica
// counts departed among the others' contributions, so the sum is the
// same before and after a fold: no usage is lost. The transaction is
// serialized with every other sync by the members' compare (every sync
// writes its own member key), so a key is folded once, with the value
// last written. A replica that finds its own usage key folded (it was
// cut off, and comes back) subtracts what it last wrote, now in
// departed, from its own contribution, so nothing is counted twice.
//
// Loans: at every read the replica also puts into force every team's
// loan (fairshare.Loans): within-share room beyond its slice that only
// the team's own within-share requests take, while the team's demand
// across the pool (its own now, the others' as reported) leaves it
// below its reservation, and the tokens of up to two of the team's
// sequences while its within-share tokens across the pool are below its
// token reservation. A request is then within share when its team
// is within its reservation across the pool, whichever replica it
// reaches, and borrowers are held against the slice as before.
//
// Faults: a replica that cannot reach etcd keeps its slices until its
// lease would have expired (the last keepalive sent + TTL), then shrinks
// each to fairshare.SafeSlice and lends nothing; one that finds its
// report gone shrinks the same way until its new registration is
// written. A new replica starts with empty slices and the first loans
// (fairshare.FirstLoans: one within-share request per team that
// reserves any) until its first sync: a within-reservation team's first
// requests there run within share, borrowers wait (with flow control)
// or borrow.

// clusterState is what the syncing VM keeps in shared data, so that the
// VM elected after it goes on with the same replica ID, lease and usage
// bookkeeping.
type clusterState struct {
	leader  uint32 // holder of the syncing VM
	at      int64  // when it last wrote (unix ns)
	replica string
	lease   string // etcd lease ID ("": none)
	sent    int64  // when the last successful keepalive was sent (unix ns)
	pools   map[string]*poolSync
}

// poolSync is one pool's bookkeeping in the cluster state.
type poolSync struct {
	n        int                // members last seen
	othersAt int64              // others' usage decayed to this time (unix ns)
	others   map[string]float64 // the other replicas' usage merged into the record
	// restored: this replica's own contribution, as etcd kept it from
	// before a restart, is in the record (done once per cluster state).
	restored bool
	// mine is this replica's contribution as it last wrote it
	// (successfully) to etcd, decayed to mineAt (unix ns; 0: never
	// written): what a survivor folds into the departed key if this
	// replica's report disappears.
	mine   map[string]float64
	mineAt int64
	// pending is the contribution of the transaction under way.
	pending   map[string]float64
	pendingAt int64
	// cap is the totals the fleet last agreed on, for a pool whose
	// capacity comes from the engines (fleetcap.go).
	cap agreed
}

// departedKey is the key, under a pool's prefix, of the usage folded
// from the usage keys of departed replicas (outside u/, so that no
// replica name can collide with it).
const departedKey = "departed"

// clusterKey is the shared-data key of the cluster state.
func clusterKey(plugin string) string { return plugin + "/fairshare/cluster" }

func (s *clusterState) encode() []byte {
	b := []byte(`{"leader":`)
	b = strconv.AppendUint(b, uint64(s.leader), 10)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, s.at, 10)
	b = append(b, `,"replica":`...)
	b = appendJSONString(b, s.replica)
	b = append(b, `,"lease":`...)
	b = appendJSONString(b, s.lease)
	b = append(b, `,"sent":`...)
	b = strconv.AppendInt(b, s.sent, 10)
	b = append(b, `,"pools":{`...)
	names := make([]string, 0, len(s.pools))
	for n := range s.pools {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		ps := s.pools[n]
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, n)
		b = append(b, `:{"n":`...)
		b = strconv.AppendInt(b, int64(ps.n), 10)
		b = append(b, `,"at":`...)
		b = strconv.AppendInt(b, ps.othersAt, 10)
		b = append(b, `,"others":`...)
		b = appendUsage(b, ps.others)
		b = append(b, `,"restored":`...)
		b = strconv.AppendBool(b, ps.restored)
		b = append(b, `,"mine_at":`...)
		b = strconv.AppendInt(b, ps.mineAt, 10)
		b = append(b, `,"mine":`...)
		b = appendUsage(b, ps.mine)
		if ps.cap.at > 0 {
			b = append(b, `,"cap":[`...)
			for i, x := range []int64{int64(ps.cap.c), ps.cap.kv, int64(ps.cap.n), ps.cap.at} {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, x, 10)
			}
			b = append(b, ',')
			b = strconv.AppendBool(b, ps.cap.stale)
			b = append(b, ']')
			if ps.cap.x > 0 {
				// Apart from "cap", so that a VM that does not know it
				// reads "cap" as before.
				b = append(b, `,"work":[`...)
				b = strconv.AppendInt(b, ps.cap.x, 10)
				b = append(b, ',')
				b = strconv.AppendInt(b, int64(ps.cap.xn), 10)
				b = append(b, ']')
			}
		}
		b = append(b, '}')
	}
	return append(b, `}}`...)
}

// appendUsage appends usage as a JSON object, teams sorted.
func appendUsage(b []byte, u map[string]float64) []byte {
	teams := make([]string, 0, len(u))
	for t := range u {
		teams = append(teams, t)
	}
	slices.Sort(teams)
	b = append(b, '{')
	for i, t := range teams {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t)
		b = append(b, ':')
		b = strconv.AppendFloat(b, u[t], 'g', -1, 64)
	}
	return append(b, '}')
}

func parseUsage(r gjson.Result) map[string]float64 {
	u := map[string]float64{}
	r.ForEach(func(k, v gjson.Result) bool {
		if x := v.Float(); x >= 0 && !math.IsInf(x, 0) {
			u[k.String()] = x
		}
		return true
	})
	return u
}

func decodeClusterState(b []byte) (*clusterState, bool) {
	if !gjson.ValidBytes(b) {
		return nil, false
	}
	r := gjson.ParseBytes(b)
	s := &clusterState{leader: uint32(r.Get("leader").Uint()), at: r.Get("at").Int(), replica: r.Get("replica").String(),
		lease: r.Get("lease").String(), sent: r.Get("sent").Int(), pools: map[string]*poolSync{}}
	r.Get("pools").ForEach(func(k, v gjson.Result) bool {
		ps := &poolSync{n: int(v.Get("n").Int()), othersAt: v.Get("at").Int(), others: parseUsage(v.Get("others")),
			restored: v.Get("restored").Bool(), mine: parseUsage(v.Get("mine")), mineAt: v.Get("mine_at").Int()}
		if c := v.Get("cap").Array(); len(c) == 5 {
			ps.cap = agreed{c: int(c[0].Int()), kv: c[1].Int(), n: int(c[2].Int()), at: c[3].Int(), stale: c[4].Bool()}
			if w := v.Get("work").Array(); len(w) == 2 {
				ps.cap.x, ps.cap.xn = min(max(w[0].Int(), 0), maxThroughput), int(max(w[1].Int(), 0))
			}
		}
		s.pools[k.String()] = ps
		return true
	})
	return s, s.replica != ""
}

// appendVec appends a slice as [capacity, tokens, reserved..., reserved tokens...].
func appendVec(b []byte, s fairshare.Slice) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(s.Capacity), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, s.KVTokens, 10)
	for _, x := range s.Reserved {
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(x), 10)
	}
	for _, x := range s.ReservedTokens {
		b = append(b, ',')
		b = strconv.AppendInt(b, x, 10)
	}
	return append(b, ']')
}

// encodeMember is a member's report as stored in etcd.
func encodeMember(teams []string, demand []int, applied, used fairshare.Slice) []byte {
	b := []byte(`{"teams":[`)
	for i, t := range teams {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t)
	}
	b = append(b, `],"demand":[`...)
	for i, d := range demand {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(d), 10)
	}
	b = append(b, `],"applied":`...)
	b = appendVec(b, applied)
	b = append(b, `,"used":`...)
	b = appendVec(b, used)
	return append(b, '}')
}

// decodeMember reads a member's report for the teams of this proxy's
// configuration: a team the report does not name counts 0 (a proxy on
// another configuration, during a rollout).
func decodeMember(id string, b []byte, teams []string) (fairshare.Member, bool) {
	if !gjson.ValidBytes(b) {
		return fairshare.Member{}, false
	}
	r := gjson.ParseBytes(b)
	var theirs []string
	for _, t := range r.Get("teams").Array() {
		theirs = append(theirs, t.String())
	}
	n := len(theirs)
	dem := r.Get("demand").Array()
	app := r.Get("applied").Array()
	use := r.Get("used").Array()
	if len(dem) != n || len(app) != 2+2*n || len(use) != 2+2*n {
		return fairshare.Member{}, false
	}
	T := len(teams)
	m := fairshare.Member{ID: id, Demand: make([]int, T),
		Applied: fairshare.Slice{Capacity: int(app[0].Int()), KVTokens: app[1].Int(), Reserved: make([]int, T), ReservedTokens: make([]int64, T)},
		Used:    fairshare.Slice{Capacity: int(use[0].Int()), KVTokens: use[1].Int(), Reserved: make([]int, T), ReservedTokens: make([]int64, T)}}
	for i, t := range teams {
		j := slices.Index(theirs, t)
		if j < 0 {
			continue
		}
		m.Demand[i] = int(dem[j].Int())
		m.Applied.Reserved[i], m.Applied.ReservedTokens[i] = int(app[2+j].Int()), app[2+n+j].Int()
		m.Used.Reserved[i], m.Used.ReservedTokens[i] = int(use[2+j].Int()), use[2+n+j].Int()
	}
	return m, true
}

// etcdCaller sends one call to etcd and hands its answer (HTTP status,
// body; status 0 when the call failed) to done, later.
type etcdCaller func(path string, body []byte, done func(status int, body []byte)) error

// hostEtcdCaller calls etcd with proxy_http_call.
func hostEtcdCaller(cfg *clusterConfig) etcdCaller {
	return func(path string, body []byte, done func(int, []byte)) error {
		hdrs := [][2]string{{":method", "POST"}, {":path", path}, {":authority", cfg.authority}, {"content-type", "application/json"}}
		if cfg.auth != "" {
			hdrs = append(hdrs, [2]string{"authorization", cfg.auth})
		}
		_, err := hostcalls.DispatchHttpCall(cfg.etcd, hdrs, body, nil, uint32(cfg.timeout/time.Millisecond),
			func(numHeaders, bodySize, _ int) {
				if numHeaders == 0 {
					done(0, nil)
					return
				}
				status := 0
				if h, err := hostcalls.GetHttpCallResponseHeaders(); err == nil {
					for _, kv := range h {
						if kv[0] == ":status" {
							status, _ = strconv.Atoi(kv[1])
						}
					}
				}
				var b []byte
				if bodySize > 0 {
					b, _ = hostcalls.GetHttpCallResponseBody(0, bodySize)
				}
				done(status, b)
			})
		return err
	}
}

// clusterSync is a VM's side of the cluster: the election, and, in the
// elected VM, the sync with etcd.
type clusterSync struct {
	pc       *pluginContext
	cfg      *clusterConfig
	call     etcdCaller
	now      func() time.Time
	st       *clusterState // loaded while this VM syncs
	lastTick time.Time
	busy     bool // a chain of calls is under way
	busyAt   time.Time
}

// leaderStale is how many sync intervals the syncing VM may go without
// writing the cluster state before another VM takes over.
const leaderStale = 3

// tick runs on every tick of every VM: at each sync interval it holds
// the election and, in the elected VM, starts a sync.
func (cs *clusterSync) tick(now time.Time) {
	if now.Sub(cs.lastTick) < cs.cfg.syncInterval-cs.cfg.syncInterval/8 {
		return
	}
	cs.lastTick = now
	if cs.busy && now.Sub(cs.busyAt) < 4*cs.cfg.timeout+cs.cfg.syncInterval {
		return // the last sync is still waiting for etcd
	}
	cs.busy = false
	if !cs.elect(now) {
		return
	}
	st := cs.st
	if st.sent > 0 && now.UnixNano() >= st.sent+int64(cs.cfg.leaseTTL) {
		cs.shrinkAll(now) // the lease would have expired: etcd may have given our slices away
	}
	cs.busy, cs.busyAt = true, now
	sent := now.UnixNano()
	if st.lease == "" {
		cs.grant(sent)
		return
	}
	err := cs.call(etcdKeepAlive, keepAliveBody(st.lease), func(status int, body []byte) {
		if cs.st != st {
			return
		}
		ttl, err := parseKeepAlive(body)
		switch {
		case status != 200 || err != nil:
			cs.fail("keepalive", status, err)
		case ttl <= 0:
			// The lease expired: our reports are gone and others may hold
			// our slices; shrink, then register anew.
			st.lease = ""
			cs.shrinkAll(cs.now())
			cs.grant(sent)
		default:
			st.sent = sent
			cs.syncPool(0, 0)
		}
	})
	if err != nil {
		cs.fail("keepalive", 0, err)
	}
}

// grant asks etcd for a new lease, then syncs the pools.
func (cs *clusterSync) grant(sent int64) {
	st := cs.st
	err := cs.call(etcdLeaseGrant, leaseGrantBody(int64(cs.cfg.leaseTTL/time.Second)), func(status int, body []byte) {
		if cs.st != st {
			return
		}
		id, err := parseGrant(body)
		if status != 200 || err != nil {
			cs.fail("lease grant", status, err)
			return
		}
		st.lease, st.sent = id, sent
		cs.syncPool(0, 0)
	})
	if err != nil {
		cs.fail("lease grant", 0, err)
	}
}

// fail ends a sync that could not reach etcd.
func (cs *clusterSync) fail(what string, status int, err error) {
	cs.busy = false
	cs.pc.met.pluginCounter(mClusterFailures, 1)
	if err != nil {
		hostcalls.LogWarnf("fairshare: cluster: %s: %v", what, err)
	} else {
		hostcalls.LogWarnf("fairshare: cluster: %s: HTTP %d", what, status)
	}
	cs.fleetStale(cs.now())
	cs.save(cs.now())
}

// poolPrefix is the etcd prefix of a pool's keys.
func (cs *clusterSync) poolPrefix(pool string) string {
	return cs.cfg.prefix + "/" + pool + "/"
}

// maxTxnAttempts bounds the transactions of one pool in one sync (a
// failed compare is followed at once by a new read).
const maxTxnAttempts = 3

// syncPool reads pool i's members, rebalances and writes this replica's
// report; then the next pool. attempt counts the failed transactions.
func (cs *clusterSync) syncPool(i, attempt int) {
	st := cs.st
	if i >= len(cs.pc.pools) {
		cs.busy = false
		cs.save(cs.now())
		return
	}
	ps := cs.pc.pools[i]
	pre := cs.poolPrefix(ps.cfg.name)
	err := cs.call(etcdRange, rangeBody(pre, prefixEnd(pre)), func(status int, body []byte) {
		if cs.st != st {
			return
		}
		rev, kvs, err := parseRange(body)
		if status != 200 || err != nil {
			cs.fail("range "+pre, status, err)
			return
		}
		tot, next, puts, ok := cs.rebalance(ps, kvs)
		if !ok {
			cs.syncPool(i+1, 0)
			return
		}
		err = cs.call(etcdTxn, txnBody(pre+"m/", prefixEnd(pre+"m/"), rev, puts), func(status int, body []byte) {
			if cs.st != st {
				return
			}
			done, err := parseTxn(body)
			switch {
			case status != 200 || err != nil:
				cs.fail("txn "+pre, status, err)
			case done:
				if sync := st.pools[ps.cfg.name]; sync != nil {
					sync.mine, sync.mineAt = sync.pending, sync.pendingAt
				}
				cs.apply(ps, tot, next)
				cs.pc.met.pluginCounter(mClusterSyncs, 1)
				cs.syncPool(i+1, 0)
			case attempt+1 < maxTxnAttempts:
				cs.pc.met.pluginCounter(mClusterConflicts, 1)
				cs.syncPool(i, attempt+1)
			default:
				cs.pc.met.pluginCounter(mClusterConflicts, 1)
				cs.syncPool(i+1, 0)
			}
		})
		if err != nil {
			cs.fail("txn "+pre, 0, err)
		}
	})
	if err != nil {
		cs.fail("range "+pre, 0, err)
	}
}

// rebalance computes this replica's slice of ps from the members read
// (kvs), shrinks the record's slice at once where it must shrink, merges
// the others' usage into the record, and returns the slice to apply once
// the report is written and the totals it is a slice of, with the puts
// that write it.
func (cs *clusterSync) rebalance(ps *poolState, kvs []etcdKV) (fairshare.Totals, fairshare.Slice, []etcdPut, bool) {
	st := cs.st
	now := cs.now()
	pre := cs.poolPrefix(ps.cfg.name)
	sync := st.pools[ps.cfg.name]
	if sync == nil {
		sync = &poolSync{others: map[string]float64{}}
		st.pools[ps.cfg.name] = sync
	}
	hl := cs.pc.cfg.halfLife
	var members []fairshare.Member
	var reports, mine []fairshare.UsageReport
	var fold []string   // usage keys of departed replicas
	foldedMine := false // our own usage key was folded: corrected once
	var teams []string
	var next fairshare.Slice
	var put []etcdPut
	registered := false
	newOthers := map[string]float64{}
	fleet := cs.pc.cfg.fleetPool(ps.cfg)
	var fleetTot, tot fairshare.Totals
	var readings fleetReport
	if fleet {
		fleetTot, readings = cs.agree(now, ps, sync, pre, kvs)
	}
	err := cs.pc.updatePool(now, ps, "cluster rebalance", func(p *fairshare.Pool) {
		tot = fleetTot
		if !fleet {
			tot = p.Totals()
		}
		teams = tot.Teams
		members, reports, mine, fold, registered = members[:0], reports[:0], mine[:0], fold[:0], false
		live := map[string]bool{}
		var usageKeys []fairshare.UsageReport
		for _, kv := range kvs {
			if id, ok := strings.CutPrefix(kv.key, pre+"m/"); ok {
				live[id] = true
			}
		}
		ownKey := false
		for _, kv := range kvs {
			id, ok := strings.CutPrefix(kv.key, pre+"m/")
			if ok {
				if id == st.replica {
					registered = true
					continue
				}
				if m, ok := decodeMember(id, kv.value, teams); ok {
					members = append(members, m)
				}
				continue
			}
			id, ok = strings.CutPrefix(kv.key, pre+"u/")
			if !ok && kv.key == pre+departedKey {
				id, ok = departedKey, true
			}
			if ok && gjson.ValidBytes(kv.value) {
				r := gjson.ParseBytes(kv.value)
				rep := fairshare.UsageReport{ID: id, At: time.Unix(0, r.Get("at").Int()), Usage: parseUsage(r.Get("usage"))}
				switch {
				case kv.key == pre+departedKey:
					reports = append(reports, rep)
					usageKeys = append(usageKeys, rep)
				case id == st.replica:
					ownKey = true
					if !sync.restored {
						mine = append(mine, rep)
					}
				default:
					reports = append(reports, rep)
					if !live[id] {
						// Its replica is gone: fold it into departed.
						usageKeys = append(usageKeys, rep)
						fold = append(fold, id)
					}
				}
			}
		}
		applied, _ := p.Slice()
		if !registered {
			// Our report is gone (or was never written): decide against
			// the safe slice until the new one is in.
			safe := fairshare.SafeSlice(tot, cs.cfg.safeFraction, max(sync.n, len(members)+1), applied)
			applied = fairshare.MinSlice(applied, safe, len(teams))
		}
		demand, used := p.Report()
		if !cs.pc.cfg.holding() {
			// Without flow control borrowers go whatever the slice's
			// capacity (as on one proxy, the engine preempts them): only
			// the reservations bound what a replica runs, so its requests
			// beyond its capacity hold nothing back from the others.
			used.Capacity = min(used.Capacity, applied.Capacity)
			used.KVTokens = min(used.KVTokens, applied.KVTokens)
		}
		self := fairshare.Member{ID: st.replica, Demand: demand, Applied: applied, Used: used}
		all := append(slices.Clone(members), self)
		fairshare.SortMembers(all)
		k := slices.IndexFunc(all, func(m fairshare.Member) bool { return m.ID == st.replica })
		_, next = fairshare.Rebalance(tot, all, k)
		shrunk := fairshare.MinSlice(applied, next, len(teams))
		cs.setSlice(ps, p, tot, &shrunk)
		// The loans go into force at once: they add nothing another
		// replica grows into (fairshare.Loans). None while our report is
		// gone: we decide against the safe slice alone.
		lent, lentTok := fairshare.Loans(tot, all, k)
		if !registered {
			lent, lentTok = nil, nil
		}
		p.SetLoans(lent, lentTok)
		// Usage: ours is what the record holds beyond the others' last
		// merged; the record then holds ours plus the others' now.
		cur, _ := p.Usage(now)
		// Users' usage (fairshare.UserKey) is summed across replicas the
		// same way, so that a team's users rank on their usage in the
		// whole pool: the syncedUsers heaviest of every team (see
		// topUsers).
		maps.Copy(cur, topUsers(p.UserUsage(now), syncedUsers))
		decay := 1.0
		if dt := now.UnixNano() - sync.othersAt; hl > 0 && dt > 0 && sync.othersAt > 0 {
			decay = math.Exp(-math.Ln2 * float64(dt) / float64(hl))
		}
		clear(newOthers)
		for t, x := range fairshare.SumUsage(now, hl, reports) {
			newOthers[t] = x
		}
		// After a restart of this replica, its contribution from before
		// (kept in etcd under its name) is its own again.
		before := fairshare.SumUsage(now, hl, mine)
		// Our usage key folded into departed while we were cut off: what
		// we last wrote is counted there now.
		var folded map[string]float64
		foldedMine = !ownKey && sync.mineAt > 0
		if foldedMine {
			folded = fairshare.SumUsage(now, hl, []fairshare.UsageReport{{ID: st.replica, At: time.Unix(0, sync.mineAt), Usage: sync.mine}})
		}
		own := map[string]float64{}
		for t, x := range cur {
			own[t] = max(x+before[t]-sync.others[t]*decay-folded[t], 0)
			if x := own[t] + newOthers[t]; x != cur[t] {
				if team, user, ok := fairshare.SplitUserKey(t); ok {
					p.SetUserUsage(now, team, user, x)
				} else {
					p.SetUsage(now, t, x)
				}
			}
		}
		// A user only the others have seen joins our record with their
		// usage while its team has room; one that does not is not
		// merged, so its usage is not subtracted from ours next time.
		for t, x := range newOthers {
			if team, user, ok := fairshare.SplitUserKey(t); ok && !hasKey(cur, t) && !p.SetUserUsage(now, team, user, x) {
				delete(newOthers, t)
			}
		}
		usage := appendUsage([]byte(`{"at":`+strconv.FormatInt(now.UnixNano(), 10)+`,"usage":`), own)
		usage = append(usage, '}')
		// The report carries the slice in force once the write is in.
		report := encodeMember(teams, demand, next, used)
		if fleet {
			report = appendFleet(report, readings)
		}
		put = []etcdPut{
			{key: pre + "m/" + st.replica, value: report, lease: st.lease},
			{key: pre + "u/" + st.replica, value: usage},
		}
		sync.pending, sync.pendingAt = own, now.UnixNano()
		if len(fold) > 0 {
			dep := appendUsage([]byte(`{"at":`+strconv.FormatInt(now.UnixNano(), 10)+`,"usage":`), fairshare.SumUsage(now, hl, usageKeys))
			put = append(put, etcdPut{key: pre + departedKey, value: append(dep, '}')})
			for _, id := range fold {
				put = append(put, etcdPut{key: pre + "u/" + id, del: true})
			}
		}
	})
	if err != nil {
		return tot, next, nil, false
	}
	sync.n = len(members) + 1
	sync.others, sync.othersAt = newOthers, now.UnixNano()
	if foldedMine {
		// The record now counts what we last wrote among the others (in
		// departed): a retry after a lost transaction must not subtract
		// it again.
		sync.mine, sync.mineAt = nil, 0
	}
	sync.restored = true
	return tot, next, put, true
}

// apply makes next, a slice of tot, the pool's slice (its report with
// next is written).
func (cs *clusterSync) apply(ps *poolState, tot fairshare.Totals, next fairshare.Slice) {
	now := cs.now()
	_ = cs.pc.updatePool(now, ps, "cluster apply slice", func(p *fairshare.Pool) { cs.setSlice(ps, p, tot, &next) })
}

// shrinkAll shrinks every pool's slice to its safe slice.
func (cs *clusterSync) shrinkAll(now time.Time) {
	for _, ps := range cs.pc.pools {
		n := 1
		if s := cs.st.pools[ps.cfg.name]; s != nil {
			n = max(s.n, 1)
		}
		_ = cs.pc.updatePool(now, ps, "cluster shrink", func(p *fairshare.Pool) {
			applied, _ := p.Slice()
			tot := cs.lastTotals(ps, p)
			safe := fairshare.SafeSlice(tot, cs.cfg.safeFraction, n, applied)
			cs.setSlice(ps, p, tot, &safe)
			p.SetLoans(nil, nil)
		})
	}
}

// elect reports whether this VM syncs: it holds the cluster key of shared
// data, or takes it from a VM that stopped writing it.
func (cs *clusterSync) elect(now time.Time) bool {
	key := clusterKey(cs.pc.name)
	st := cs.pc.rs.st
	v, cas, err := st.GetSharedData(key)
	switch {
	case errors.Is(err, types.ErrorStatusNotFound):
		s := &clusterState{leader: cs.pc.holder, at: now.UnixNano(), replica: cs.cfg.replica, pools: map[string]*poolSync{}}
		if s.replica == "" {
			s.replica = strconv.FormatUint(hostcalls.RandomUint64(), 16)
		}
		created, err := cs.pc.rs.createIfAbsent(key, s.encode())
		if err != nil || !created {
			return false
		}
		cs.st = s
		return true
	case err != nil:
		return false
	}
	s, ok := decodeClusterState(v)
	if !ok {
		s = &clusterState{replica: cs.cfg.replica, pools: map[string]*poolSync{}}
		if s.replica == "" {
			s.replica = strconv.FormatUint(hostcalls.RandomUint64(), 16)
		}
	}
	if s.leader == cs.pc.holder && cs.st != nil {
		return true
	}
	if s.leader != cs.pc.holder && now.UnixNano()-s.at < leaderStale*int64(cs.cfg.syncInterval) {
		cs.st = nil
		return false
	}
	s.leader, s.at = cs.pc.holder, now.UnixNano()
	if cs.cfg.replica != "" {
		s.replica = cs.cfg.replica
	}
	if err := st.SetSharedData(key, s.encode(), cas); err != nil {
		cs.st = nil
		return false
	}
	cs.st = s
	return true
}

// save writes the cluster state; losing the key to another VM ends this
// VM's syncing.
func (cs *clusterSync) save(now time.Time) {
	if cs.st == nil {
		return
	}
	key := clusterKey(cs.pc.name)
	v, cas, err := cs.pc.rs.st.GetSharedData(key)
	if err != nil {
		return
	}
	if s, ok := decodeClusterState(v); ok && s.leader != cs.pc.holder {
		cs.st = nil
		return
	}
	cs.st.at = now.UnixNano()
	if err := cs.pc.rs.st.SetSharedData(key, cs.st.encode(), cas); err != nil {
		cs.st = nil
	}
}

// syncedUsers is how many users of a team a replica publishes and
// merges the usage of at every sync (topUsers): the heaviest, whose
// standing the pool's other replicas must see; a lighter user ranks on
// its usage at each replica, which can only rank it better than the
// heavy ones it would rank before anyway. It bounds the usage key a
// replica writes at every sync: 35 bytes per user of a 10-byte name,
// 3,329 bytes for 32 users of each of three teams
// (TestClusterUsersSynced).
const syncedUsers = 32

// topUsers returns the n users of largest usage of every team among u
// (keys fairshare.UserKey; ties to the smaller key).
func topUsers(u map[string]float64, n int) map[string]float64 {
	byTeam := map[string][]string{}
	for k := range u {
		if team, _, ok := fairshare.SplitUserKey(k); ok {
			byTeam[team] = append(byTeam[team], k)
		}
	}
	out := make(map[string]float64, min(len(u), n*len(byTeam)))
	for _, keys := range byTeam {
		slices.SortFunc(keys, func(a, b string) int {
			if c := cmp.Compare(u[b], u[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, k := range keys[:min(n, len(keys))] {
			out[k] = u[k]
		}
	}
	return out
}

// hasKey reports whether m has key k.
func hasKey(m map[string]float64, k string) bool {
	_, ok := m[k]
	return ok
}
