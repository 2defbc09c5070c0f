package host

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// BenchmarkSharedData: ns per proxy_get_shared_data / proxy_set_shared_data
// (16-byte value), the loop running inside the guest.
func BenchmarkSharedData(b *testing.B) {
	h := start(b, rawGuestPkg, Options{})
	h.SetSharedData("bench", []byte("0123456789abcdef"), 0)
	for _, fn := range []string{"get_shared_loop", "set_shared_loop"} {
		b.Run(fn[:3], func(b *testing.B) {
			b.ResetTimer()
			if _, err := h.Call(0, fn, uint64(b.N)); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkBodyGet: ns per proxy_get_buffer_bytes of the whole request body
// (4 KiB and 1 MiB), from inside on_request_body.
func BenchmarkBodyGet(b *testing.B) {
	for _, tc := range []struct {
		name string
		size int
		gets int
	}{{"4KiB", 4 << 10, 200}, {"1MiB", 1 << 20, 10}} {
		b.Run(tc.name, func(b *testing.B) {
			h := start(b, rawGuestPkg, Options{PluginConfig: []byte("bench_body_gets=" + strconv.Itoa(tc.gets-1))})
			body := bytes.Repeat([]byte("x"), tc.size)
			b.SetBytes(int64(tc.size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := h.NewStream(0)
				s.RequestHeaders(getReq, false)
				s.RequestBody(body, true)
				s.Complete()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tc.gets), "ns/get")
		})
	}
}

// BenchmarkStreamPassThrough: one request/response through the Stream API
// (no HTTP) with the minimal module: the virtual-time cost of a request.
func BenchmarkStreamPassThrough(b *testing.B) {
	h := start(b, passthroughPkg, Options{})
	body := []byte(`{"model":"m","messages":[]}`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := h.NewStream(0)
		s.RequestHeaders(getReq, false)
		s.RequestBody(body, true)
		s.ResponseHeaders([][2]string{{":status", "200"}}, false)
		s.ResponseBody(body, true)
		s.Complete()
	}
}

// holdGuestPkg is the benchmark filter that holds requests (testdata/holdguest).
const holdGuestPkg = "./hostcalls/host/testdata/holdguest"

// proxyChunk is the most the proxy (package proxy) reads from a body
// before handing the chunk to the filter.
const proxyChunk = 32 << 10

// BenchmarkHoldResume: one request with a 1 KiB and a 64 KiB body (in
// 32 KiB chunks, as the proxy reads them) and a small response, through
// the Stream API (no HTTP, virtual clock), three ways interleaved request
// by request so that they share the machine's load: "passthrough", the
// minimal module (every callback continues); "inline", holdguest
// buffering the body and rewriting it in its last body callback (an
// admitted request); "held", holdguest holding it at the end and
// rewriting and resuming it from the next tick (a held request
// dispatched). It reports ns per request of each (ns/passthrough,
// ns/inline, ns/held) and the ratios inline/passthrough and
// held/passthrough; ns/op is the sum of the three.
func BenchmarkHoldResume(b *testing.B) {
	clock := NewVirtualClock(time.Unix(1700000000, 0))
	for _, size := range []int{1 << 10, 64 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			type variant struct {
				name    string
				h       *Host
				tick    bool
				rewrite bool
				total   time.Duration
			}
			vs := []*variant{
				{name: "passthrough", h: start(b, passthroughPkg, Options{Clock: clock})},
				{name: "inline", h: start(b, holdGuestPkg, Options{Clock: clock, PluginConfig: []byte("inline")}), rewrite: true},
				{name: "held", h: start(b, holdGuestPkg, Options{Clock: clock, PluginConfig: []byte("hold")}), tick: true, rewrite: true},
			}
			request := func(v *variant) *Stream {
				s := v.h.NewStream(0)
				s.RequestHeaders(getReq, false)
				for off := 0; off < len(body); off += proxyChunk {
					end := min(off+proxyChunk, len(body))
					s.RequestBody(body[off:end], end == len(body))
				}
				if v.tick {
					v.h.Tick()
				}
				return s
			}
			for _, v := range vs { // once, untimed: each goes through (rewritten)
				s := request(v)
				fwd := s.ForwardedRequestBody()
				if !s.RequestDone() || len(fwd) != size || (v.rewrite && fwd[0] != '{') {
					b.Fatalf("%s: request not forwarded as expected: done=%v len=%d", v.name, s.RequestDone(), len(fwd))
				}
				s.Complete()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, v := range vs {
					t0 := time.Now()
					s := request(v)
					if !s.RequestDone() {
						b.Fatalf("%s: request still held", v.name)
					}
					s.ResponseHeaders([][2]string{{":status", "200"}}, false)
					s.ResponseBody([]byte(`{"ok":true}`), true)
					s.Complete()
					v.total += time.Since(t0)
				}
			}
			per := func(v *variant) float64 { return float64(v.total.Nanoseconds()) / float64(b.N) }
			for _, v := range vs {
				b.ReportMetric(per(v), "ns/"+v.name)
			}
			b.ReportMetric(per(vs[1])/per(vs[0]), "inline/passthrough")
			b.ReportMetric(per(vs[2])/per(vs[0]), "held/passthrough")
		})
	}
}

// BenchmarkModuleSize reports the size of the built test modules.
func BenchmarkModuleSize(b *testing.B) {
	for _, pkg := range []string{passthroughPkg, rawGuestPkg} {
		wasm := wasmbuild.Module(b, pkg)
		b.Run(pkg[len("./hostcalls/host/testdata/"):], func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_ = len(wasm)
			}
			b.ReportMetric(float64(len(wasm)), "bytes")
		})
	}
}

