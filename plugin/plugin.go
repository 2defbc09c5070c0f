package plugin

import (
	"bytes"
	"crypto/subtle"
	"strconv"
	"strings"
	"time"
	"unsafe"

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
	HeaderTeam     = "x-fairshare-team"
	HeaderPool     = "x-fairshare-pool"
	HeaderPriority = "x-fairshare-priority"
	// HeaderBorrowing is "true" when the request went at a borrower's
	// priority (see borrows), "false" when within share.
	HeaderBorrowing = "x-fairshare-borrowing"
	// HeaderQueueTime is the time the request was held at the gateway, in
	// seconds with millisecond precision ("0.000" when it went at once).
	HeaderQueueTime = "x-fairshare-queue-time"
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

	// cl syncs the pools with the other proxies (cluster.go); nil
	// without a cluster block.
	cl *clusterSync
}

// poolState is a configured pool and its shared record.
type poolState struct {
	cfg *poolConfig
	rec *record
	// waiters is the pool's queue length as this VM last saw it.
	waiters int
	// slots are what a request looks up by its team's name, per entry of
	// the record (cfg.teams in order, then fairshare.UnknownTeam), made
	// at the first use (slot).
	slots []teamSlot
}

// teamSlot is what the request path needs of one entry of a pool, kept
// so that a request hashes no name: the ids of its requests_total
// counters and of its borrowed_total counter, and its completion mean.
type teamSlot struct {
	name     string         // the configured team, or fairshare.UnknownTeam
	mean     *runningMean   // the entry of the plugin's completion means once found (completionMeans.at)
	requests [2][2]metricID // by class (Interactive, Batch) and borrowing
	borrowed metricID
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
	}
	if pc.wakeQ == 0 && cfg.holding() {
		if id, err := hostcalls.RegisterSharedQueue(wakeQueueName(pc.holder)); err != nil {
			hostcalls.LogWarnf("fairshare: register wake-up queue: %v (held requests are dispatched on ticks)", err)
		} else {
			pc.wakeQ = id
		}
	}
	pc.cfg = cfg
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
		pc.pools = append(pc.pools, &poolState{cfg: p, rec: newRecord(pc.name, p.name, cfg.coreConfig(p))})
	}
	for _, ps := range pc.pools {
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

// OnTick answers held requests past their deadline and dispatches the
// others whose turn has come, retries failed releases, and every tick
// period heartbeats every pool and records its gauges. With holding on it
// runs every dispatch_tick.
func (pc *pluginContext) OnTick() {
	now := time.Now()
	if len(pc.held) > 0 {
		pc.expire(now)
		pc.dispatchHeld(now)
	}
	if pc.cl != nil {
		pc.cl.tick(now)
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

// release ends grant g in its pool's record with the consumption; it
// reports whether the record was written.
func (pc *pluginContext) release(now time.Time, ps *poolState, g *fairshare.Grant, consumed float64) bool {
	var done fairshare.Grant
	retries, err := pc.rs.update(now, ps.rec, func(p *fairshare.Pool) {
		gc := *g
		p.Release(now, &gc, consumed)
		done = gc
		ps.waiters = p.Waiters()
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

// scheduled reports whether path, cleaned (cleanPath), is a scheduled path.
func (pc *pluginContext) scheduled(path string) bool {
	for _, p := range pc.cfg.paths {
		if p == path {
			return true
		}
	}
	return false
}

// NewHttpContext implements types.PluginContext: a stream context the host
// deleted (DeleteHttpContext), or a new one.
func (pc *pluginContext) NewHttpContext(id uint32) types.HttpContext {
	if n := len(pc.free); n > 0 {
		h := pc.free[n-1]
		pc.free[n-1] = nil
		pc.free = pc.free[:n-1]
		h.pc, h.ctxID = pc, id
		return h
	}
	return &httpContext{pc: pc, ctxID: id}
}

// maxFreeStreams bounds the deleted stream contexts kept for new streams.
const maxFreeStreams = 64

// The dispatcher tells the plugin context of each stream it deletes.
var _ hostcalls.HttpContextDeleter = (*pluginContext)(nil)

// DeleteHttpContext implements hostcalls.HttpContextDeleter: after the
// host's proxy_on_delete no callback reaches the stream's context, and
// unless a queue still holds it (a host that deleted a held stream without
// ending it) it is cleared and kept for the next stream, so that a request
// allocates no stream context.
func (pc *pluginContext) DeleteHttpContext(ctx types.HttpContext) {
	h, ok := ctx.(*httpContext)
	if !ok || h.pc != pc || h.state == stHeld || len(pc.free) >= maxFreeStreams {
		return
	}
	*h = httpContext{}
	pc.free = append(pc.free, h)
}

// streamState is where a stream is in its life.
type streamState uint8

const (
	// stIgnored: not scheduled and nothing to strip (no body, or a body
	// that is not JSON), or a local reply: passes untouched.
	stIgnored streamState = iota
	// stBody: scheduled path, waiting for the whole request body.
	stBody
	// stStrip: not scheduled, with a JSON body: waiting for the whole
	// body to strip (or refuse) a top-level priority.
	stStrip
	// stGranted: the request holds a grant that Release has not ended.
	stGranted
	// stForwarded: forwarded without a grant (failure_mode open).
	stForwarded
	// stHeld: waiting in the pool's queue, the stream paused with its
	// body buffered (flow.go).
	stHeld
	// stDone: released (or rejected).
	stDone
)

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	pc        *pluginContext
	ctxID     uint32        // the stream's context id, to make it effective from a tick
	reqID     uint64        // the holder-local id of a request that waited
	deadline  int64         // a held request's deadline (unix ns)
	queued    time.Duration // time held at the gateway
	state     streamState
	team      string
	class     fairshare.Class
	pool      *poolState
	slot      *teamSlot // the pool's slot of the team (decide), nil until then
	grant     fairshare.Grant
	prio      int
	borrowing bool

	pooling bool  // a pooling endpoint: nothing is generated
	choices int64 // prompts × n: the completions the request asks for
	// maxCompletion is the request's completion cap per choice
	// (max_tokens); kv the KV demand it was recorded with.
	maxCompletion, kv int64
	newKV             int64 // scratch of reestimate
	json              bool  // the content type is JSON (or absent)
	sniffed           bool  // stStrip: sniff found a body that may be JSON
	headSeen          bool  // stStrip: sniff has read the body's first four bytes
	scanned           int   // stStrip: the body's bytes sniff knows to be whitespace or BOM
	prompt            int64 // prompt tokens estimated from the request
	hide              bool  // the plugin added include_usage: hide the usage chunk
	sse               bool  // the response is an event stream
	scan              sseScanner
	status            int    // response status, 0 until the response headers
	resp              []byte // bounded copy of a JSON response
	overflow          bool   // resp exceeded max_response_bytes
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

// borrows reports whether a grant goes at a borrower's priority, as
// operators see it (x-fairshare-borrowing, the standing label): above its
// team's reservation in sequences, or within them but on KV tokens
// borrowed beyond the team's token reservation (Grant.BorrowsTokens).
func borrows(g *fairshare.Grant) bool { return g.Borrowing || g.BorrowsTokens }

// OnHttpRequestHeaders answers the status endpoint, and for a scheduled
// request (POST to one of paths, compared after cleanPath) reads its team
// and class, removes client x-fairshare-* headers, content-length (the body
// will change size) and accept-encoding (usage is read from the response
// body). Any other request with a JSON body is held to strip a client's
// priority from it.
func (h *httpContext) OnHttpRequestHeaders(_ int, eos bool) types.Action {
	pc := h.pc
	// One host call reads the whole map: the pseudo-headers, the team and
	// class, and whether the headers to remove are there at all. Keys are
	// compared as get_header_map_value compares them (Envoy's and this
	// host's maps hold lower-cased keys; a get lower-cases its key and
	// returns the first value).
	hdrs := pc.readHeaders(false)
	var raw, method, ct string
	var hasPath, hasMethod, hasCT, hasLength, hasEncoding bool
	for i := range hdrs {
		switch hdrs[i][0] {
		case ":path":
			if !hasPath {
				raw, hasPath = hdrs[i][1], true
			}
		case ":method":
			if !hasMethod {
				method, hasMethod = hdrs[i][1], true
			}
		case "content-type":
			if !hasCT {
				ct, hasCT = hdrs[i][1], true
			}
		case "content-length":
			hasLength = true
		case "accept-encoding":
			hasEncoding = true
		}
	}
	path := cleanPath(raw)
	if pc.cfg.statusPath != "" && path == pc.cfg.statusPath {
		return h.serveStatus(method)
	}
	if method != "POST" || !pc.scheduled(path) {
		if !eos {
			h.state = stStrip
			h.json = jsonContentType(ct)
		}
		return types.ActionContinue
	}
	var teams, classes int
	var team, class string
	for _, kv := range hdrs {
		k := kv[0]
		switch {
		case len(k) >= len(headerPrefix) && strings.EqualFold(k[:len(headerPrefix)], headerPrefix):
			_ = hostcalls.RemoveHttpRequestHeader(k)
		case strings.EqualFold(k, pc.cfg.teamHeader):
			teams++
			team = kv[1]
		case strings.EqualFold(k, pc.cfg.classHeader):
			classes++
			class = kv[1]
		}
	}
	if teams > 1 || strings.IndexByte(team, ',') >= 0 {
		return h.reply(duplicateHeaderError(pc.cfg.teamHeader), "")
	}
	if classes > 1 || strings.IndexByte(class, ',') >= 0 {
		return h.reply(duplicateHeaderError(pc.cfg.classHeader), "")
	}
	team = strings.TrimSpace(team)
	if team == "" {
		team = pc.cfg.defaultTeam
	}
	if team == "" {
		return h.reply(errNoTeam, "")
	}
	h.team = pc.intern(team) // team may view pc.hdrBuf: kept, it must not
	h.class = pc.cfg.defaultClass
	if class != "" {
		cl, err := parseClass(strings.ToLower(strings.TrimSpace(class)))
		if err != nil {
			return h.reply(badClassError(pc.cfg.classHeader, class), "")
		}
		h.class = cl
	}
	h.pooling = pc.pooling(path)
	// Removing an absent header changes nothing: no call for it.
	if hasLength {
		_ = hostcalls.RemoveHttpRequestHeader("content-length")
	}
	if hasEncoding {
		_ = hostcalls.RemoveHttpRequestHeader("accept-encoding")
	}
	if eos {
		return h.reply(errNotObject, "")
	}
	h.state = stBody
	return types.ActionContinue
}

// readHeaders reads the request (or, if response, the response) headers
// into the plugin context's buffers: the pairs view pc.hdrBuf and are
// valid until the next readHeaders. Nil when the host answers an error.
func (pc *pluginContext) readHeaders(response bool) [][2]string {
	if pc.hdrBuf == nil {
		pc.hdrBuf = make([]byte, 0, headerBuffer)
	}
	read := hostcalls.GetHttpRequestHeadersInto
	if response {
		read = hostcalls.GetHttpResponseHeadersInto
	}
	hdrs, buf, err := read(pc.hdrBuf, pc.hdrPairs[:0])
	if cap(buf) <= keepBuffer {
		pc.hdrBuf = buf[:0]
	}
	if err != nil {
		return nil
	}
	if cap(hdrs) <= maxKeptPairs {
		pc.hdrPairs = hdrs[:0]
	}
	return hdrs
}

// headerBuffer is the first size of the buffer headers are read into:
// the allocator's arena size, so that, as when the map was read into the
// arena, no map up to that size is allocated inside
// proxy_on_memory_allocate (a larger one is, once, and its buffer kept up
// to keepBuffer); maxKeptPairs bounds the pairs slice kept for the next
// read.
const (
	headerBuffer = hostcalls.ArenaSize
	maxKeptPairs = 256
)

// intern returns team as a string that views no buffer: the configured
// name when a pool lists it (no allocation), else a copy.
func (pc *pluginContext) intern(team string) string {
	for _, ps := range pc.pools {
		for i := range ps.cfg.teams {
			if n := ps.cfg.teams[i].Name; n == team {
				return n
			}
		}
	}
	if team == pc.cfg.defaultTeam {
		return pc.cfg.defaultTeam
	}
	return strings.Clone(team)
}

// jsonContentType reports whether a request whose content-type header is
// ct ("" when absent) has a body vLLM's server reads as JSON: no
// content-type, or application/json or application/*+json (FastAPI parses
// the body as JSON exactly then).
func jsonContentType(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true
	}
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "application/json" || strings.HasPrefix(ct, "application/") && strings.HasSuffix(ct, "+json")
}

// OnHttpRequestBody buffers the body up to max_body_bytes and decides at
// its end.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	if h.state != stBody && h.state != stStrip {
		return types.ActionContinue
	}
	if size > h.pc.cfg.maxBodyBytes {
		return h.reply(errTooLarge, "")
	}
	if h.state == stStrip {
		if !h.sniffed {
			switch h.sniff(size, eos) {
			case sniffWait:
				return types.ActionPause // StopIterationAndBuffer: nothing passes yet
			case sniffOther:
				h.state = stIgnored
				return types.ActionContinue
			}
			h.sniffed = true
		}
		if !eos {
			return types.ActionPause
		}
		return h.strip(size)
	}
	if !eos {
		return types.ActionPause // StopIterationAndBuffer
	}
	return h.decide(size)
}

// strip removes (or, with unscheduled "reject", refuses) every top-level
// priority of the JSON body of a request the plugin does not schedule, so
// that no client-chosen priority reaches vLLM on any path. A body that is
// not JSON passes; one that is not valid JSON passes only if it cannot
// spell priority (no "priority", no escape).
func (h *httpContext) strip(size int) types.Action {
	pc := h.pc
	h.state = stIgnored
	body, err := hostcalls.GetHttpRequestBody(0, size)
	if err != nil && err != types.ErrorStatusNotFound {
		return h.reply(errBodyRead, "")
	}
	if len(body) > pc.cfg.maxBodyBytes {
		return h.reply(errTooLarge, "")
	}
	// Python's json module (and so vLLM) reads a UTF-8 byte-order mark:
	// the object is read after it, and stripped in place behind it.
	obj := bytes.TrimPrefix(body, utf8BOM)
	r, ok := inspect(obj, 1, true)
	if !ok {
		if h.json && utf16(body) || bytes.Contains(body, []byte("priority")) || bytes.Contains(body, []byte(`\u`)) {
			return h.reply(errUnreadable, "")
		}
		return types.ActionContinue
	}
	if r.priorities.len() == 0 {
		return types.ActionContinue
	}
	if pc.cfg.rejectUnscheduled {
		return h.reply(errUnscheduledPriority, "")
	}
	r.strip(obj)
	if err := hostcalls.ReplaceHttpRequestBody(body); err != nil {
		hostcalls.LogErrorf("fairshare: strip priority: %v", err)
		return h.reply(errRewrite, "")
	}
	pc.met.pluginCounter(mStripped, 1)
	return types.ActionContinue
}

// sniffResult is what the buffered start of an unscheduled body shows.
type sniffResult uint8

const (
	// sniffWait: not yet known (fewer than four bytes, or nothing but a
	// byte-order mark and whitespace so far): keep buffering.
	sniffWait sniffResult = iota
	// sniffJSON: the body may be JSON that vLLM reads: buffer it whole.
	sniffJSON
	// sniffOther: the body cannot be JSON that vLLM reads (a form, a
	// binary upload, a body of only whitespace): it passes untouched.
	sniffOther
)

// sniff decides from the size bytes buffered so far whether an unscheduled
// body may be JSON that vLLM reads: an object ('{' after any whitespace,
// behind an optional UTF-8 byte-order mark), or, with a JSON content type,
// UTF-16 or UTF-32 (a byte-order mark or a zero byte among the first four,
// as Python's json.detect_encoding reads them). Nothing of the body is
// forwarded until it has decided: the decision never rests on where the
// client's chunks happen to end (a first chunk that is empty, whitespace
// or a bare byte-order mark). Whitespace already scanned is not read
// again (h.scanned).
func (h *httpContext) sniff(size int, eos bool) sniffResult {
	if !h.headSeen {
		if size < 4 && !eos {
			return sniffWait
		}
		head, _ := hostcalls.GetHttpRequestBody(0, min(size, 4))
		if h.json && utf16(head) {
			return sniffJSON
		}
		h.headSeen = true
		if bytes.HasPrefix(head, utf8BOM) {
			h.scanned = len(utf8BOM)
		}
	}
	for h.scanned < size {
		chunk, err := hostcalls.GetHttpRequestBody(h.scanned, min(size-h.scanned, sniffChunk))
		if err != nil || len(chunk) == 0 {
			return sniffJSON // not readable now: buffer it whole, for strip to read or refuse
		}
		if i := skipWS(chunk, 0); i < len(chunk) {
			if chunk[i] == '{' {
				return sniffJSON
			}
			return sniffOther
		}
		h.scanned += len(chunk)
	}
	if eos {
		return sniffOther // empty, or nothing but whitespace: no priority
	}
	return sniffWait
}

// sniffChunk bounds the bytes sniff reads per host call while it skips
// leading whitespace.
const sniffChunk = 4096

var utf8BOM = []byte("\xEF\xBB\xBF")

// utf16 reports whether body looks like JSON in UTF-16 or UTF-32, which
// Python's json module (and so vLLM) accepts: a byte-order mark, or a zero
// byte among the first four.
func utf16(b []byte) bool {
	if len(b) >= 2 && (b[0] == 0xFE && b[1] == 0xFF || b[0] == 0xFF && b[1] == 0xFE) {
		return true
	}
	return bytes.IndexByte(b[:min(len(b), 4)], 0) >= 0
}

// OnHttpRequestTrailers decides when the body ended with trailers.
func (h *httpContext) OnHttpRequestTrailers(int) types.Action {
	switch h.state {
	case stBody:
		return h.decide(h.pc.cfg.maxBodyBytes)
	case stStrip:
		return h.strip(h.pc.cfg.maxBodyBytes)
	}
	return types.ActionContinue
}

// decide reads the buffered body, finds the pool, acquires a grant through
// the pool record and writes the priority into the body.
func (h *httpContext) decide(size int) types.Action {
	pc := h.pc
	now := time.Now()
	body, err := pc.readBody(size)
	if err != nil && err != types.ErrorStatusNotFound {
		hostcalls.LogErrorf("fairshare: read request body: %v", err)
		return h.reply(errBodyRead, "")
	}
	if len(body) > pc.cfg.maxBodyBytes {
		return h.reply(errTooLarge, "")
	}
	req, ok := inspect(body, pc.cfg.defaultMaxTokens, h.pooling)
	if !ok {
		return h.reply(errNotObject, "")
	}
	if req.modelBad {
		return h.reply(errBadModel, "")
	}
	model := req.model
	if model == "" {
		model = pc.cfg.defaultModel
	}
	if model == "" {
		return h.reply(errNoModel, "")
	}
	ps := pc.poolFor(model)
	if ps == nil {
		return h.unknownModel(&req, body, model)
	}
	if pc.cfg.rejectUnknown && !ps.cfg.hasTeam(h.team) {
		return h.reply(unknownTeamError(pc.cfg.teamHeader, h.team, ps.cfg.name), ps.cfg.name)
	}
	prompt, completion := req.tokens()
	h.prompt = prompt
	w := pc.cfg.cost
	estimate := w.prompt*float64(prompt) + w.completion*float64(completion)
	// The KV demand: the prompt plus the team's usual completion, capped
	// by the request's own limit (see completionMeans).
	h.choices, h.maxCompletion = satMul(req.prompts, req.n), req.completion
	h.slot = ps.slot(h.team)
	kv := satAdd(prompt, pc.means.completionAt(ps.cfg.name, h.slot, h.choices, req.completion))
	h.kv = kv
	pc.nextID++
	g, wait, outcome, retry, err := pc.arrive(now, ps, fairshare.Request{
		Holder: pc.holder, ID: pc.nextID, Team: h.team, Class: h.class,
		Tokens: kv, Estimate: estimate,
	})
	h.pool = ps
	h.hide = req.stream && !req.includeUsage
	switch {
	case err == nil && outcome == fairshare.Granted:
		h.state = stGranted
		h.grant = g
		h.prio = g.Priority
		h.borrowing = borrows(&g)
	case err == nil && outcome == fairshare.Queued:
		return pc.hold(h, wait)
	case err == nil:
		return h.tooMany(errQueueFull, retry, ps.cfg.name)
	case pc.cfg.failClosed:
		return h.reply(errUnavailable, ps.cfg.name)
	default:
		h.state = stForwarded
		h.prio = failOpenPriority(h.class)
		h.borrowing = true
	}
	if err := pc.writeBody(&req, body, h.prio, h.hide); err != nil {
		// The body still holds the client's priority: it must not go.
		hostcalls.LogErrorf("fairshare: replace request body: %v", err)
		h.undo(now)
		return h.reply(errRewrite, ps.cfg.name)
	}
	return types.ActionContinue
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

// keep queues a release that failed for the tick to retry.
func (pc *pluginContext) keep(r pendingRelease) {
	if len(pc.pending) >= maxPending {
		pc.pending = pc.pending[1:]
	}
	pc.pending = append(pc.pending, r)
}

// unknownModel handles a scheduled request whose model no pool lists:
// with unknown_model "lowest" it is forwarded, uncounted, at the lowest
// borrowing priority (the client's own priority overwritten); else it is
// answered 404.
func (h *httpContext) unknownModel(req *request, body []byte, model string) types.Action {
	pc := h.pc
	if !pc.cfg.lowestUnknownModel {
		return h.reply(unknownModelError(model), "")
	}
	if pc.cfg.rejectUnknown && !pc.knownTeam(h.team) {
		return h.reply(unknownTeamError(pc.cfg.teamHeader, h.team, "*"), "")
	}
	h.state = stIgnored
	pc.met.pluginCounter(mUnscheduled, 1)
	if err := pc.writeBody(req, body, failOpenPriority(h.class), false); err != nil {
		hostcalls.LogErrorf("fairshare: replace request body: %v", err)
		return h.reply(errRewrite, "")
	}
	return types.ActionContinue
}

// knownTeam reports whether team has a share in some pool.
func (pc *pluginContext) knownTeam(team string) bool {
	for _, ps := range pc.pools {
		if ps.cfg.hasTeam(team) {
			return true
		}
	}
	return false
}

// pooling reports whether path (cleaned) is a pooling endpoint, whose
// requests generate nothing.
func (pc *pluginContext) pooling(path string) bool {
	for _, p := range poolingPaths {
		if p == path {
			return true
		}
	}
	return false
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
	pc.met.request(ps.cfg.name, &g, ps.slot(g.Team))
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
	// One host call reads :status and content-type (the first value of
	// each, as get_header_map_value answers), before the writes below.
	hdrs := h.pc.readHeaders(true)
	var status, ct string
	var hasStatus, hasCT bool
	for i := range hdrs {
		switch hdrs[i][0] {
		case ":status":
			if !hasStatus {
				status, hasStatus = hdrs[i][1], true
			}
		case "content-type":
			if !hasCT {
				ct, hasCT = hdrs[i][1], true
			}
		}
	}
	if pc := h.pc; pc.cfg.responseHeaders {
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderTeam, h.team)
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderPool, h.pool.cfg.name)
		// The values are formatted into a buffer kept for the next
		// response: the host copies them during the call.
		pc.scratch = strconv.AppendInt(pc.scratch[:0], int64(h.prio), 10)
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderPriority, view(pc.scratch))
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderBorrowing, strconv.FormatBool(h.borrowing))
		queued := "0.000" // a request that went at once, the usual one
		if h.queued != 0 {
			pc.scratch = strconv.AppendFloat(pc.scratch[:0], h.queued.Seconds(), 'f', 3, 64)
			queued = view(pc.scratch)
		}
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderQueueTime, queued)
	}
	if hasStatus {
		h.status = atoi(status)
	}
	h.sse = eventStream(ct)
	if h.sse && h.hide {
		h.scan.hide = true
		_ = hostcalls.RemoveHttpResponseHeader("content-length")
	}
	if eos {
		h.finish(true)
	}
	return types.ActionContinue
}

