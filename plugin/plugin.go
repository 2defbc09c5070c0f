package plugin

import (
	"bytes"
	"crypto/subtle"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// DefaultPluginName prefixes the shared-data keys when the host does not
// report the plugin_name property.
const DefaultPluginName = "fairshare"

// Response headers added to scheduled requests when response_headers is
// true.
const (
	HeaderTeam      = "x-fairshare-team"
	HeaderPool      = "x-fairshare-pool"
	HeaderPriority  = "x-fairshare-priority"
	HeaderBorrowing = "x-fairshare-borrowing"
	headerPrefix    = "x-fairshare-"
)

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
	cfg     config
	name    string // plugin name: the shared-data key prefix
	holder  uint32 // this VM's holder id, random, chosen at the first start
	rs      records
	pools   []*poolState // parallel to cfg.pools
	met     *metrics
	body    []byte           // rewrite buffer, reused
	pending []pendingRelease // releases and charges that failed, retried on tick
}

// poolState is a configured pool and its shared record.
type poolState struct {
	cfg *poolConfig
	rec *record
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
	if pc.holder == 0 {
		for pc.holder == 0 {
			pc.holder = rand.Uint32()
		}
	}
	if pc.name == "" {
		pc.name = DefaultPluginName
		if v, err := hostcalls.GetProperty([]string{"plugin_name"}); err == nil && len(v) > 0 {
			pc.name = string(v)
		}
	}
	if pc.met == nil {
		pc.met = newMetrics(hostMetrics{})
	}
	pc.cfg = cfg
	pc.rs = records{
		st:       hostStore{},
		holder:   pc.holder,
		sentinel: sentinelKey(pc.name, pc.holder),
		retries:  cfg.casRetries,
		warn:     hostcalls.LogWarn,
		plugin:   pc.name,
		gen:      generation{started: now.UnixNano(), fp: cfg.fingerprint()},
	}
	if err := pc.rs.publish(); err != nil {
		hostcalls.LogWarnf("fairshare: publish configuration: %v", err)
	}
	pc.pools = pc.pools[:0]
	for i := range cfg.pools {
		p := &pc.cfg.pools[i]
		pc.pools = append(pc.pools, &poolState{cfg: p, rec: newRecord(pc.name, p.name, cfg.coreConfig(p))})
	}
	for _, ps := range pc.pools {
		pc.heartbeat(now, ps)
	}
	if err := hostcalls.SetTickPeriodMilliSeconds(uint32(cfg.tick / time.Millisecond)); err != nil {
		hostcalls.LogWarnf("fairshare: set tick period: %v", err)
	}
	hostcalls.LogInfof("fairshare: started %s holder %x with %d pools", pc.name, pc.holder, len(pc.pools))
	return types.OnPluginStartStatusOK
}

// heartbeat marks this holder alive in the pool's record (expiring dead
// holders and stale phantoms) and records the pool's gauges.
func (pc *pluginContext) heartbeat(now time.Time, ps *poolState) {
	retries, err := pc.rs.update(now, ps.rec, func(p *fairshare.Pool) { p.Heartbeat(now, pc.holder) })
	pc.met.poolCounter(ps.cfg.name, mCASRetries, int64(retries))
	if err != nil {
		pc.met.poolCounter(ps.cfg.name, mFailures, 1)
		hostcalls.LogWarnf("fairshare: pool %s: heartbeat: %v", ps.cfg.name, err)
		return
	}
	p := ps.rec.p
	pc.met.gauges(ps.cfg.name, p.Capacity(), p.Snapshot(now))
}

// OnTick retries failed releases, then heartbeats every pool and records
// its gauges.
func (pc *pluginContext) OnTick() {
	now := time.Now()
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
	for _, ps := range pc.pools {
		pc.heartbeat(now, ps)
	}
}