// callMixPkg is the benchmark filter that makes the plugin's host calls
// and nothing else (testdata/callmix).
const callMixPkg = "./hostcalls/host/testdata/callmix"

// BenchmarkHostCalls: the host's own cost for the host calls and
// callbacks the fairshare plugin makes per request. One request with a
// 1 KiB body and a small JSON response through the Stream API (virtual
// clock) two ways, interleaved request by request so that they share the
// machine's load: "passthrough", the minimal module (no callback is
// exported, so none runs); "callmix", a filter whose callbacks make the
// plugin's 20 host calls (6 of them calling back into its allocator) and
// nothing else. It reports ns per request of each, and ns/call: the
// difference spread over the 34 crossings of the boundary beyond the
// pass-through's (20 host calls, 6 allocations, 8 callbacks).
func BenchmarkHostCalls(b *testing.B) {
	clock := NewVirtualClock(time.Unix(1700000000, 0))
	body := bytes.Repeat([]byte("x"), 1<<10)
	resp := []byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10}}`)
	hdrs := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"content-type", "application/json"},
		{"content-length", strconv.Itoa(len(body))}, {"x-team", "a"}}
	rh := [][2]string{{":status", "200"}, {"content-type", "application/json"}, {"content-length", strconv.Itoa(len(resp))}}
	type variant struct {
		name  string
		h     *Host
		total time.Duration
	}
	vs := []*variant{
		{name: "passthrough", h: start(b, passthroughPkg, Options{Clock: clock, BufferLimit: 16 << 20})},
		{name: "callmix", h: start(b, callMixPkg, Options{Clock: clock, BufferLimit: 16 << 20})},
	}
	request := func(h *Host) *Stream {
		s := h.NewStream(0)
		s.RequestHeaders(hdrs, false)
		s.RequestBody(body, true)
		s.ResponseHeaders(rh, false)
		s.ResponseBody(resp, true)
		s.Complete()
		return s
	}
	for _, v := range vs { // once, untimed: each goes through
		if s := request(v.h); len(s.ForwardedRequestBody()) != len(body) || s.LocalReply() != nil {
			b.Fatalf("%s: request not forwarded: %d bytes, local reply %v", v.name, len(s.ForwardedRequestBody()), s.LocalReply())
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, v := range vs {
			t0 := time.Now()
			request(v.h)
			v.total += time.Since(t0)
		}
	}
	per := func(v *variant) float64 { return float64(v.total.Nanoseconds()) / float64(b.N) }
	for _, v := range vs {
		b.ReportMetric(per(v), "ns/"+v.name)
	}
	b.ReportMetric((per(vs[1])-per(vs[0]))/34, "ns/call")
}
