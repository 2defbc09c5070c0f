package plugin

import (
	"math"
	"strconv"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Flow control: a borrower that finds no room is held at the gateway.
//
//	on_request_body(eos) ── Arrive ──► Granted ──► priority written, forwarded
//	                            │
//	                            ├────► Queued: StopIterationAndBuffer, held[id] = stream
//	                            │        │
//	                            │        │  a release on any VM of this Envoy, this VM's
//	                            │        │  dispatch tick, or a wake-up on its shared queue
//	                            │        ▼
//	                            │      Dispatch(holder) ── Dispatched ─► set_effective_context(stream),
//	                            │        │                              priority decided now written
//	                            │        │                              into the held body, continue
//	                            │        ├── Elsewhere ─► wake the holder of the head (its queue)
//	                            │        └── Blocked / Empty: wait
//	                            │      deadline (max_queue_time) ─► Cancel, 429 + Retry-After
//	                            │      client gone (on_log/on_done, or on_delete alone) ─► Cancel
//	                            └────► QueueFull / TeamQueueFull ─► 429 + Retry-After
//
// With hold_headers "on" the stream was already paused at its headers
// (StopIteration; Envoy's allow_on_headers_stop_iteration delivers the
// body callbacks all the same): Granted then continues headers and body
// together, and dispatch resumes both, the decision added to the request
// headers (decisionHeaders). A stream that gets no body callback within
// hold_headers_probe is continued by the tick (probe).
//
// Only the VM that paused a stream can resume it, so the record's queue
// names each waiting request's holder, and a VM that frees capacity for
// another VM's request wakes that VM through the shared queue it
// registered under its holder id.

// maxDispatch bounds the requests one call of dispatch sends on.
const maxDispatch = 256

// wakeQueueName is the name of the shared queue a holder listens on.
func wakeQueueName(holder uint32) string {
	return "fairshare/wake/" + strconv.FormatUint(uint64(holder), 16)
}

// hold records h as held: its stream stays paused with its body buffered
// until dispatch resumes it, its deadline answers it, or its client leaves.
func (pc *pluginContext) hold(h *httpContext, w fairshare.Waiting) types.Action {
	h.state = stHeld
	h.reqID = w.ID
	h.deadline = w.Deadline
	pc.held[w.ID] = h
	return types.ActionPause // StopIterationAndBuffer: the body stays held
}

// dispatch sends on this VM's held requests of pool ps whose turn has
// come, and wakes the holder of the head when it is another VM's. It runs
// from the tick, from a queue wake-up, and after a release in a stream's
// callback, whose context it then makes effective again (restore; 0 for
// none).
func (pc *pluginContext) dispatch(now time.Time, ps *poolState, restore uint32) {
	defer func() {
		if restore != 0 {
			_ = hostcalls.SetEffectiveContext(restore)
		}
	}()
	for i := 0; i < maxDispatch; i++ {
		// A read first: most ticks find the head blocked, or another VM's,
		// and then nothing is written (no compare-and-swap to race).
		if _, err := pc.rs.load(now, ps.rec); err == nil {
			w, st := ps.rec.p.Next(now)
			ps.waiters = ps.rec.p.Waiters()
			switch {
			case st == fairshare.Empty || st == fairshare.Blocked:
				return
			case w.Holder != pc.holder:
				pc.wake(w.Holder)
				return
			}
		}
		var (
			g  fairshare.Grant
			w  fairshare.Waiting
			st fairshare.DispatchStatus
		)
		err := pc.updatePool(now, ps, "dispatch", func(p *fairshare.Pool) {
			g, w, st = p.Dispatch(now, pc.holder)
			ps.waiters = p.Waiters()
		})
		if err != nil {
			return
		}
		switch st {
		case fairshare.Dispatched:
			h := pc.held[g.ID]
			delete(pc.held, g.ID)
			if h == nil || h.state != stHeld {
				// The stream is gone (its cancel failed): end the grant.
				r := pendingRelease{pool: ps, grant: g, team: g.Team}
				if !pc.settle(now, &r) {
					pc.keep(r)
				}
				continue
			}
			slot := ps.slot(g.Team)
			pc.met.request(ps.cfg.name, &g, slot)
			pc.met.queueTime(ps.cfg.name, slot, &g)
			h.resume(now, ps, g)
		case fairshare.Elsewhere:
			pc.wake(w.Holder)
			return
		default:
			return
		}
	}
}

// resume sends on a held request that dispatch granted: the priority
// decided now is written into its held body and its stream continued.
func (h *httpContext) resume(now time.Time, ps *poolState, g fairshare.Grant) {
	pc := h.pc
	h.pool = ps
	h.grant = g
	h.state = stGranted
	h.prio = g.Priority
	h.borrowing = borrows(&g)
	h.queued = time.Duration(g.At - g.Arrived)
	if err := hostcalls.SetEffectiveContext(h.ctxID); err != nil {
		// The stream is gone without its on_done having run here.
		h.undo(now)
		return
	}
	body, err := hostcalls.GetHttpRequestBody(0, math.MaxInt32)
	req, ok := inspect(body, pc.cfg.defaultMaxTokens, h.pooling)
	if err != nil || !ok {
		hostcalls.LogErrorf("fairshare: held request body unreadable at dispatch: %v", err)
		h.undo(now)
		h.reply(errBodyRead, ps.cfg.name)
		return
	}
	out := req.rewrite(pc.body, body, h.enginePriority(ps, h.prio), h.hide)
	if err := hostcalls.ReplaceHttpRequestBody(out); err != nil {
		hostcalls.LogErrorf("fairshare: replace held request body: %v", err)
		h.undo(now)
		h.reply(errRewrite, ps.cfg.name)
		return
	}
	if cap(out) <= 1<<20 {
		pc.body = out[:0]
	}
	h.markDispatched(now)
	h.decisionHeaders()
	if err := hostcalls.ResumeHttpRequest(); err != nil {
		hostcalls.LogErrorf("fairshare: resume held request: %v", err)
	}
}

// wake tells the VM of holder, through its shared queue, that the head of
// a pool's queue is its own to dispatch.
func (pc *pluginContext) wake(holder uint32) {
	id, ok := pc.queues[holder]
	if !ok {
		var err error
		if id, err = hostcalls.ResolveSharedQueue("", wakeQueueName(holder)); err != nil {
			return // not registered (yet): that VM's tick dispatches
		}
		pc.queues[holder] = id
	}
	if err := hostcalls.EnqueueSharedQueue(id, []byte{1}); err != nil {
		delete(pc.queues, holder) // the VM went away
	}
}

// OnQueueReady drains this VM's wake-up queue and dispatches its held
// requests.
func (pc *pluginContext) OnQueueReady(queueID uint32) {
	for {
		if _, err := hostcalls.DequeueSharedQueue(queueID); err != nil {
			break
		}
	}
	pc.dispatchHeld(time.Now())
}

// dispatchHeld runs dispatch for every pool in which this VM holds
// requests, then offers to the pool's fallbacks what it could not send on
// (respill).
func (pc *pluginContext) dispatchHeld(now time.Time) {
	if len(pc.held) == 0 {
		return
	}
	for _, ps := range pc.pools {
		for _, h := range pc.held {
			if h.pool == ps {
				pc.reestimate(now, ps)
				pc.dispatch(now, ps, 0)
				pc.respill(now, ps) // what ps cannot take, a fallback may (spill.go)
				break
			}
		}
	}
}

// reestimate lowers, in one record update, the KV demand of this VM's held
// requests of pool ps whose team's usual completion it has learnt since
// they arrived (Pool.Reestimate): a request recorded with its client's
// max_tokens before any of its team's completions was seen would otherwise
// keep that demand, and at the head of the queue hold every borrower.
func (pc *pluginContext) reestimate(now time.Time, ps *poolState) {
	var lower []*httpContext
	for _, h := range pc.held {
		if h.pool != ps || h.state != stHeld {
			continue
		}
		kv := satAdd(h.prompt, pc.means.completion(ps.cfg.name, teamOf(ps, h.team), h.choices, h.maxCompletion))
		if kv < h.kv {
			h.newKV = kv
			lower = append(lower, h)
		}
	}
	if len(lower) == 0 {
		return
	}
	err := pc.updatePool(now, ps, "reestimate", func(p *fairshare.Pool) {
		for _, h := range lower {
			p.Reestimate(now, pc.holder, h.reqID, h.newKV)
			p.ReestimateWork(now, pc.holder, h.reqID, workOf(pc.cfg.cost, h.prompt, h.newKV))
		}
	})
	if err != nil {
		return
	}
	for _, h := range lower {
		h.kv = h.newKV
		h.work = workOf(pc.cfg.cost, h.prompt, h.kv)
	}
}

// expire answers the held requests whose deadline has passed with 429 and
// a Retry-After, after taking them out of the queue.
func (pc *pluginContext) expire(now time.Time) {
	t := now.UnixNano()
	for id, h := range pc.held {
		if h.deadline > t {
			continue
		}
		delete(pc.held, id)
		var retry time.Duration
		ps := h.pool
		err := pc.updatePool(now, ps, "expire", func(p *fairshare.Pool) {
			p.Cancel(now, pc.holder, id)
			retry = p.RetryAfter(now, h.team)
		})
		if err != nil {
			retry = time.Second // the request expires in the record all the same
		}
		pc.met.teamCounter(ps.cfg.name, teamOf(ps, h.team), mQueueTimeout, 1)
		h.state = stDone
		if hostcalls.SetEffectiveContext(h.ctxID) == nil {
			h.tooMany(errQueueTimeout, retry, ps.cfg.name)
		}
	}
}

// cancel takes a held request whose client went away out of the queue.
func (h *httpContext) cancel(now time.Time) {
	pc := h.pc
	delete(pc.held, h.reqID)
	h.state = stDone
	ps := h.pool
	// On a failure the request leaves the queue at its deadline all the
	// same.
	_ = pc.updatePool(now, ps, "cancel", func(p *fairshare.Pool) { p.Cancel(now, pc.holder, h.reqID) })
}

// unprobe takes h out of the streams waiting for their first body
// callback.
func (pc *pluginContext) unprobe(h *httpContext) {
	if h.probeAt == 0 {
		return
	}
	h.probeAt = 0
	if pc.probing[h.ctxID] == h {
		delete(pc.probing, h.ctxID)
	}
}

// probe is the safety net of hold_headers "on": a stream stopped at its
// headers that has had no body callback for hold_headers_probe is taken
// to be on a host that converts the stop into StopAllIterationAndWatermark
// (Envoy < 1.35, or allow_on_headers_stop_iteration not set), under which
// no body callback comes until a continue. It is continued (its headers go
// upstream, its body then reaches on_request_body and is decided as with
// hold_headers "off"), and the setting to fix is logged once at critical
// level: requests are delayed by the probe, never hung.
func (pc *pluginContext) probe(now time.Time) {
	t := now.UnixNano()
	for id, h := range pc.probing {
		if h.probeAt > t {
			continue
		}
		pc.unprobe(h)
		h.headersHeld = false
		if hostcalls.SetEffectiveContext(id) != nil {
			continue
		}
		if err := hostcalls.ResumeHttpRequest(); err != nil {
			hostcalls.LogErrorf("fairshare: continue a request stopped at its headers: %v", err)
		}
		if !pc.probeWarned {
			pc.probeWarned = true
			hostcalls.LogCriticalf("fairshare: hold_headers is \"on\" but no body callback reached a request stopped at its headers within hold_headers_probe (%s): "+
				"the host is holding the body until a continue (set allow_on_headers_stop_iteration: true in the Wasm filter's PluginConfig, Envoy >= 1.35, or hold_headers \"off\"), "+
				"or the client sent no body for that long; such requests are continued after hold_headers_probe (logged once)", pc.cfg.holdHeadersProbe)
		}
	}
}
