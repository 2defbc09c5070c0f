// Command holdguest is the host package's benchmark filter for holding a
// request and dispatching it later. It buffers every request body
// (StopIterationAndBuffer) and, at the end of the body, either rewrites
// its first byte and continues at once (plugin configuration "inline"), or
// records the stream and returns StopIterationAndBuffer again ("hold"):
// then every tick (1 ms) makes each held stream effective, reads its body,
// replaces it with the rewritten copy and continues it. The headers
// callback removes content-length, as a filter that rewrites bodies must.
// It logs nothing, so a benchmark measures the host calls and the hold.
package main

import "unsafe"

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(t, start, max uint32, ptr unsafe.Pointer, size *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(t, start, size uint32, data unsafe.Pointer, n uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(t uint32, key string) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(t uint32) uint32

var (
	hold bool
	held []uint32
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) *byte {
	b := make([]byte, max(size, 1))
	return &b[0]
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) bool {
	var p *byte
	var n uint32
	proxyGetBufferBytes(7, 0, size, unsafe.Pointer(&p), &n)
	if p != nil && string(unsafe.Slice(p, n)) == "hold" {
		hold = true
		proxySetTickPeriod(1)
	}
	return true
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(ctx, n uint32, eos bool) uint32 {
	proxyRemoveHeaderMapValue(0, "content-length")
	return 0
}

// rewrite replaces the effective stream's request body with a copy whose
// first byte is '{' (the body is read and written whole, as a filter that
// writes the priority into it does).
func rewrite(size uint32) {
	var p *byte
	var n uint32
	if proxyGetBufferBytes(0, 0, size, unsafe.Pointer(&p), &n) != 0 || p == nil {
		return
	}
	b := unsafe.Slice(p, n)
	b[0] = '{'
	proxySetBufferBytes(0, 0, 1<<31-1, unsafe.Pointer(p), n)
}

//go:wasmexport proxy_on_request_body
func onRequestBody(ctx, size uint32, eos bool) uint32 {
	if !eos {
		return 1
	}
	if hold {
		held = append(held, ctx)
		return 1
	}
	rewrite(size)
	return 0
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) {
	for _, ctx := range held {
		if proxySetEffectiveContext(ctx) != 0 {
			continue // the stream ended meanwhile
		}
		rewrite(1<<31 - 1)
		proxyContinueStream(0)
	}
	held = held[:0]
}

//go:wasmexport proxy_on_done
func onDone(ctx uint32) bool { return true }

func main() {}
