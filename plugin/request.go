package plugin

import (
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// OnHttpRequestHeaders answers the status endpoint, and for a scheduled
// request (POST to one of paths, compared after cleanPath) reads its team
// and class, removes client x-fairshare-* headers, content-length (the body
// will change size) and accept-encoding (usage is read from the response
// body). Any other request with a JSON body is held to strip a client's
// priority from it.
func (h *httpContext) OnHttpRequestHeaders(_ int, eos bool) types.Action {
	pc := h.pc
	h.markArrived(time.Now())
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
		if !eos && (!pc.cfg.shadow || pc.cfg.shadowStrip) {
			h.state = stStrip
			h.json = jsonContentType(ct)
		}
		return types.ActionContinue
	}
	if pc.cfg.shadow {
		h.json = jsonContentType(ct) // for stripBody
	}
	var teams, classes, users int
	var team, class, user string
	for _, kv := range hdrs {
		k := kv[0]
		switch {
		case len(k) >= len(headerPrefix) && strings.EqualFold(k[:len(headerPrefix)], headerPrefix):
			if !pc.cfg.shadow {
				_ = hostcalls.RemoveHttpRequestHeader(k)
			}
		case strings.EqualFold(k, pc.cfg.teamHeader):
			teams++
			team = kv[1]
		case strings.EqualFold(k, pc.cfg.classHeader):
			classes++
			class = kv[1]
		case pc.cfg.userHeader != "" && strings.EqualFold(k, pc.cfg.userHeader):
			users++
			user = kv[1]
		}
	}
	if teams > 1 || strings.IndexByte(team, ',') >= 0 {
		return h.refuse(duplicateHeaderError(pc.cfg.teamHeader), "")
	}
	if classes > 1 || strings.IndexByte(class, ',') >= 0 {
		return h.refuse(duplicateHeaderError(pc.cfg.classHeader), "")
	}
	team = strings.TrimSpace(team)
	if team == "" {
		team = pc.cfg.defaultTeam
	}
	if team == "" {
		return h.refuse(errNoTeam, "")
	}
	h.team = pc.intern(team) // team may view pc.hdrBuf: kept, it must not
	h.class = pc.cfg.defaultClass
	if class != "" {
		cl, err := parseClass(strings.ToLower(strings.TrimSpace(class)))
		if err != nil {
			return h.refuse(badClassError(pc.cfg.classHeader, class), "")
		}
		h.class = cl
	}
	if pc.cfg.userHeader != "" {
		if e, ok := h.requestUser(users, user); !ok {
			return h.refuse(e, "")
		}
	}
	h.pooling = pc.pooling(path)
	if pc.cfg.shadow {
		// Nothing removed, nothing held (shadow.go).
		if eos {
			return h.refuse(errNotObject, "")
		}
		h.state = stBody
		return types.ActionContinue
	}
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
	if pc.cfg.holdHeaders {
		// Nothing goes upstream until the decision (flow.go probe: the
		// host may instead hold the body until a continue).
		h.headersHeld = true
		h.probeAt = time.Now().Add(pc.cfg.holdHeadersProbe).UnixNano()
		pc.probing[h.ctxID] = h
		return types.ActionPause // StopIteration
	}
	return types.ActionContinue
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

// OnHttpRequestBody buffers the body up to max_body_bytes and decides at
// its end.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	if h.probeAt != 0 {
		h.pc.unprobe(h) // the host delivers body callbacks to stopped headers
	}
	if h.state != stBody && h.state != stStrip {
		return types.ActionContinue
	}
	if size > h.pc.cfg.maxBodyBytes {
		if h.state == stBody {
			return h.unstrippable(errTooLarge)
		}
		return h.reply(errTooLarge, "")
	}
	if h.state == stStrip {
		return h.unscheduledBody(size, eos)
	}
	if !eos {
		return types.ActionPause // StopIterationAndBuffer
	}
	return h.decide(size)
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
		return h.unstrippable(errBodyRead)
	}
	if len(body) > pc.cfg.maxBodyBytes {
		return h.unstrippable(errTooLarge)
	}
	if pc.cfg.shadow && pc.cfg.shadowStrip {
		if e := h.stripBody(body, false); e != nil {
			return h.reply(*e, "")
		}
	}
	req, ok := inspect(body, pc.cfg.defaultMaxTokens, h.pooling)
	if !ok {
		return h.refuse(errNotObject, "")
	}
	if req.modelBad {
		return h.refuse(errBadModel, "")
	}
	model := req.model
	if model == "" {
		model = pc.cfg.defaultModel
	}
	if model == "" {
		return h.refuse(errNoModel, "")
	}
	if e, ok := h.bodyUserOf(&req, body); !ok {
		return h.refuse(e, "")
	}
	ps := pc.poolFor(model)
	if ps == nil {
		return h.unknownModel(&req, body, model)
	}
	if pc.cfg.rejectUnknown && !ps.cfg.hasTeam(h.team) {
		return h.refuse(unknownTeamError(pc.cfg.teamHeader, h.team, ps.cfg.name), ps.cfg.name)
	}
	estimate, kv := h.estimate(&req, ps)
	pc.nextID++
	if pc.cfg.shadow {
		return h.shadowDecide(now, ps, estimate, kv)
	}
	g, wait, outcome, retry, err := pc.arrive(now, ps, fairshare.Request{
		Holder: pc.holder, ID: pc.nextID, Team: h.team, Class: h.class,
		Tokens: kv, Estimate: estimate, Work: h.work, User: h.user,
	})
	h.pool = ps
	h.hide = req.stream && !req.includeUsage
	if err == nil && outcome == fairshare.Queued {
		// It would be held here: a fallback with room takes it (spill.go).
		if sg, ok := h.spill(now, ps, wait, estimate, kv); ok {
			g, outcome, ps = sg, fairshare.Granted, h.pool
			pc.met.request(ps.cfg.name, &g, ps.slot(g.Team))
		}
	}
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
	if err := pc.writeBody(&req, body, h.enginePriority(ps, h.prio), h.hide); err != nil {
		// The body still holds the client's priority: it must not go.
		hostcalls.LogErrorf("fairshare: replace request body: %v", err)
		h.undo(now)
		return h.reply(errRewrite, ps.cfg.name)
	}
	h.markDispatched(now)
	h.decisionHeaders()
	return types.ActionContinue // held headers go with the body
}

