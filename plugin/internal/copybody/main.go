// Command copybody is a proxy-wasm filter that buffers each request body,
// reads it whole into the module and writes it whole back, and does
// nothing else: the least a filter that edits request bodies must do under
// Envoy's buffer rules (one copy in, one replace out; see
// hostcalls/host/FLOW-NOTES.md §2). Built like plugin.wasm, it is the floor
// of the plugin's request-path benchmarks at large bodies, next to the
// pass-through filter (plugin/internal/passthrough), which copies nothing.
package main

import (
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct {
	types.DefaultPluginContext
	buf []byte // the body read buffer, reused
}

// NewHttpContext implements types.PluginContext.
func (pc *pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{pc: pc} }

type httpContext struct {
	types.DefaultHttpContext
	pc *pluginContext
}

// OnHttpRequestHeaders removes content-length, as any filter that may
// change the body's length must.
func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	_ = hostcalls.RemoveHttpRequestHeader("content-length")
	return types.ActionContinue
}

// OnHttpRequestBody buffers the body and, at its end, copies it into the
// module and back.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	body, err := hostcalls.GetHttpRequestBodyInto(h.pc.buf, 0, size)
	if err != nil {
		return types.ActionContinue
	}
	if cap(body) > cap(h.pc.buf) {
		h.pc.buf = body[:0]
	}
	_ = hostcalls.ReplaceHttpRequestBody(body)
	return types.ActionContinue
}

func init() { hostcalls.SetVMContext(&vmContext{}) }

func main() {}