// release ends grant g in its pool's record with the consumption; it
// reports whether the record was written.
func (pc *pluginContext) release(now time.Time, ps *poolState, g *fairshare.Grant, consumed float64) bool {
	var done fairshare.Grant
	retries, err := pc.rs.update(now, ps.rec, func(p *fairshare.Pool) {
		gc := *g
		p.Release(now, &gc, consumed)
		done = gc
	})
	pc.met.poolCounter(ps.cfg.name, mCASRetries, int64(retries))
	if err != nil {
		pc.met.poolCounter(ps.cfg.name, mFailures, 1)
		hostcalls.LogWarnf("fairshare: pool %s: release: %v", ps.cfg.name, err)
		return false
	}
	*g = done
	return true
}

// charge adds the consumption of a request that held no grant (it was
// forwarded by failure_mode "open") to the team's usage; it reports whether
// the record was written.
func (pc *pluginContext) charge(now time.Time, ps *poolState, team string, consumed float64) bool {
	retries, err := pc.rs.update(now, ps.rec, func(p *fairshare.Pool) {
		p.Charge(now, team, consumed)
	})
	pc.met.poolCounter(ps.cfg.name, mCASRetries, int64(retries))
	if err != nil {
		pc.met.poolCounter(ps.cfg.name, mFailures, 1)
		hostcalls.LogWarnf("fairshare: pool %s: charge: %v", ps.cfg.name, err)
		return false
	}
	return true
}

// poolFor returns the first pool whose models contain model ("*" matches
// any), or nil.
func (pc *pluginContext) poolFor(model string) *poolState {
	for _, ps := range pc.pools {
		for _, m := range ps.cfg.models {
			if m == model || m == "*" {
				return ps
			}
		}
	}
	return nil
}

// scheduled reports whether path (query excluded) is a scheduled path.
func (pc *pluginContext) scheduled(path string) bool {
	for _, p := range pc.cfg.paths {
		if p == path {
			return true
		}
	}
	return false
}

// NewHttpContext implements types.PluginContext.
func (pc *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{pc: pc}
}

// streamState is where a stream is in its life.
type streamState uint8

const (
	// stIgnored: not scheduled (another method or path, no pool, a local
	// reply): passes untouched.
	stIgnored streamState = iota
	// stBody: scheduled path, waiting for the whole request body.
	stBody
	// stGranted: the request holds a grant that Release has not ended.
	stGranted
	// stForwarded: forwarded without a grant (failure_mode open).
	stForwarded
	// stDone: released (or rejected).
	stDone
)

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	pc        *pluginContext
	state     streamState
	team      string
	class     fairshare.Class
	pool      *poolState
	grant     fairshare.Grant
	prio      int
	borrowing bool

	prompt   int64 // prompt tokens estimated from the request
	hide     bool  // the plugin added include_usage: hide the usage chunk
	sse      bool  // the response is an event stream
	scan     sseScanner
	status   int    // response status, 0 until the response headers
	resp     []byte // bounded copy of a JSON response
	overflow bool   // resp exceeded max_response_bytes
}

// reply answers the stream with a JSON error and counts it.
func (h *httpContext) reply(e apiError, pool string) types.Action {
	h.state = stDone
	if pool != "" {
		h.pc.met.poolCounter(pool, rejectedName(e.reason), 1)
	} else {
		h.pc.met.pluginCounter(rejectedName(e.reason), 1)
	}
	if err := hostcalls.SendHttpResponse(uint32(e.status), jsonHeaders, e.body(), -1); err != nil {
		hostcalls.LogErrorf("fairshare: local reply %d: %v", e.status, err)
	}
	return types.ActionPause
}

var jsonHeaders = [][2]string{{"content-type", "application/json"}}

