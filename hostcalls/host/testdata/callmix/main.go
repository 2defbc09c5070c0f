// Command callmix is the host package's benchmark filter for the cost of
// host calls and callbacks: per request it makes the host calls the
// fairshare plugin makes for a small request, and nothing else (no parsing,
// no scheduling), so that its time minus the pass-through's is the host's
// own cost for them. Per request: the request headers' pairs and the
// removal of content-length; in the last request body callback two clock
// reads (time.Now), the body, a shared-data read and write, a counter and
// the body written back; the response headers' pairs and five replaced
// headers; in the last response body callback the body, two clock reads
// and a shared-data read and write. The callbacks of a stream's life
// (context create, log, done, delete) are exported too.
package main

import (
	"time"
	"unsafe"
)

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(t, start, max uint32, ptr unsafe.Pointer, size *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(t, start, size uint32, data unsafe.Pointer, n uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(t uint32, ptr unsafe.Pointer, size *uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(t uint32, key string, value string) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(t uint32, key string) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key string, ptr unsafe.Pointer, size *uint32, cas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key string, value unsafe.Pointer, n uint32, cas uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(t uint32, name string, id *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, delta int64) uint32

// key is the shared-data key (as long as the plugin's pool record key).
const key = "fairshare-bench/fairshare/pool/small/v4"

var (
	counter uint32
	// arena serves the host's allocations: the buffers it returns are
	// used before the next callback, as the plugin's arena allocator does.
	arena [64 << 10]byte
	used  int
	sink  int64
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) *byte {
	if int(size) > len(arena)-used {
		b := make([]byte, max(size, 1))
		return &b[0]
	}
	p := &arena[used]
	used += int(size+7) &^ 7
	return p
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) bool {
	proxyDefineMetric(0, "callmix_requests", &counter)
	value := make([]byte, 96)
	proxySetSharedData(key, unsafe.Pointer(&value[0]), uint32(len(value)), 0)
	return true
}

//go:wasmexport proxy_on_context_create
func onContextCreate(ctx, parent uint32) {}

func pairs(t uint32) {
	var p *byte
	var n uint32
	proxyGetHeaderMapPairs(t, unsafe.Pointer(&p), &n)
}

func body(t, size uint32) (*byte, uint32) {
	var p *byte
	var n uint32
	proxyGetBufferBytes(t, 0, size, unsafe.Pointer(&p), &n)
	return p, n
}

func clocks() {
	sink += time.Now().UnixNano()
}

// update reads the shared record and writes it back with its cas.
func update() {
	var p *byte
	var n, cas uint32
	if proxyGetSharedData(key, unsafe.Pointer(&p), &n, &cas) == 0 && p != nil {
		proxySetSharedData(key, unsafe.Pointer(p), n, cas)
	}
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(ctx, n uint32, eos bool) uint32 {
	used = 0
	pairs(0)
	proxyRemoveHeaderMapValue(0, "content-length")
	return 0
}

//go:wasmexport proxy_on_request_body
func onRequestBody(ctx, size uint32, eos bool) uint32 {
	if !eos {
		return 1
	}
	used = 0
	clocks()
	p, n := body(0, size)
	update()
	proxyIncrementMetric(counter, 1)
	if p != nil {
		proxySetBufferBytes(0, 0, 1<<31-1, unsafe.Pointer(p), n)
	}
	return 0
}

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(ctx, n uint32, eos bool) uint32 {
	used = 0
	pairs(2)
	proxyReplaceHeaderMapValue(2, "x-fairshare-team", "a")
	proxyReplaceHeaderMapValue(2, "x-fairshare-pool", "small")
	proxyReplaceHeaderMapValue(2, "x-fairshare-priority", "0")
	proxyReplaceHeaderMapValue(2, "x-fairshare-borrowing", "false")
	proxyReplaceHeaderMapValue(2, "x-fairshare-queue-time", "0.000")
	return 0
}

//go:wasmexport proxy_on_response_body
func onResponseBody(ctx, size uint32, eos bool) uint32 {
	if !eos {
		return 0
	}
	used = 0
	body(1, size)
	clocks()
	update()
	return 0
}

//go:wasmexport proxy_on_log
func onLog(ctx uint32) {}

//go:wasmexport proxy_on_done
func onDone(ctx uint32) bool { return true }

//go:wasmexport proxy_on_delete
func onDelete(ctx uint32) {}

func main() {}
