package plugin

import (
	"bytes"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

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

// tracking reports whether the response is followed (usage, headers).
func (h *httpContext) tracking() bool { return h.state == stGranted || h.state == stForwarded }

// OnHttpResponseHeaders adds the x-fairshare-* headers and prepares the
// usage reader.
func (h *httpContext) OnHttpResponseHeaders(_ int, eos bool) types.Action {
	if !h.tracking() {
		if h.wouldRefuse != "" && h.pc.cfg.responseHeaders {
			h.shadowHeaders() // forwarded in shadow mode, not followed
		}
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
		_ = hostcalls.ReplaceHttpResponseHeader(HeaderTeam, h.teamName())
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
		if h.spilledFrom != nil {
			_ = hostcalls.ReplaceHttpResponseHeader(HeaderSpilledFrom, h.spilledFrom.cfg.name)
		}
		h.userHeaders()
		if pc.cfg.shadow {
			h.shadowHeaders()
		}
	}
	if hasStatus {
		h.status = atoi(status)
	}
	h.sse = eventStream(ct)
	h.responseStarted()
	h.engineHeaders()
	h.learnEngine()
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
		h.eventChunk(chunk)
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
	if h.engine == engineWatch {
		h.engineResponse(chunk, eos)
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
	h.pc.unprobe(h)
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
	h.responseEnded(now, complete, &u)
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