// OnHttpRequestHeaders answers the status endpoint, and for a scheduled
// request (POST to one of paths) reads its team and class, removes client
// x-fairshare-* headers, content-length (the body will change size) and
// accept-encoding (usage is read from the response body).
func (h *httpContext) OnHttpRequestHeaders(_ int, eos bool) types.Action {
	pc := h.pc
	path, _ := hostcalls.GetHttpRequestHeader(":path")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	method, _ := hostcalls.GetHttpRequestHeader(":method")
	if pc.cfg.statusPath != "" && path == pc.cfg.statusPath {
		return h.serveStatus(method)
	}
	if method != "POST" || !pc.scheduled(path) {
		return types.ActionContinue
	}
	if hdrs, err := hostcalls.GetHttpRequestHeaders(); err == nil {
		for _, kv := range hdrs {
			if len(kv[0]) >= len(headerPrefix) && strings.EqualFold(kv[0][:len(headerPrefix)], headerPrefix) {
				_ = hostcalls.RemoveHttpRequestHeader(kv[0])
			}
		}
	}
	team, _ := hostcalls.GetHttpRequestHeader(pc.cfg.teamHeader)
	team = strings.TrimSpace(team)
	if team == "" {
		team = pc.cfg.defaultTeam
	}
	if team == "" {
		return h.reply(errNoTeam, "")
	}
	h.team = team
	h.class = pc.cfg.defaultClass
	if c, _ := hostcalls.GetHttpRequestHeader(pc.cfg.classHeader); c != "" {
		cl, err := parseClass(strings.ToLower(strings.TrimSpace(c)))
		if err != nil {
			return h.reply(badClassError(pc.cfg.classHeader, c), "")
		}
		h.class = cl
	}
	_ = hostcalls.RemoveHttpRequestHeader("content-length")
	_ = hostcalls.RemoveHttpRequestHeader("accept-encoding")
	if eos {
		return h.reply(errNotObject, "")
	}
	h.state = stBody
	return types.ActionContinue
}

// OnHttpRequestBody buffers the body up to max_body_bytes and decides at
// its end.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	if h.state != stBody {
		return types.ActionContinue
	}
	if size > h.pc.cfg.maxBodyBytes {
		return h.reply(errTooLarge, "")
	}
	if !eos {
		return types.ActionPause // StopIterationAndBuffer
	}
	return h.decide(size)
}

// OnHttpRequestTrailers decides when the body ended with trailers.
func (h *httpContext) OnHttpRequestTrailers(int) types.Action {
	if h.state != stBody {
		return types.ActionContinue
	}
	return h.decide(h.pc.cfg.maxBodyBytes)
}

// decide reads the buffered body, finds the pool, acquires a grant through
// the pool record and writes the priority into the body.
func (h *httpContext) decide(size int) types.Action {
	pc := h.pc
	now := time.Now()
	body, err := hostcalls.GetHttpRequestBody(0, size)
	if err != nil && err != types.ErrorStatusNotFound {
		hostcalls.LogErrorf("fairshare: read request body: %v", err)
	}
	if len(body) > pc.cfg.maxBodyBytes {
		return h.reply(errTooLarge, "")
	}
	req, ok := inspect(body, pc.cfg.defaultMaxTokens)
	if !ok {
		return h.reply(errNotObject, "")
	}
	if req.modelBad {
		return h.reply(errBadModel, "")
	}
	ps := pc.poolFor(req.model)
	if ps == nil {
		h.state = stIgnored
		pc.met.pluginCounter(mUnscheduled, 1)
		return types.ActionContinue
	}
	if pc.cfg.rejectUnknown && !ps.cfg.hasTeam(h.team) {
		return h.reply(unknownTeamError(pc.cfg.teamHeader, h.team, ps.cfg.name), ps.cfg.name)
	}
	prompt, completion := req.tokens()
	h.prompt = prompt
	w := pc.cfg.cost
	estimate := w.prompt*float64(prompt) + w.completion*float64(completion)
	g, err := pc.acquire(now, ps, h.team, h.class, estimate)
	h.pool = ps
	switch {
	case err == nil:
		h.state = stGranted
		h.grant = g
		h.prio = g.Priority
		h.borrowing = g.Borrowing
	case pc.cfg.failClosed:
		return h.reply(errUnavailable, ps.cfg.name)
	default:
		h.state = stForwarded
		h.prio = failOpenPriority(h.class)
		h.borrowing = true
	}
	h.hide = req.stream && !req.includeUsage
	out := req.rewrite(pc.body, body, h.prio, h.hide)
	if err := hostcalls.ReplaceHttpRequestBody(out); err != nil {
		hostcalls.LogErrorf("fairshare: replace request body: %v", err)
	}
	if cap(out) <= 1<<20 {
		pc.body = out[:0]
	}
	return types.ActionContinue
}

