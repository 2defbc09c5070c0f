package plugin

import (
	"crypto/subtle"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"
)

// serveStatus answers the status endpoint with a local reply.
func (h *httpContext) serveStatus(method string) types.Action {
	pc := h.pc
	h.state = stDone
	if method != "GET" && method != "HEAD" {
		return h.reply(errStatusVerb, "")
	}
	switch {
	case pc.cfg.statusToken != "":
		if !bearer(pc.cfg.statusToken) {
			return h.reply(errStatusAuth, "")
		}
	case !pc.cfg.statusPublic:
		return h.reply(errStatusOff, "")
	}
	now := time.Now()
	pools := make([]poolStatus, 0, len(pc.pools))
	for _, ps := range pc.pools {
		if ps.eng.mode == engineAuto && !ps.eng.off && pc.engineMarked(ps) {
			ps.eng.off = true // another VM saw the refusal
		}
		st := poolStatus{name: ps.cfg.name, capacity: ps.cfg.capacity, models: ps.cfg.models,
			engine: ps.eng.mode.String(), engineInForce: ps.engineInForce(), spill: pc.spillStatusOf(ps)}
		if _, err := pc.rs.load(now, ps.rec); err != nil {
			st.err = err.Error()
		} else {
			st.capacity = ps.rec.p.Capacity()
			st.kv = ps.rec.p.KVTokens()
			st.throughput = pc.throughput(ps)
			if ps.rec.p.Sliced() {
				st.whole = ps.cfg.capacity
			}
			if pc.cfg.fleetPool(ps.cfg) {
				// The record's totals are a ceiling; the fleet's are the
				// ones it agreed on (fleetcap.go).
				st.kv = ps.cfg.kvTokens
				if st.fleet = pc.loadFleetStatus(ps); st.fleet != nil {
					st.whole = max(st.fleet.a.c, 1)
					if st.kv > 0 {
						st.kv = st.fleet.a.kv
					}
				}
			}
			st.teams = ps.rec.p.Snapshot(now)
			st.users, st.listUsers = pc.cfg.userHeader != "", pc.cfg.statusUsers
			for i := range st.teams {
				st.inFlight += st.teams[i].InFlight + st.teams[i].Phantoms
			}
		}
		if ps.cfg.capFrom != nil && pc.caps != nil {
			st.caps = &capacityStatus{cf: ps.cfg.capFrom, set: pc.caps.loadEngines(ps), work: ps.cfg.throughput > 0}
			if pc.cfg.fleetPool(ps.cfg) {
				// X's source is the fleet's agreement, not this proxy's
				// readings alone.
				st.caps.fleetX = &agreed{}
				if st.fleet != nil {
					st.caps.fleetX = &st.fleet.a
				}
			}
		}
		pools = append(pools, st)
	}
	body := appendStatus(nil, now, pc.holder, pools)
	body = appendMode(body, &pc.cfg)
	hdrs := [][2]string{{"content-type", "application/json"}, {"cache-control", "no-store"}}
	if err := hostcalls.SendHttpResponse(200, hdrs, body, -1); err != nil {
		hostcalls.LogErrorf("fairshare: status reply: %v", err)
	}
	return types.ActionPause
}

// bearer reports whether the request's authorization header is "Bearer
// <token>", the scheme in any case (RFC 7235 §2.1), the token compared in
// constant time.
func bearer(token string) bool {
	auth, _ := hostcalls.GetHttpRequestHeader("authorization")
	const scheme = "bearer "
	if len(auth) < len(scheme) || !strings.EqualFold(auth[:len(scheme)], scheme) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(auth[len(scheme):])), []byte(token)) == 1
}

// poolStatus is one pool of the status snapshot.
type poolStatus struct {
	name     string
	capacity int
	models   []string
	inFlight int // requests in flight, phantoms included
	// whole is the pool's configured capacity when this proxy decides
	// against a slice of it (the cluster block); 0 otherwise.
	whole int
	// engine and engineInForce are engine_priority as configured and as
	// this VM applies it ("on" or "off").
	engine, engineInForce string
	teams                 []fairshare.TeamStat
	err                   string       // the record could not be read
	spill                 *spillStatus // spill-over to and from the pool (spill.go)
	// kv is the live K (0: no KV resource); caps, for a pool with
	// capacity_from, its engines as the poller last wrote them.
	kv   int64
	caps *capacityStatus
	// throughput is the pool's work capacity X in cost units per second
	// (0: no work resource, the pool field throughput).
	throughput int64
	// fleet, for a pool with capacity_from and the cluster block, is
	// the totals the fleet last agreed on (nil: never synced).
	fleet *fleetStatus
	// users is the user level (user_header; false: no user field
	// written), listUsers how many users of each team to list
	// (status_users).
	users     bool
	listUsers int
}

