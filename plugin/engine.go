package plugin

import (
	"bytes"
	"math"
	"strconv"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// engineMode is a pool's engine_priority: whether the priority the plugin
// decides is written into the request body for the engine to schedule by.
type engineMode uint8

// The engine_priority values. The zero value is the default, auto.
const (
	// engineAuto writes priorities until the engine refuses one (vLLM V0
	// under --scheduling-policy fcfs: 400 "Got priority N but Priority
	// scheduling is not enabled."); from then on the pool is as
	// engineOff, on every VM of the proxy.
	engineAuto engineMode = iota
	// engineOn writes priorities and never switches.
	engineOn
	// engineOff writes none: the client's priority is removed and the
	// engine schedules the pool's requests at its default, 0; reservations
	// and borrowing are enforced by holding at the gateway alone.
	engineOff
)

// Engine-priority values as configured and reported.
const (
	enginePriorityAuto = "auto"
	enginePriorityOn   = "on"
	enginePriorityOff  = "off"
)

// DefaultEnginePriority is a pool's engine_priority when the pool sets
// none.
const DefaultEnginePriority = enginePriorityAuto

// parseEngineMode maps an engine_priority value to its mode.
func parseEngineMode(s string) (engineMode, bool) {
	switch s {
	case enginePriorityAuto:
		return engineAuto, true
	case enginePriorityOn:
		return engineOn, true
	case enginePriorityOff:
		return engineOff, true
	}
	return engineAuto, false
}

// String is the configured name of m.
func (m engineMode) String() string {
	switch m {
	case engineOn:
		return enginePriorityOn
	case engineOff:
		return enginePriorityOff
	}
	return enginePriorityAuto
}

// checkEngineModes reports every pool with engine_priority "off" while
// holding is off: nothing would then keep borrowers out of other teams'
// reservations (the engine schedules every request alike), so the
// configuration is refused rather than run as a counter.
func checkEngineModes(ps *problems, c *config) {
	if c.holding() {
		return
	}
	for i := range c.pools {
		if c.pools[i].engine == engineOff {
			ps.add("pools["+strconv.Itoa(i)+"].engine_priority",
				"\"off\" needs flow control (max_queue_time > 0 and queue_limit > 0): without engine priorities only holding at the gateway enforces the reservations")
		}
	}
}

// refusalText is what vLLM V0 answers to a request with a non-zero
// priority when it runs without --scheduling-policy priority
// (vllm/engine/async_llm_engine.py, add_request_async, at vllm-project/vllm
// 9700a6a: ValueError "Got priority {priority} but Priority scheduling is
// not enabled.", which the OpenAI server turns into an error response, 400
// for a JSON response; a stream may carry it in its first event instead).
var refusalText = []byte("Priority scheduling is not enabled")

// engineState is a pool's engine priority as this VM knows it.
type engineState struct {
	mode engineMode
	// key is the shared-data key that marks the pool's engine as refusing
	// priorities ("<plugin>/fairshare/engine/<pool>"), read while mode is
	// auto and the pool has not switched.
	key string
	// off: this VM writes no priority for the pool (mode off, or auto
	// after a refusal).
	off bool
}

// Per-stream engine checks (httpContext.engine).
const (
	engineIdle  uint8 = iota // nothing to check
	engineSent               // auto: a non-zero priority went to the engine
	engineWatch              // its response may be the refusal: the body is read
)

// noPriority is the priority argument of rewrite and send that writes no
// priority at all: every priority member is removed.
const noPriority = math.MinInt

// engineKey is the shared-data key of pool's engine refusal.
func engineKey(plugin, pool string) string { return plugin + "/fairshare/engine/" + pool }

// startEngine sets ps's engine state at plugin start: a pool in auto mode
// whose engine already refused (the mark survives VM restarts and
// reconfigurations, as shared data does, but not a restart of Envoy)
// starts without priorities; mode "on" clears the mark, so that an
// operator who fixed the engine re-arms auto by deploying "on" once.
func (pc *pluginContext) startEngine(ps *poolState) {
	e := &ps.eng
	e.mode = ps.cfg.engine
	e.key = engineKey(pc.name, ps.cfg.name)
	switch e.mode {
	case engineOff:
		e.off = true
	case engineOn:
		if v, cas, err := hostcalls.GetSharedData(e.key); err == nil && len(v) > 0 {
			_ = hostcalls.SetSharedData(e.key, nil, cas)
		}
	case engineAuto:
		e.off = pc.engineMarked(ps)
	}
	pc.engineGauge(ps)
	// The refusal counter exists from the start, at 0, so that a rate
	// over it is defined before the first refusal.
	pc.met.buf = appendPoolMetric(pc.met.buf[:0], ps.cfg.name, mEngineRefused)
	pc.met.id(counterKind)
}

// engineMarked reports whether the pool's engine is marked as refusing
// priorities in shared data.
func (pc *pluginContext) engineMarked(ps *poolState) bool {
	v, _, err := hostcalls.GetSharedData(ps.eng.key)
	return err == nil && len(v) > 0
}

// enginePriority is the priority to write for a request of ps decided at
// prio: prio, or noPriority when the pool writes none. In auto mode it
// first reads the pool's mark (another VM may have seen the refusal), and
// marks the stream so that its response is checked for the refusal.
func (h *httpContext) enginePriority(ps *poolState, prio int) int {
	e := &ps.eng
	h.engine = engineIdle
	if e.mode == engineAuto && !e.off && h.pc.engineMarked(ps) {
		e.off = true
		hostcalls.LogInfof("fairshare: pool %s: the engine refuses priorities (marked by another VM): none written from now on", ps.cfg.name)
		h.pc.engineGauge(ps)
	}
	if e.off {
		return noPriority
	}
	if e.mode == engineAuto && prio != 0 {
		h.engine = engineSent
	}
	return prio
}

// engineHeaders arms the refusal check of a response to a request sent
// with a priority in auto mode: a 400 JSON response (whose body may be
// replaced, so its content-length goes) or an event stream (whose first
// chunk is read).
func (h *httpContext) engineHeaders() {
	if h.engine != engineSent {
		return
	}
	h.engine = engineIdle
	switch {
	case h.sse:
		h.engine = engineWatch
	case h.status == 400:
		h.engine = engineWatch
		_ = hostcalls.RemoveHttpResponseHeader("content-length")
	}
}

// engineResponse checks a watched response for the engine's refusal: the
// first chunk of an event stream, or a JSON response at its end. On a
// refusal the pool switches to no priorities and a JSON response that
// came in one chunk is replaced by the plugin's error, which says what to
// change.
func (h *httpContext) engineResponse(chunk []byte, eos bool) {
	if h.sse {
		h.engine = engineIdle
		if bytes.Contains(chunk, refusalText) {
			h.pc.engineRefused(h.pool)
		}
		return
	}
	if !eos {
		return
	}
	h.engine = engineIdle
	if h.overflow || !bytes.Contains(h.resp, refusalText) {
		return
	}
	h.pc.engineRefused(h.pool)
	if len(h.resp) == len(chunk) {
		if err := hostcalls.ReplaceHttpResponseBody(engineRefusedError(h.pool.cfg.name).body()); err != nil {
			hostcalls.LogErrorf("fairshare: replace response body: %v", err)
		}
	}
}

// engineRefused switches ps to no priorities after its engine refused
// one: on this VM at once, on the others through the shared mark they
// read before their next write. The VM that sets the mark logs it at
// critical level; the refusal is counted by every VM that sees one.
func (pc *pluginContext) engineRefused(ps *poolState) {
	pc.met.poolCounter(ps.cfg.name, mEngineRefused, 1)
	if ps.eng.off {
		return // a request forwarded before the switch
	}
	ps.eng.off = true
	pc.engineGauge(ps)
	v, cas, err := hostcalls.GetSharedData(ps.eng.key)
	if err == nil && len(v) > 0 {
		return // another VM marked it and logged it
	}
	if err := hostcalls.SetSharedData(ps.eng.key, []byte("refused"), cas); err != nil {
		return // another VM marked it first, or the mark could not be set (this VM is switched all the same)
	}
	msg := "fairshare: pool " + ps.cfg.name + ": the engine refused a priority (vLLM runs without --scheduling-policy priority): no priority is written for this pool from now on"
	if pc.cfg.holding() {
		msg += "; reservations and borrowing are enforced by holding at the gateway alone"
	} else {
		msg += "; flow control is off (max_queue_time \"0s\"), so nothing enforces the reservations any more: turn it on"
	}
	hostcalls.LogCritical(msg + ". Start vLLM with --scheduling-policy priority (then deploy engine_priority \"on\" once to re-arm), or set engine_priority \"off\"")
}

// engineGauge records whether ps writes priorities (1) or not (0) in
// fairshare.pool.<pool>.engine_priority.
func (pc *pluginContext) engineGauge(ps *poolState) {
	v := int64(1)
	if ps.eng.off {
		v = 0
	}
	pc.met.buf = appendPoolMetric(pc.met.buf[:0], ps.cfg.name, mEnginePriority)
	pc.met.set(v)
}

// engineRefusedError is the error the client of a refused request gets in
// place of the engine's.
func engineRefusedError(pool string) apiError {
	return apiError{400, "invalid_request_error", "priority",
		"the engine of pool " + strconv.Quote(pool) + " refused the gateway's priority: vLLM runs without --scheduling-policy priority. " +
			"The gateway writes no priority for this pool from now on: retry the request. To keep engine priorities, start vLLM with --scheduling-policy priority; " +
			"to run without them, set engine_priority \"off\" for the pool (with max_queue_time > 0)", "engine_priority"}
}

// engineInForce is the status endpoint's engine_priority_in_force of ps:
// "on" while priorities are written, "off" once they are not.
func (ps *poolState) engineInForce() string {
	if ps.eng.off {
		return enginePriorityOff
	}
	return enginePriorityOn
}
