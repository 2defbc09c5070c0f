// Command callfloor is a proxy-wasm filter that makes, for every request,
// the host calls plugin.wasm makes for a scheduled request admitted at
// once (its transcript: the request and response header maps read once,
// content-length removed, the body read whole and written back with a
// priority member as the plugin writes it, the pool record read and
// written with compare-and-swap at admission and at release, one counter,
// five response headers, the response body read whole, the clock read
// at the request headers, the request body, the response headers and the
// response body, the three latency histograms and two token counters),
// with constant data and no other work. Built like plugin.wasm, it
// is the floor of the plugin's design under this ABI and host: what lies
// between it and the plugin is the plugin's own code.
package main

import (
	"errors"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

const key = "callfloor/pool"

// engineKey stands for the pool's engine-refusal mark, which the plugin
// reads before it writes a priority (engine_priority "auto", the default).
const engineKey = "callfloor/engine"

// head is the body's new start: the priority member after the object's {.
var head = []byte(`{"priority":0,`)

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct {
	types.DefaultPluginContext
	hdr     []byte
	pairs   [][2]string
	body    []byte
	out     []byte
	resp    []byte
	rec     []byte
	metric  uint32
	retries uint32
	hist    uint32         // as the plugin's first_byte_ms and the others
	tokens  uint32         // as the plugin's prompt_tokens_total and completion_tokens_total
	free    []*httpContext // deleted stream contexts, reused
	now     time.Time
}

// OnPluginStart implements types.PluginContext.
func (pc *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	pc.metric, _ = hostcalls.DefineMetric(hostcalls.MetricCounter, "callfloor_requests_total")
	pc.retries, _ = hostcalls.DefineMetric(hostcalls.MetricCounter, "callfloor_cas_retries_total")
	pc.hist, _ = hostcalls.DefineMetric(hostcalls.MetricHistogram, "callfloor_latency_ms")
	pc.tokens, _ = hostcalls.DefineMetric(hostcalls.MetricCounter, "callfloor_tokens_total")
	pc.rec = make([]byte, 0, 64<<10)
	pc.hdr = make([]byte, 0, hostcalls.ArenaSize) // as the plugin's headerBuffer
	if _, _, err := hostcalls.GetSharedData(key); err != nil {
		_ = hostcalls.SetSharedData(key, make([]byte, 64), 0)
	}
	return types.OnPluginStartStatusOK
}

// NewHttpContext implements types.PluginContext: a deleted stream's
// context, as the plugin reuses them, or a new one.
func (pc *pluginContext) NewHttpContext(uint32) types.HttpContext {
	if n := len(pc.free); n > 0 {
		h := pc.free[n-1]
		pc.free = pc.free[:n-1]
		return h
	}
	return &httpContext{pc: pc}
}

// DeleteHttpContext implements hostcalls.HttpContextDeleter: the context
// is kept for the next stream (no allocation per request, as the plugin).
func (pc *pluginContext) DeleteHttpContext(ctx types.HttpContext) {
	if h, ok := ctx.(*httpContext); ok && len(pc.free) < 64 {
		pc.free = append(pc.free, h)
	}
}

type httpContext struct {
	types.DefaultHttpContext
	pc *pluginContext
}

// update reads the pool record and writes it back with compare-and-swap,
// again while another VM wrote it in between (counted in
// callfloor_cas_retries_total): the plugin's update with nothing between
// the read and the write.
func (pc *pluginContext) update() {
	for range 100 {
		v, cas, err := hostcalls.GetSharedDataInto(pc.rec[:0], key)
		if err != nil {
			return
		}
		if !errors.Is(hostcalls.SetSharedData(key, v, cas), types.ErrorStatusCasMismatch) {
			return
		}
		_ = hostcalls.IncrementMetric(pc.retries, 1)
	}
}

// OnHttpRequestHeaders reads the clock and the header map and removes
// content-length.
func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	pc := h.pc
	pc.now = time.Now()
	pc.pairs, pc.hdr, _ = hostcalls.GetHeaderMapPairsInto(pc.hdr, pc.pairs, hostcalls.MapHTTPRequestHeaders)
	_ = hostcalls.RemoveHttpRequestHeader("content-length")
	return types.ActionContinue
}

// OnHttpRequestBody buffers the body and, at its end, reads it, updates
// the record, counts the request and writes the body back with a priority.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	pc := h.pc
	pc.now = time.Now()
	body, err := hostcalls.GetHttpRequestBodyInto(pc.body, 0, size)
	if err != nil || len(body) == 0 {
		return types.ActionContinue
	}
	if cap(body) > cap(pc.body) {
		pc.body = body[:0]
	}
	pc.update()
	_ = hostcalls.IncrementMetric(pc.metric, 1)
	_, _, _ = hostcalls.GetSharedData(engineKey) // missing: priorities are written
	// As the plugin writes it: a short body joined with the member in one
	// replace; from 1 KiB, the member replaces the body's start and the
	// rest is appended from the read buffer (no copy in the module).
	if rest := body[1:]; len(rest) < 1<<10 {
		pc.out = append(append(pc.out[:0], head...), rest...)
		_ = hostcalls.ReplaceHttpRequestBody(pc.out)
	} else {
		_ = hostcalls.ReplaceHttpRequestBody(head)
		_ = hostcalls.AppendHttpRequestBody(rest)
	}
	return types.ActionContinue
}

// OnHttpResponseHeaders reads the header map, sets five headers, reads
// the clock and records two histograms.
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	pc := h.pc
	pc.pairs, pc.hdr, _ = hostcalls.GetHeaderMapPairsInto(pc.hdr, pc.pairs, hostcalls.MapHTTPResponseHeaders)
	_ = hostcalls.ReplaceHttpResponseHeader("x-fairshare-team", "a")
	_ = hostcalls.ReplaceHttpResponseHeader("x-fairshare-pool", "p")
	_ = hostcalls.ReplaceHttpResponseHeader("x-fairshare-priority", "0")
	_ = hostcalls.ReplaceHttpResponseHeader("x-fairshare-borrowing", "false")
	_ = hostcalls.ReplaceHttpResponseHeader("x-fairshare-queue-time", "0.000")
	//lint:ignore S1012 time.Since reads only the monotonic clock; the plugin reads both, and the floor must make its calls
	ms := time.Now().Sub(pc.now).Milliseconds() // Now: both WASI clocks, as the plugin reads them
	_ = hostcalls.RecordMetric(pc.hist, uint64(ms))
	_ = hostcalls.RecordMetric(pc.hist, uint64(ms))
	return types.ActionContinue
}

// OnHttpResponseBody buffers the response and, at its end, reads it,
// reads the clock, records a histogram, adds to two counters and updates
// the record.
func (h *httpContext) OnHttpResponseBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	pc := h.pc
	resp, err := hostcalls.GetBufferBytesInto(pc.resp, hostcalls.BufferHTTPResponseBody, 0, size)
	if err == nil && cap(resp) > cap(pc.resp) {
		pc.resp = resp[:0]
	}
	//lint:ignore S1012 time.Since reads only the monotonic clock; the plugin reads both, and the floor must make its calls
	ms := time.Now().Sub(pc.now).Milliseconds() // Now: both WASI clocks, as the plugin reads them
	_ = hostcalls.RecordMetric(pc.hist, uint64(ms))
	_ = hostcalls.IncrementMetric(pc.tokens, 1)
	_ = hostcalls.IncrementMetric(pc.tokens, 1)
	pc.update()
	return types.ActionContinue
}

func init() { hostcalls.SetVMContext(&vmContext{}) }

func main() {}