// appendMode adds the plugin's mode to the status document b (which ends
// with its closing brace): "mode" ("enforce" or "shadow") and
// "shadow_strip_priority", whether a client's priority is removed in
// shadow mode.
func appendMode(b []byte, c *config) []byte {
	b = b[:len(b)-1]
	mode := modeEnforce
	if c.shadow {
		mode = modeShadow
	}
	b = append(b, `,"mode":"`...)
	b = append(b, mode...)
	b = append(b, `","shadow_strip_priority":`...)
	b = strconv.AppendBool(b, c.shadowStrip)
	return append(b, '}')
}

// appendStatus appends the JSON status document, in the spirit of Kueue's
// status.fairSharing:
//
//	{"time": RFC 3339, "holder": "hex id of the answering VM",
//	 "pools": [{"name", "capacity", "pool_capacity"?, "models", "in_flight",
//	   "engine_priority", "engine_priority_in_force", "spill_to"?,
//	   "spilled_to"?, "spilled_in"?, "error"?,
//	   "kv_tokens"?, "throughput"?, "capacity_source"?,
//	   "throughput_source"?, "engines"?,
//	   "capacity_agreed"?,
//	   "teams": [{"team", "share", "normalized_share", "weight",
//	     "weighted_share", "reserved", "lent"?, "in_flight", "borrowing",
//	     "phantoms", "in_flight_estimate", "usage", "level_fairshare",
//	     "rank", "waiting", "oldest_wait_seconds", "reserved_tokens"?,
//	     "in_flight_tokens"?, "reserved_work"?, "work_debt"?, "work_burst"?,
//	     "active_users"?, "over"?, "user_entries"?, "users"?,
//	     "last_update"}]}]}
//
// pool_capacity is present when the proxy shares the pool with others
// (the cluster block): capacity and every team's reserved are then this
// proxy's slice, pool_capacity the whole pool's capacity, and lent is
// every team's loan at this proxy (fairshare.Loans: within-share
// requests it may run beyond reserved while the team is below its
// reservation across the pool).
// engine_priority is the pool's configured "auto", "on" or "off";
// engine_priority_in_force is "on" while the plugin writes priorities for
// the pool and "off" once it does not (mode off, or auto after the
// engine refused one).
// kv_tokens (the live K) is present when the pool has a KV resource.
// throughput (X, cost units per second) is present when the pool has a
// work resource, and with it every team's reserved_work (its share of X,
// plus its loan at this proxy, in cost units per second: the rate its
// work bucket refills at), work_debt (the within-share work it was
// granted and has not yet paid for at that rate, cost units) and
// work_burst (the bucket's depth, throughput_burst × reserved_work: the
// team's requests run within share while work_debt leaves room below
// it).
// capacity_source and engines are present for a pool with capacity_from:
// capacity_source "engines (N)" when C and K are the sum of N engines'
// readings, "config" when no engine could be read (the configured
// values); engines lists every engine the poller knows (capacityStatus).
// throughput_source is present for a pool with capacity_from and
// throughput: "engines (N)" when X is the sum of N engines' throughput
// peaks (with the cluster block, the peaks the replicas agreed on, N
// engines across the fleet), "config" while no engine has one (the
// configured throughput); each engine then carries its throughput peak
// as this proxy measured it (cost units per second, decayed to now; 0:
// none yet).
// capacity_agreed is present for a pool with capacity_from and the
// cluster block once this proxy synced: the capacity (and kv_tokens,
// and with throughput the throughput and throughput_engines, the
// engines whose peaks made it) the fleet agreed on from every replica's
// readings, the engine cores counted (0: the configured values), the
// age of the agreement, and stale, true while the last sync could not
// reach etcd and the replica keeps the last agreed totals;
// pool_capacity, kv_tokens and throughput are then the agreed ones.
// spill_to, spilled_to (requests moved to each fallback) and spilled_in
// (requests moved here from other pools), counted on every VM of this
// proxy, are present when the pool spills or is a fallback (spill.go).
// active_users, over, user_entries and users are present with the user
// level (user_header): the team's users that count in its division now,
// its over requests in flight (counted in borrowing too), its user
// entries, and the first status_users of them by standing (rank, then
// larger usage, then name), each {"user", "share", "usage",
// "level_fairshare" (null when infinite, 0 when inactive), "rank",
// "active", "portion" (its part of the team's reserved sequences now),
// "within", "over", "borrowing" (requests in flight of each standing),
// "waiting", "last_seen"}.
// reserved_tokens and in_flight_tokens are present when the pool has a KV
// resource. level_fairshare is null when infinite (a team with a share and no usage);
// last_update is null when the team's usage never changed. The shared entry
// of unknown teams is listed as team "_unknown" (teamSegment), as in metrics.
func appendStatus(b []byte, now time.Time, holder uint32, pools []poolStatus) []byte {
	b = append(b, `{"time":`...)
	b = appendTime(b, now)
	b = append(b, `,"holder":"`...)
	b = strconv.AppendUint(b, uint64(holder), 16)
	b = append(b, `","pools":[`...)
	for i := range pools {
		p := &pools[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = gjson.AppendJSONString(b, p.name)
		b = append(b, `,"capacity":`...)
		b = strconv.AppendInt(b, int64(p.capacity), 10)
		if p.whole > 0 {
			b = appendIntField(b, "pool_capacity", p.whole)
		}
		b = append(b, `,"models":[`...)
		for j, m := range p.models {
			if j > 0 {
				b = append(b, ',')
			}
			b = gjson.AppendJSONString(b, m)
		}
		b = append(b, `],"in_flight":`...)
		b = strconv.AppendInt(b, int64(p.inFlight), 10)
		if p.engine != "" {
			b = append(b, `,"engine_priority":`...)
			b = gjson.AppendJSONString(b, p.engine)
			b = append(b, `,"engine_priority_in_force":`...)
			b = gjson.AppendJSONString(b, p.engineInForce)
		}
		b = appendSpillStatus(b, p.spill)
		if p.err != "" {
			b = append(b, `,"error":`...)
			b = gjson.AppendJSONString(b, p.err)
		}
		if p.kv > 0 {
			b = appendIntField(b, "kv_tokens", int(p.kv))
		}
		if p.throughput > 0 {
			b = appendIntField(b, "throughput", int(p.throughput))
		}
		if p.caps != nil {
			b = p.caps.append(b, now)
		}
		if p.fleet != nil {
			b = p.fleet.append(b, now, p.kv > 0, p.throughput > 0)
		}
		b = append(b, `,"teams":[`...)
		for j := range p.teams {
			t := &p.teams[j]
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"team":`...)
			b = gjson.AppendJSONString(b, teamSegment(t.Team))
			b = appendFloatField(b, "share", t.Share)
			b = appendFloatField(b, "normalized_share", t.NormalizedShare)
			b = appendFloatField(b, "weight", t.Weight)
			b = appendFloatField(b, "weighted_share", t.WeightedShare)
			b = appendIntField(b, "reserved", t.Reserved)
			if p.whole > 0 {
				b = appendIntField(b, "lent", t.Lent)
			}
			b = appendIntField(b, "in_flight", t.InFlight)
			b = appendIntField(b, "borrowing", t.Borrowing)
			b = appendIntField(b, "phantoms", t.Phantoms)
			b = appendFloatField(b, "in_flight_estimate", t.InFlightEstimate)
			b = appendFloatField(b, "usage", t.Usage)
			b = appendFloatField(b, "level_fairshare", t.LevelFairshare)
			b = appendIntField(b, "rank", t.Rank)
			b = appendIntField(b, "waiting", t.Waiting)
			b = appendFloatField(b, "oldest_wait_seconds", t.OldestWait.Seconds())
			if t.ReservedTokens > 0 || t.InFlightTokens > 0 {
				b = appendIntField(b, "reserved_tokens", int(t.ReservedTokens))
				b = appendIntField(b, "in_flight_tokens", int(t.InFlightTokens))
			}
			if p.throughput > 0 {
				b = appendIntField(b, "reserved_work", int(t.ReservedWork+t.LentWork))
				b = appendFloatField(b, "work_debt", t.WorkDebt)
				b = appendFloatField(b, "work_burst", t.WorkBurst)
			}
			if p.users {
				b = appendUsers(b, t, p.listUsers)
			}
			b = append(b, `,"last_update":`...)
			if t.LastUpdate.IsZero() {
				b = append(b, "null"...)
			} else {
				b = appendTime(b, t.LastUpdate)
			}
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}"...)
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendIntField(b []byte, name string, v int) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, int64(v), 10)
}

// appendFloatField appends ,"name":v with v in shortest form; NaN and
// infinities (not JSON numbers) are written as null.
func appendFloatField(b []byte, name string, v float64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendUsers appends a team's user fields (see appendStatus): its counts
// and its first n users by standing.
func appendUsers(b []byte, t *fairshare.TeamStat, n int) []byte {
	b = appendIntField(b, "active_users", t.ActiveUsers)
	b = appendIntField(b, "over", t.Over)
	b = appendIntField(b, "user_entries", len(t.Users))
	b = append(b, `,"users":[`...)
	for k := range t.Users[:min(max(n, 0), len(t.Users))] {
		u := &t.Users[k]
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"user":`...)
		b = gjson.AppendJSONString(b, u.User)
		b = appendFloatField(b, "share", u.Share)
		b = appendFloatField(b, "usage", u.Usage)
		b = appendFloatField(b, "level_fairshare", u.LevelFairshare)
		b = appendIntField(b, "rank", u.Rank)
		b = append(b, `,"active":`...)
		b = strconv.AppendBool(b, u.Active)
		b = appendIntField(b, "portion", u.Portion)
		b = appendIntField(b, "within", u.Within)
		b = appendIntField(b, "over", u.Over)
		b = appendIntField(b, "borrowing", u.Borrowing)
		b = appendIntField(b, "waiting", u.Waiting)
		b = append(b, `,"last_seen":`...)
		b = appendTime(b, time.Unix(0, u.LastSeen))
		b = append(b, '}')
	}
	return append(b, ']')
}
