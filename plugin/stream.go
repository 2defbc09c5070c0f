package plugin

import (
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

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
	user      string // the user within the team (users.go), "" for none
	class     fairshare.Class
	pool      *poolState
	slot      *teamSlot // the pool's slot of the team (decide), nil until then
	grant     fairshare.Grant
	prio      int
	borrowing bool
	// headersHeld: the request headers were stopped in on_request_headers
	// (hold_headers "on") and not released yet, so the decision can still
	// go into them. probeAt (unix ns, 0: not probing) is when the stream,
	// without a body callback by then, is continued (flow.go probe).
	headersHeld bool
	probeAt     int64
	// spilledFrom is the pool the request was for when spill-over moved
	// it to pool (spill.go); nil otherwise.
	spilledFrom *poolState

	pooling bool  // a pooling endpoint: nothing is generated
	choices int64 // prompts × n: the completions the request asks for
	// maxCompletion is the request's completion cap per choice
	// (max_tokens); kv the KV demand it was recorded with.
	maxCompletion, kv int64
	newKV             int64   // scratch of reestimate
	work              float64 // its work demand (workOf), cost units: what a within-share grant takes from the team's work bucket
	json              bool    // the content type is JSON (or absent)
	sniffed           bool    // stStrip: sniff found a body that may be JSON
	headSeen          bool    // stStrip: sniff has read the body's first four bytes
	scanned           int     // stStrip: the body's bytes sniff knows to be whitespace or BOM
	prompt            int64   // prompt tokens estimated from the request
	hide              bool    // the plugin added include_usage: hide the usage chunk
	sse               bool    // the response is an event stream
	scan              sseScanner
	status            int    // response status, 0 until the response headers
	resp              []byte // bounded copy of a JSON response
	overflow          bool   // resp exceeded max_response_bytes

	// Latency (latency.go): arrival (request headers) and dispatch (the
	// body sent upstream) in unix ns, whether the first byte is recorded,
	// and the event stream's first-line matcher.
	arrived, dispatched int64
	firstSeen           bool
	ev                  uint8
	evMid               bool
	engine              uint8 // the engine-refusal check of the response (engine.go)

	// Shadow mode (shadow.go): enforce mode would have held the request,
	// or refused it for wouldRefuse (a reason; "" for none).
	wouldHold   bool
	wouldRefuse string
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
// host's proxy_on_delete no callback reaches the stream's context. A
// stream still granted, forwarded or held here was deleted without
// on_done (a host that skips it; Envoy never does), and is ended as
// on_done ends it (OnHttpStreamDone), so that it holds no slot until
// request_timeout and no queue keeps it: a granted one is released with
// the best estimate, as a reset one is; a held one is taken out of this
// VM's queue and the pool's (Cancel), and its context, as before, is not
// kept. Any other context is cleared and kept for the next stream, so
// that a request allocates no stream context.
func (pc *pluginContext) DeleteHttpContext(ctx types.HttpContext) {
	h, ok := ctx.(*httpContext)
	if !ok || h.pc != pc {
		return
	}
	pc.unprobe(h)
	switch {
	case h.state == stHeld:
		if pc.held[h.reqID] == h {
			h.cancel(time.Now())
		}
		return
	case h.tracking():
		h.finish(false)
	}
	if len(pc.free) >= maxFreeStreams {
		return
	}
	*h = httpContext{}
	pc.free = append(pc.free, h)
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