// failOpenPriority is the priority of a request forwarded without a grant
// (failure_mode "open"): the lowest a borrower can get.
func failOpenPriority(c fairshare.Class) int {
	return fairshare.BorrowBase + fairshare.MaxRank*fairshare.RankStep + int(c)
}

// acquire decides a request through the pool's record and counts it. On a
// shared-data failure or exhausted retries it counts the failure (and,
// with failure_mode "open", the request forwarded without a grant) and
// returns the error.
func (pc *pluginContext) acquire(now time.Time, ps *poolState, team string, class fairshare.Class, estimate float64) (fairshare.Grant, error) {
	var g fairshare.Grant
	retries, err := pc.rs.update(now, ps.rec, func(p *fairshare.Pool) {
		g = p.Acquire(now, pc.holder, team, class, estimate)
	})
	pc.met.poolCounter(ps.cfg.name, mCASRetries, int64(retries))
	if err != nil {
		pc.met.poolCounter(ps.cfg.name, mFailures, 1)
		hostcalls.LogWarnf("fairshare: pool %s: acquire: %v", ps.cfg.name, err)
		if !pc.cfg.failClosed {
			pc.met.poolCounter(ps.cfg.name, mFailOpen, 1)
		}
		return fairshare.Grant{}, err
	}
	pc.met.request(ps.cfg.name, &g)
	return g, nil
}

// tracking reports whether the response is followed (usage, headers).
func (h *httpContext) tracking() bool { return h.state == stGranted || h.state == stForwarded }

// OnHttpResponseHeaders adds the x-fairshare-* headers and prepares the
// usage reader.
func (h *httpContext) OnHttpResponseHeaders(_ int, eos bool) types.Action {
	if !h.tracking() {
		return types.ActionContinue
	}
	if h.pc.cfg.responseHeaders {
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderTeam, h.team)
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderPool, h.pool.cfg.name)
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderPriority, strconv.Itoa(h.prio))
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderBorrowing, strconv.FormatBool(h.borrowing))
	}
	if st, err := hostcalls.GetHttpResponseHeader(":status"); err == nil {
		h.status, _ = strconv.Atoi(st)
	}
	ct, _ := hostcalls.GetHttpResponseHeader("content-type")
	h.sse = strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
	if h.sse && h.hide {
		h.scan.hide = true
		_ = hostcalls.RemoveHttpResponseHeader("content-length")
	}
	if eos {
		h.finish(true)
	}
	return types.ActionContinue
}

// OnHttpResponseBody reads usage as the chunks pass; for a stream it
// removes the usage chunk the client did not ask for.
func (h *httpContext) OnHttpResponseBody(size int, eos bool) types.Action {
	if !h.tracking() {
		return types.ActionContinue
	}
	var chunk []byte
	if size > 0 {
		chunk, _ = hostcalls.GetHttpResponseBody(0, size)
	}
	if h.sse {
		out := h.scan.feed(chunk, eos)
		if h.scan.hide && !bytes.Equal(out, chunk) {
			if err := hostcalls.ReplaceHttpResponseBody(out); err != nil {
				hostcalls.LogErrorf("fairshare: replace response body: %v", err)
			}
		}
	} else if h.overflow {
		h.resp = keepTail(h.resp, chunk)
	} else {
		switch {
		case len(h.resp)+len(chunk) > h.pc.cfg.maxResponseBytes:
			// Too large to keep: keep only its tail, where vLLM writes
			// usage (after the choices, which logprobs make large).
			h.overflow = true
			h.resp = keepTail(keepTail(nil, h.resp), chunk)
		case h.resp == nil:
			// The chunk is the filter's own copy: keep it rather than
			// copying it again (the usual one-chunk JSON response).
			h.resp = chunk
		default:
			h.resp = append(h.resp, chunk...)
		}
	}
	if eos {
		h.finish(true)
	}
	return types.ActionContinue
}