// atoi is strconv.Atoi's value of s (0 when it is not a number), without
// its call for the usual three-digit status code.
func atoi(s string) int {
	if len(s) == 3 && '0' <= s[0] && s[0] <= '9' && '0' <= s[1] && s[1] <= '9' && '0' <= s[2] && s[2] <= '9' {
		return int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0')
	}
	n, _ := strconv.Atoi(s)
	return n
}

// eventStream reports whether the content type ct is an event stream:
// text/event-stream in any case, after leading white space. It is
// strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)),
// "text/event-stream") without the lower-cased copy: only two runes beyond
// ASCII lower-case to ASCII (U+0130 to 'i', U+212A to 'k'), and the type
// spells neither letter, so comparing the ASCII bytes alone is the same.
func eventStream(ct string) bool {
	const sse = "text/event-stream"
	ct = strings.TrimSpace(ct)
	if len(ct) < len(sse) {
		return false
	}
	for i := 0; i < len(sse); i++ {
		c := ct[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != sse[i] {
			return false
		}
	}
	return true
}

// view returns b's bytes as a string without copying them, for a host call
// that copies them before b changes again.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// OnHttpResponseBody reads usage as the chunks pass; for a stream it
// removes the usage chunk the client did not ask for.
func (h *httpContext) OnHttpResponseBody(size int, eos bool) types.Action {
	if !h.tracking() {
		return types.ActionContinue
	}
	var chunk []byte
	switch {
	case size <= 0:
	case eos && !h.sse && h.resp == nil && !h.overflow && size <= h.pc.cfg.maxResponseBytes:
		// The whole response in one chunk, read for its usage in this
		// callback (finish below) and kept by nothing after it: into the
		// buffer the plugin context keeps.
		chunk = h.pc.readResponse(size)
	default:
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

// readResponse reads size bytes of the response body into pc.respBuf
// (grown to size, and kept up to keepBuffer); the result is valid until
// the next readResponse.
func (pc *pluginContext) readResponse(size int) []byte {
	if cap(pc.respBuf) < size && size <= keepBuffer {
		pc.respBuf = make([]byte, 0, max(size, 4<<10))
	}
	b, _ := hostcalls.GetBufferBytesInto(pc.respBuf, hostcalls.BufferHTTPResponseBody, 0, size)
	return b
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
	if h.state == stHeld {
		h.cancel(time.Now())
		return
	}
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
		if h.choices > 0 && !h.pooling && h.status < 400 {
			slot := h.slot
			if slot == nil {
				slot = h.pool.slot(h.team)
			}
			pc.means.observeAt(h.pool.cfg.name, slot, float64(u.completion)/float64(h.choices))
			pc.meansNew = true
		}
	case complete && h.status >= 400 && h.status < 500:
		// vLLM refused the request (validation, unknown model): it ran
		// nothing, so nothing is charged.
	default:
		pc.met.poolCounter(h.pool.cfg.name, mUsageMissing, 1)
		consumed = h.bestEstimate(w)
	}
	r := pendingRelease{pool: h.pool, grant: h.grant, team: h.team, charge: !granted, consumed: consumed}
	if !pc.settle(now, &r) {
		pc.keep(r)
	}
	if granted && h.pool.waiters > 0 && pc.cfg.holding() {
		// The release freed room: the head of the queue may go now.
		pc.dispatch(now, h.pool, h.ctxID)
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
		st := poolStatus{name: ps.cfg.name, capacity: ps.cfg.capacity, models: ps.cfg.models}
		if _, err := pc.rs.load(now, ps.rec); err != nil {
			st.err = err.Error()
		} else {
			st.capacity = ps.rec.p.Capacity()
			if ps.rec.p.Sliced() {
				st.whole = ps.cfg.capacity
			}
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
