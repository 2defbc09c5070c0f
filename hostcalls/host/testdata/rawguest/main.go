// Command rawguest is the host package's own test filter. It calls the
// proxy-wasm host functions through raw go:wasmimport declarations (not the
// hostcalls guest wrappers), so the host is tested on its own. Its
// behaviour is chosen by the plugin configuration, one "key=value" per line:
//
//	req_headers=N      value returned by on_request_headers (default 0)
//	resp_headers=N     value returned by on_response_headers
//	req_body=MODE      buffer (1 until end of stream, then 0) | continue | nobuffer | watermark
//	resp_body=MODE     same for the response
//	req_eos_op=OP      at the request's end of stream: replace:T | append:T | prepend:T | middle:T
//	resp_eos_op=OP     same for the response
//	local_reply=PHASE  req_headers | req_body | resp_headers | resp_body: send a 403
//	mutate_in_body=1   try to change request headers from on_request_body
//	tick_ms=N          tick period set in on_configure
//	http_call=CLUSTER  http_call from on_request_headers, stop, resume from the answer
//	remove_cl=1        remove content-length in on_request_headers
//	crash_on=req_headers  panic (trap) in on_request_headers
//
// Every callback logs what it saw; tests read the log and the transcript.
package main

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg string) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(t, start, max uint32, ptr unsafe.Pointer, size *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(t, start, size uint32, data string) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(t uint32, key string, ptr unsafe.Pointer, size *uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(t uint32, key string, value string) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(t uint32, key string) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key string, ptr unsafe.Pointer, size *uint32, cas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key string, value string, cas uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, details string, body string, hdrs string, grpc int32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(upstream string, hdrs string, body string, trailers string, timeout uint32, token *uint32) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(t uint32) uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(code *uint32, ptr unsafe.Pointer, size *uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(t uint32, name string, id *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, delta int64) uint32

func log(msg string) { proxyLog(2, msg) }

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// bytesOf turns a host-returned (ptr, size) into a slice.
func bytesOf(p *byte, n uint32) []byte {
	if p == nil {
		return nil
	}
	return unsafe.Slice(p, n)
}

func getBuffer(t, start, max uint32) ([]byte, uint32) {
	var p *byte
	var n uint32
	st := proxyGetBufferBytes(t, start, max, unsafe.Pointer(&p), &n)
	return bytesOf(p, n), st
}

func getHeader(t uint32, key string) (string, uint32) {
	var p *byte
	var n uint32
	st := proxyGetHeaderMapValue(t, key, unsafe.Pointer(&p), &n)
	return string(bytesOf(p, n)), st
}

// GetShared returns the value and cas of key.
func getShared(key string) ([]byte, uint32, uint32) {
	var p *byte
	var n, cas uint32
	st := proxyGetSharedData(key, unsafe.Pointer(&p), &n, &cas)
	return bytesOf(p, n), cas, st
}

func pairs(kv ...string) string {
	n := len(kv) / 2
	b := make([]byte, 4+8*n)
	binary.LittleEndian.PutUint32(b, uint32(n))
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4+8*i:], uint32(len(kv[2*i])))
		binary.LittleEndian.PutUint32(b[8+8*i:], uint32(len(kv[2*i+1])))
	}
	for _, s := range kv {
		b = append(b, s...)
		b = append(b, 0)
	}
	return string(b)
}