// decisionHeaders adds x-fairshare-team, -pool, -priority (and, with
// user_header, -user) to request
// headers that are still held (hold_headers "on"), for the filters after
// this one; headers already released can no longer change.
func (h *httpContext) decisionHeaders() {
	if !h.headersHeld {
		return
	}
	h.headersHeld = false
	_ = hostcalls.AddHttpRequestHeader(headerPrefix+"team", h.teamName())
	_ = hostcalls.AddHttpRequestHeader(headerPrefix+"pool", h.pool.cfg.name)
	_ = hostcalls.AddHttpRequestHeader(headerPrefix+"priority", strconv.Itoa(h.prio))
	if h.pc.cfg.userHeader != "" {
		_ = hostcalls.AddHttpRequestHeader(HeaderUser, h.userLabel())
	}
	h.spillHeader()
}

// teamName is the team as the plugin's headers name it: the configured
// team, or "_unknown" for a team its pool does not list (the entry it is
// counted in, under the name metrics and the status endpoint give it).
func (h *httpContext) teamName() string {
	if h.pool != nil && !h.pool.cfg.hasTeam(h.team) {
		return unknownTeamMetricName
	}
	return h.team
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

// failOpenPriority is the priority of a request forwarded without a grant
// (failure_mode "open"): the lowest a borrower can get.
func failOpenPriority(c fairshare.Class) int {
	return fairshare.BorrowBase + fairshare.MaxRank*fairshare.RankStep + int(c)
}

// unknownModel handles a scheduled request whose model no pool lists:
// with unknown_model "lowest" it is forwarded, uncounted, at the lowest
// borrowing priority (the client's own priority overwritten); else it is
// answered 404.
func (h *httpContext) unknownModel(req *request, body []byte, model string) types.Action {
	pc := h.pc
	if !pc.cfg.lowestUnknownModel {
		return h.refuse(unknownModelError(model), "")
	}
	if pc.cfg.rejectUnknown && !pc.knownTeam(h.team) {
		return h.refuse(unknownTeamError(pc.cfg.teamHeader, h.team, "*"), "")
	}
	h.state = stIgnored
	pc.met.pluginCounter(mUnscheduled, 1)
	if pc.cfg.shadow {
		return types.ActionContinue // forwarded as sent (shadow.go)
	}
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