// OnHttpResponseTrailers ends the response.
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	if h.tracking() {
		if h.sse {
			h.scan.feed(nil, true)
		}
		h.finish(true)
	}
	return types.ActionContinue
}

// OnHttpStreamDone releases a grant the response did not end (reset,
// abort, timeout, local reply), with the best estimate.
func (h *httpContext) OnHttpStreamDone() {
	if h.tracking() {
		h.finish(false)
	}
}

// finish releases the grant exactly once: with the reported usage when the
// response completed with one; with 0 for a complete 4xx response without
// usage (vLLM refused the request and ran nothing); else (reset, abort,
// timeout, 5xx, local reply) with the best estimate: the prompt estimate,
// or the reported prompt, plus the completion tokens seen. A request
// forwarded without a grant (failure_mode "open") releases nothing, but its
// consumption is charged to its team all the same, so that an outage of
// the shared data loses no usage.
func (h *httpContext) finish(complete bool) {
	if !h.tracking() {
		return
	}
	granted := h.state == stGranted
	h.state = stDone
	pc := h.pc
	now := time.Now()
	w := pc.cfg.cost
	var u usage
	if complete {
		if h.sse {
			u = h.scan.u
		} else if !h.overflow {
			u = jsonUsage(h.resp)
		} else {
			u = tailUsage(h.resp)
		}
	}
	h.resp = nil
	var consumed float64
	switch {
	case u.ok:
		consumed = u.cost(w)
	case complete && h.status >= 400 && h.status < 500:
		// vLLM refused the request (validation, unknown model): it ran
		// nothing, so nothing is charged.
	default:
		pc.met.poolCounter(h.pool.cfg.name, mUsageMissing, 1)
		consumed = h.bestEstimate(w)
	}
	r := pendingRelease{pool: h.pool, grant: h.grant, team: h.team, charge: !granted, consumed: consumed}
	if !pc.settle(now, &r) {
		if len(pc.pending) >= maxPending {
			pc.pending = pc.pending[1:]
		}
		pc.pending = append(pc.pending, r)
	}
}

// bestEstimate is the cost of an unfinished response: prompt (as reported
// when a usage object was seen, else estimated) plus the completion tokens
// seen.
func (h *httpContext) bestEstimate(w costWeights) float64 {
	su := h.scan.u
	prompt, cached := h.prompt, int64(0)
	completion := h.scan.seen
	if su.ok {
		prompt, cached = su.prompt, su.cached
		if su.completion > completion {
			completion = su.completion
		}
	}
	return usage{prompt: prompt, cached: cached, completion: completion, ok: true}.cost(w)
}

// serveStatus answers the status endpoint with a local reply.
func (h *httpContext) serveStatus(method string) types.Action {
	pc := h.pc
	h.state = stDone
	if method != "GET" && method != "HEAD" {
		return h.reply(errStatusVerb, "")
	}
	if pc.cfg.statusToken != "" {
		if !bearer(pc.cfg.statusToken) {
			return h.reply(errStatusAuth, "")
		}
	}
	now := time.Now()
	pools := make([]poolStatus, 0, len(pc.pools))
	for _, ps := range pc.pools {
		st := poolStatus{name: ps.cfg.name, capacity: ps.cfg.capacity, models: ps.cfg.models}
		if _, err := pc.rs.load(now, ps.rec); err != nil {
			st.err = err.Error()
		} else {
			st.capacity = ps.rec.p.Capacity()
			st.teams = ps.rec.p.Snapshot(now)
			for i := range st.teams {
				st.inFlight += st.teams[i].InFlight + st.teams[i].Phantoms
			}
		}
		pools = append(pools, st)
	}
	body := appendStatus(nil, now, pc.holder, pools)
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