var (
	cfg       = map[string]string{}
	calls     = map[uint32]uint32{} // http_call token → context
	requests  uint32
	retries   uint32
	benchGets int
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) *byte {
	b := make([]byte, max(size, 1))
	return &b[0]
}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, parent uint32) {}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) bool {
	b, st := getBuffer(6, 0, size)
	log("vm_start config=" + string(b) + " status=" + itoa(st))
	return string(b) != "fail"
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) bool {
	b, st := getBuffer(7, 0, size)
	log("configure size=" + itoa(size) + " status=" + itoa(st))
	cfg = map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			cfg[k] = v
		}
	}
	if cfg["fail"] == "1" {
		return false
	}
	if ms, err := strconv.Atoi(cfg["tick_ms"]); err == nil {
		proxySetTickPeriod(uint32(ms))
	}
	benchGets, _ = strconv.Atoi(cfg["bench_body_gets"])
	var id uint32
	proxyDefineMetric(0, "rawguest.requests", &id)
	return true
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) {
	for {
		v, cas, _ := getShared("ticks")
		n, _ := strconv.Atoi(string(v))
		if proxySetSharedData("ticks", strconv.Itoa(n+1), cas) == 0 {
			break
		}
	}
	log("tick")
}

func num(key string) uint32 {
	n, _ := strconv.Atoi(cfg[key])
	return uint32(n)
}

