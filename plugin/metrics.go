package plugin

import (
	"math"
	"strings"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// Metric names. Envoy's tag extraction (the stats_tags of envoy.yaml) splits
// the segments pool.<pool>, team.<team>, class.<class> and
// standing.<standing> off into tags:
//
//	fairshare.pool.<pool>.team.<team>.class.<class>.standing.<within|borrowing>.requests_total
//	fairshare.pool.<pool>.team.<team>.class.<class>.<metric>  per team and class (latency.go)
//	fairshare.pool.<pool>.team.<team>.<metric>          per team of a pool
//	fairshare.pool.<pool>.<metric>                      per pool
//	fairshare.<metric>                                  per plugin
//
// Pool and team names are restricted to [A-Za-z0-9_-] by validation; the
// shared entry of teams missing from the configuration (fairshare.UnknownTeam)
// appears as team _unknown.
const (
	metricPrefix          = "fairshare."
	unknownTeamMetricName = "_unknown"
)

// Metric suffixes.
const (
	mRequests     = "requests_total"          // counter, pool/team/class/standing
	mBorrowed     = "borrowed_total"          // counter, pool/team: requests sent borrowing
	mSatGrants    = "granted_saturated_total" // counter, pool/team: requests granted with C or more already in flight (Grant.Saturated)
	mCASRetries   = "cas_retries_total"       // counter, pool
	mFailures     = "failures_total"          // counter, pool: shared-data failures
	mFailOpen     = "failed_open_total"       // counter, pool: forwarded at the lowest priority after a failure
	mUnscheduled  = "unscheduled_total"       // counter, plugin: scheduled path, no pool for the model (unknown_model "lowest")
	mStripped     = "stripped_priority_total" // counter, plugin: a client priority removed from an unscheduled request
	mUsageMissing = "usage_missing_total"     // counter, pool: released with the best estimate
	mInFlight     = "in_flight"               // gauge, pool and pool/team
	mBorrowing    = "borrowing"               // gauge, pool/team
	mReserved     = "reserved"                // gauge, pool/team
	mUsage        = "usage"                   // gauge, pool/team, milli cost units
	mRank         = "rank"                    // gauge, pool/team
	mLevel        = "level_fairshare"         // gauge, pool/team, milli, capped at levelFairshareCap
	mPhantoms     = "phantoms"                // gauge, pool/team
	mCapacity     = "capacity"                // gauge, pool
	mWaiting      = "waiting"                 // gauge, pool and pool/team: requests held at the gateway
	mDispatched   = "dispatched_total"        // counter, pool/team: held requests dispatched
	mQueueTimeout = "queue_timeouts_total"    // counter, pool/team: held requests answered 429 at max_queue_time
	mQueueTime    = "queue_time_ms"           // histogram, pool/team/class: time held before dispatch (latency.go)

	mEngineRefused  = "engine_priority_refused_total" // counter, pool: responses that were the engine's refusal of a priority
	mEnginePriority = "engine_priority"               // gauge, pool: 1 while priorities are written, 0 once not

	mKVTokens             = "kv_tokens"                    // gauge, pool: K, the live KV capacity in tokens (0: no KV resource)
	mThroughput           = "throughput"                   // gauge, pool (throughput): X, the work capacity in cost units per second
	mReservedWork         = "reserved_work"                // gauge, pool/team (throughput): the team's share of X (and loan), cost units per second
	mWorkDebt             = "work_debt"                    // gauge, pool/team (throughput): within-share work granted and not yet paid for at reserved_work, cost units
	mUsersActive          = "users_active"                 // gauge, pool/team (user_header): the team's users that count in its division now
	mOver                 = "over"                         // gauge, pool/team (user_header): the team's over requests in flight (counted in borrowing too)
	mCapacityEngines      = "capacity_engines"             // gauge, pool (capacity_from): engine cores whose readings make C and K; 0: the configured values
	mCapacityReadFailures = "capacity_read_failures_total" // counter, pool (capacity_from): engine reads that failed
	mCapacityAgreed       = "capacity_agreed"              // gauge, pool (capacity_from with cluster): the C the fleet last agreed on (fleetcap.go)
	mCapacityStale        = "capacity_stale"               // gauge, pool (capacity_from with cluster): 1 while this replica cannot reach etcd and keeps the last agreed C

	mClusterSyncs     = "cluster_syncs_total"     // counter, plugin: pool reports written to etcd
	mClusterConflicts = "cluster_conflicts_total" // counter, plugin: etcd transactions that lost the compare
	mClusterFailures  = "cluster_failures_total"  // counter, plugin: syncs that could not reach etcd
)

// rejectedName is the counter of requests answered with an error for
// reason: rejected_<reason>_total (plugin level, or pool level for
// unknown_team and unavailable).
func rejectedName(reason string) string { return "rejected_" + reason + "_total" }

// teamSegment is the metric name segment of a team, and the name every
// output of the plugin gives it (metrics, the status endpoint, the
// x-fairshare-team headers): the shared entry of teams missing from the
// configuration is "_unknown" everywhere.
func teamSegment(team string) string {
	if team == fairshare.UnknownTeam {
		return unknownTeamMetricName
	}
	return team
}

// appendPluginMetric appends fairshare.<metric>.
func appendPluginMetric(b []byte, metric string) []byte {
	b = append(b, metricPrefix...)
	return append(b, metric...)
}

// appendPoolMetric appends fairshare.pool.<pool>.<metric>.
func appendPoolMetric(b []byte, pool, metric string) []byte {
	b = append(b, metricPrefix+"pool."...)
	b = append(b, pool...)
	b = append(b, '.')
	return append(b, metric...)
}

// appendTeamMetric appends fairshare.pool.<pool>.team.<team>.<metric>.
func appendTeamMetric(b []byte, pool, team, metric string) []byte {
	b = append(b, metricPrefix+"pool."...)
	b = append(b, pool...)
	b = append(b, ".team."...)
	b = append(b, teamSegment(team)...)
	b = append(b, '.')
	return append(b, metric...)
}

// appendRequestMetric appends
// fairshare.pool.<pool>.team.<team>.class.<class>.standing.<standing>.requests_total.
func appendRequestMetric(b []byte, pool, team string, class fairshare.Class, borrowing bool) []byte {
	b = append(b, metricPrefix+"pool."...)
	b = append(b, pool...)
	b = append(b, ".team."...)
	b = append(b, teamSegment(team)...)
	b = append(b, ".class."...)
	b = append(b, className(class)...)
	if borrowing {
		b = append(b, ".standing.borrowing."...)
	} else {
		b = append(b, ".standing.within."...)
	}
	return append(b, mRequests...)
}

// metricKind is a proxy-wasm metric type.
type metricKind uint32

const (
	counterKind   metricKind = 0
	gaugeKind     metricKind = 1
	histogramKind metricKind = 2
)

// metricHost is the proxy-wasm metrics API.
type metricHost interface {
	defineMetric(kind metricKind, name string) (uint32, error)
	incrementMetric(id uint32, delta int64) error
	recordMetric(id uint32, value int64) error
}

// metrics defines each metric lazily, once per name, and caches its id.
type metrics struct {
	host metricHost
	ids  map[string]uint32 // name -> id; failed definitions are not cached
	buf  []byte            // name scratch
	// reqs caches the id of each requests_total counter by its labels,
	// so that counting a request builds no name (its ids entry is kept).
	reqs map[requestLabels]uint32
}

// requestLabels name one requests_total counter.
type requestLabels struct {
	pool, team string
	class      fairshare.Class
	borrowing  bool
}

func newMetrics(h metricHost) *metrics {
	return &metrics{host: h, ids: map[string]uint32{}, reqs: map[requestLabels]uint32{}}
}

// id returns the id of the metric named by m.buf, defining it on first use.
func (m *metrics) id(kind metricKind) (uint32, bool) {
	if id, ok := m.ids[string(m.buf)]; ok { // no allocation for the lookup
		return id, true
	}
	name := string(m.buf)
	id, err := m.host.defineMetric(kind, name)
	if err != nil {
		return 0, false
	}
	m.ids[name] = id
	return id, true
}

// count adds delta (> 0) to the counter named by m.buf.
func (m *metrics) count(delta int64) {
	if delta <= 0 {
		return
	}
	if id, ok := m.id(counterKind); ok {
		_ = m.host.incrementMetric(id, delta)
	}
}

// set records v in the gauge named by m.buf.
func (m *metrics) set(v int64) {
	if id, ok := m.id(gaugeKind); ok {
		_ = m.host.recordMetric(id, v)
	}
}

// pluginCounter adds delta to fairshare.<metric>.
func (m *metrics) pluginCounter(metric string, delta int64) {
	m.buf = appendPluginMetric(m.buf[:0], metric)
	m.count(delta)
}

// poolCounter adds delta to fairshare.pool.<pool>.<metric>.
func (m *metrics) poolCounter(pool, metric string, delta int64) {
	if delta <= 0 {
		return // as count, without building the name (cas retries: 0 per request)
	}
	m.buf = appendPoolMetric(m.buf[:0], pool, metric)
	m.count(delta)
}

// teamCounter adds delta to fairshare.pool.<pool>.team.<team>.<metric>.
func (m *metrics) teamCounter(pool, team, metric string, delta int64) {
	m.buf = appendTeamMetric(m.buf[:0], pool, team, metric)
	m.count(delta)
}

// request counts one scheduled request. s, when not nil, is the pool's
// slot of g.Team: the counters' ids are kept there once defined, so that
// the next request of the team looks up no name.
func (m *metrics) request(pool string, g *fairshare.Grant, s *teamSlot) {
	if g.Saturated {
		// The gateway's own view of saturation: granted into a pool that
		// already had C or more in flight, so it waits in the engine's
		// queue (under flow control a within-share request: a borrower
		// needs room).
		m.teamCounter(pool, g.Team, mSatGrants, 1)
	}
	borrowing := borrows(g)
	if s == nil || s.name != g.Team || uint(g.Class) >= uint(len(s.requests)) {
		m.requestSlow(pool, g, borrowing)
		return
	}
	c := &s.requests[g.Class][0]
	if borrowing {
		c = &s.requests[g.Class][1]
	}
	if !c.ok {
		c.id, c.ok = m.requestID(pool, g, borrowing)
	}
	if c.ok {
		_ = m.host.incrementMetric(c.id, 1)
	}
	if borrowing {
		if !s.borrowed.ok {
			m.buf = appendTeamMetric(m.buf[:0], pool, g.Team, mBorrowed)
			s.borrowed.id, s.borrowed.ok = m.id(counterKind)
		}
		if s.borrowed.ok {
			_ = m.host.incrementMetric(s.borrowed.id, 1)
		}
	}
}

// requestSlow is request without a slot.
func (m *metrics) requestSlow(pool string, g *fairshare.Grant, borrowing bool) {
	if id, ok := m.requestID(pool, g, borrowing); ok {
		_ = m.host.incrementMetric(id, 1)
	}
	if borrowing {
		m.teamCounter(pool, g.Team, mBorrowed, 1)
	}
}

// requestID returns the id of the requests_total counter of g, defining
// it on first use.
func (m *metrics) requestID(pool string, g *fairshare.Grant, borrowing bool) (uint32, bool) {
	l := requestLabels{pool, g.Team, g.Class, borrowing}
	id, ok := m.reqs[l]
	if !ok {
		m.buf = appendRequestMetric(m.buf[:0], pool, g.Team, g.Class, borrowing)
		if id, ok = m.id(counterKind); ok {
			// The key's strings are copied: g.Team may view a buffer.
			l.pool, l.team = strings.Clone(pool), strings.Clone(g.Team)
			m.reqs[l] = id
		}
	}
	return id, ok
}

// milli converts x to an integer number of thousandths, saturating.
func milli(x float64) int64 {
	switch {
	case math.IsNaN(x):
		return 0
	case x*1000 >= math.MaxInt64/2:
		return math.MaxInt64 / 2
	case x*1000 <= math.MinInt64/2:
		return math.MinInt64 / 2
	}
	return int64(math.Round(x * 1000))
}

// levelFairshareCap is the largest LF the level_fairshare gauge reports
// (1e9 in thousandths). A team with a share and no usage has LF = +Inf, and
// a team whose usage is a tiny fraction of its share has a huge LF; both
// read 1e6, so a dashboard's axis stays readable (the highest value any
// team with usage can reach in practice is far below: LF = normalised share
// / normalised usage, 1e6 means its usage is a millionth of its share's).
// The status endpoint keeps the exact value (null for +Inf).
const levelFairshareCap = 1e6

// gauges records the gauges of one pool from a snapshot; with a work
// resource (throughput > 0) also the pool's throughput and every team's
// reserved_work and work_debt.
func (m *metrics) gauges(pool string, capacity int, throughput int64, stats []fairshare.TeamStat) {
	total, waiting := 0, 0
	for i := range stats {
		s := &stats[i]
		total += s.InFlight + s.Phantoms
		waiting += s.Waiting
		m.teamGauge(pool, s.Team, mWaiting, int64(s.Waiting))
		m.teamGauge(pool, s.Team, mInFlight, int64(s.InFlight))
		m.teamGauge(pool, s.Team, mBorrowing, int64(s.Borrowing))
		m.teamGauge(pool, s.Team, mReserved, int64(s.Reserved))
		m.teamGauge(pool, s.Team, mUsage, milli(s.Usage))
		m.teamGauge(pool, s.Team, mRank, int64(s.Rank))
		m.teamGauge(pool, s.Team, mLevel, milli(min(s.LevelFairshare, levelFairshareCap)))
		m.teamGauge(pool, s.Team, mPhantoms, int64(s.Phantoms))
		if throughput > 0 {
			m.teamGauge(pool, s.Team, mReservedWork, s.ReservedWork+s.LentWork)
			m.teamGauge(pool, s.Team, mWorkDebt, int64(math.Round(s.WorkDebt)))
		}
	}
	if throughput > 0 {
		m.poolGauge(pool, mThroughput, throughput)
	}
	m.buf = appendPoolMetric(m.buf[:0], pool, mInFlight)
	m.set(int64(total))
	m.buf = appendPoolMetric(m.buf[:0], pool, mCapacity)
	m.set(int64(capacity))
	m.buf = appendPoolMetric(m.buf[:0], pool, mWaiting)
	m.set(int64(waiting))
}

// userGauges records the user level's gauges of one pool from a
// snapshot: every team's users_active and over (two series per team; no
// series per user).
func (m *metrics) userGauges(pool string, stats []fairshare.TeamStat) {
	for i := range stats {
		s := &stats[i]
		m.teamGauge(pool, s.Team, mUsersActive, int64(s.ActiveUsers))
		m.teamGauge(pool, s.Team, mOver, int64(s.Over))
	}
}

// poolGauge records v in fairshare.pool.<pool>.<metric>.
func (m *metrics) poolGauge(pool, metric string, v int64) {
	m.buf = appendPoolMetric(m.buf[:0], pool, metric)
	m.set(v)
}

func (m *metrics) teamGauge(pool, team, metric string, v int64) {
	m.buf = appendTeamMetric(m.buf[:0], pool, team, metric)
	m.set(v)
}