func localReply() {
	st := proxySendLocalResponse(403, "denied by rawguest", "nope", pairs("x-why", "test"), -1)
	log("send_local_response status=" + itoa(st))
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(ctx, n uint32, eos bool) uint32 {
	path, _ := getHeader(0, ":path")
	log("request_headers ctx=" + itoa(ctx) + " n=" + itoa(n) + " path=" + path)
	var id uint32
	proxyDefineMetric(0, "rawguest.requests", &id)
	proxyIncrementMetric(id, 1)
	if cfg["remove_cl"] == "1" {
		proxyRemoveHeaderMapValue(0, "content-length")
	}
	if cfg["mutate_in_body"] == "1" {
		log("early replace status=" + itoa(proxyReplaceHeaderMapValue(0, "x-early", "1")))
	}
	if cfg["local_reply"] == "req_headers" {
		localReply()
		return 0
	}
	if cfg["crash_on"] == "req_headers" {
		panic("rawguest: crash_on=req_headers")
	}
	if c := cfg["http_call"]; c != "" {
		var token uint32
		st := proxyHTTPCall(c, pairs(":method", "GET", ":path", "/auth", ":authority", "auth"), "", "", 1000, &token)
		log("http_call status=" + itoa(st))
		if st == 0 {
			calls[token] = ctx
			return 1
		}
	}
	return num("req_headers")
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nh, bs, nt uint32) {
	body, _ := getBuffer(4, 0, bs)
	status, _ := getHeader(6, ":status")
	var code, n uint32
	var p *byte
	proxyGetStatus(&code, unsafe.Pointer(&p), &n)
	log("http_call_response token=" + itoa(token) + " headers=" + itoa(nh) + " status=" + status +
		" body=" + string(body) + " code=" + itoa(code) + " msg=" + string(bytesOf(p, n)))
	if ctx, ok := calls[token]; ok {
		delete(calls, token)
		proxySetEffectiveContext(ctx)
		proxyReplaceHeaderMapValue(0, "x-auth", status)
		proxyContinueStream(0)
	}
}

func bodyCallback(resp bool, ctx, size uint32, eos bool) uint32 {
	t, mode, opKey, name := uint32(0), cfg["req_body"], "req_eos_op", "request_body"
	if resp {
		t, mode, opKey, name = 1, cfg["resp_body"], "resp_eos_op", "response_body"
	}
	for i := 0; i < benchGets; i++ {
		getBuffer(t, 0, size)
	}
	b, _ := getBuffer(t, 0, size)
	log(name + " size=" + itoa(size) + " eos=" + strconv.FormatBool(eos) + " body=" + string(b))
	if !resp && cfg["mutate_in_body"] == "1" {
		log("late replace status=" + itoa(proxyReplaceHeaderMapValue(0, "x-late", "1")))
		_, st := getHeader(0, ":path")
		log("late get status=" + itoa(st))
	}
	if (!resp && cfg["local_reply"] == "req_body") || (resp && cfg["local_reply"] == "resp_body") {
		localReply()
		return 0
	}
	switch mode {
	case "nobuffer":
		return 3
	case "watermark":
		if !eos {
			return 2
		}
	case "buffer":
		if !eos {
			return 1
		}
	}
	if eos {
		if op, arg, ok := strings.Cut(cfg[opKey], ":"); ok {
			var st uint32
			switch op {
			case "replace":
				st = proxySetBufferBytes(t, 0, size, arg)
			case "append":
				st = proxySetBufferBytes(t, size, 0, arg)
			case "prepend":
				st = proxySetBufferBytes(t, 0, 0, arg)
			case "middle":
				st = proxySetBufferBytes(t, 1, 0, arg)
			}
			after, _ := getBuffer(t, 0, 1<<30)
			log("set_buffer_bytes " + op + " status=" + itoa(st) + " body=" + string(after))
		}
	}
	return 0
}

//go:wasmexport proxy_on_request_body
func onRequestBody(ctx, size uint32, eos bool) uint32 { return bodyCallback(false, ctx, size, eos) }

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(ctx, n uint32, eos bool) uint32 {
	st, _ := getHeader(2, ":status")
	log("response_headers ctx=" + itoa(ctx) + " status=" + st)
	proxyReplaceHeaderMapValue(2, "x-rawguest", "1")
	if cfg["local_reply"] == "resp_headers" {
		localReply()
		return 0
	}
	return num("resp_headers")
}

//go:wasmexport proxy_on_response_body
func onResponseBody(ctx, size uint32, eos bool) uint32 { return bodyCallback(true, ctx, size, eos) }

//go:wasmexport proxy_on_request_trailers
func onRequestTrailers(ctx, n uint32) uint32 { log("request_trailers n=" + itoa(n)); return 0 }

//go:wasmexport proxy_on_response_trailers
func onResponseTrailers(ctx, n uint32) uint32 { log("response_trailers n=" + itoa(n)); return 0 }

//go:wasmexport proxy_on_log
func onLog(ctx uint32) {
	path, st := getHeader(0, ":path")
	log("log ctx=" + itoa(ctx) + " path=" + path + " status=" + itoa(st))
	reqT, reqSt := getHeader(1, "x-t")
	respT, respSt := getHeader(3, "x-rt")
	log("trailers-at-log request=" + reqT + " status=" + itoa(reqSt) + " response=" + respT + " status=" + itoa(respSt))
}

//go:wasmexport proxy_on_done
func onDone(ctx uint32) bool { log("done ctx=" + itoa(ctx)); return true }

//go:wasmexport proxy_on_delete
func onDelete(ctx uint32) { log("delete ctx=" + itoa(ctx)) }

// incShared adds 1 to the shared counter n times with get / CAS-set
// retries and returns n; retriesSeen reports the CAS mismatches.
//
//go:wasmexport inc_shared
func incShared(n uint32) uint32 {
	done := uint32(0)
	for done < n {
		v, cas, _ := getShared("counter")
		c, _ := strconv.Atoi(string(v))
		switch proxySetSharedData("counter", strconv.Itoa(c+1), cas) {
		case 0:
			done++
		case 8:
			retries++
		default:
			return done
		}
	}
	return done
}

//go:wasmexport retries
func retriesSeen() uint32 { return retries }

// getSharedLoop and setSharedLoop run one host call n times (benchmarks).
//
//go:wasmexport get_shared_loop
func getSharedLoop(n uint32) {
	for i := uint32(0); i < n; i++ {
		getShared("bench")
	}
}

//go:wasmexport set_shared_loop
func setSharedLoop(n uint32) {
	for i := uint32(0); i < n; i++ {
		proxySetSharedData("bench", "0123456789abcdef", 0)
	}
}

// crash traps the VM.
//
//go:wasmexport crash
func crash() { panic("rawguest: crash") }

// nowUnixMs returns the guest's time.Now in Unix milliseconds.
//
//go:wasmexport now_unix_ms
func nowUnixMs() int64 { return time.Now().UnixMilli() }

func main() {}
