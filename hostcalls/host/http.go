package host

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// proxySendLocalResponse is proxy_send_local_response(status, details_ptr,
// details_len, body_ptr, body_len, hdrs_ptr, hdrs_len, grpc_status) → status.
//
// Ends the effective HTTP stream with a local reply, from any callback:
// the stream's own, or a tick, on_queue_ready, an http_call answer or
// another stream's callback after proxy_set_effective_context (a held
// request answered 429). As in Envoy the reply is deferred until the
// running callback returns; a stream callback's result is then forced to
// stop and no further filter callback but the end runs (the reply does
// not go through this filter's response callbacks). Spaces in details
// become '_'; grpc_status outside 0..16 means none. If the response
// headers were already sent, the stream is reset instead. OK (also with
// no HTTP stream effective, e.g. a tick that did not set one: Envoy's
// root context has no decoder callbacks and the call does nothing; the
// transcript says so); BAD_ARGUMENT: malformed headers (Envoy would send
// the reply without them); INVALID_MEMORY_ACCESS.
//
//	details_ptr      body_ptr        hdrs_ptr
//	[ d e t a i l s ] [ b o d y ]    [ N u32le | (klen, vlen) × N | k \0 v \0 ... ]
func proxySendLocalResponse(vm *VM, mod api.Module, stack []uint64) {
	code := uint32(stack[0])
	details, ok1 := readString(mod, uint32(stack[1]), uint32(stack[2]))
	body, ok2 := read(mod, uint32(stack[3]), uint32(stack[4]))
	raw, ok3 := read(mod, uint32(stack[5]), uint32(stack[6]))
	grpc := int32(uint32(stack[7]))
	if !ok1 || !ok2 || !ok3 {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	hdrs, err := hostcalls.DecodePairs(raw)
	if vm.tracing {
		vm.trace("==> %s(status=%d,details=%q,body=%s,headers=%q,grpc_status=%d)", hostcalls.ProxySendLocalResponse, code, details, quoteMax(body), hdrs, grpc)
	}
	s := vm.cur
	switch {
	case err != nil:
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	case s == nil:
		setStatus(stack, hostcalls.StatusOK)
		vm.traceRet(hostcalls.StatusOK, "(no HTTP stream effective: nothing sent)")
		return
	}
	if grpc < 0 || grpc > 16 {
		grpc = -1
	}
	s.pending = &LocalReply{Status: int(code), Details: strings.ReplaceAll(details, " ", "_"), Body: body,
		Headers: lowerPairs(hdrs), GRPCStatus: grpc}
	vm.deferred = append(vm.deferred, func() {
		s.lock()
		s.afterCallback()
		s.unlock()
	})
	fail(vm, stack, hostcalls.StatusOK)
}

// proxyContinueStream is proxy_continue_stream(stream_type) → status.
//
// Resumes the effective HTTP stream's request (0) or response (1) after a
// stop: held headers are passed on, held or buffered body delivered or
// passed on, stopped trailers passed on. Applied when the running
// callback returns (Envoy defers continueDecoding/continueEncoding to
// after the VM call), so a body rewritten after this call in the same
// callback is the one passed on, while the request headers are forgotten
// at once, as Envoy forgets them: a request-header call after this one
// answers BAD_ARGUMENT. Resuming works from any later callback
// with the stream effective: a tick, on_queue_ready, an http_call answer,
// another stream's callback. It has no effect (still OK) when the
// direction is not stopped or when no HTTP stream is effective; the
// transcript notes these. Called from a callback of that same stream and
// direction it is a fatal host error (ErrContinueInOwnCallback, recorded
// in Host.HostErrors and logged at critical level): Envoy runs the
// continue before the filter's result is recorded, so a debug build
// aborts on its ASSERT "Attempting to continue iteration while the
// IterationState is already Continue" (filter_manager.cc commonContinue)
// and a release build resumes nothing and then pauses the stream as the
// callback returned, with no continue pending; the host drops the
// continue likewise, and a request the callback held stays held. Results, as cpp-host and
// Envoy give them: OK for 0, 1 and DOWNSTREAM (2, which an HTTP filter
// has nothing to resume); UNIMPLEMENTED for UPSTREAM (3); BAD_ARGUMENT
// for anything above. No memory is touched.
func proxyContinueStream(vm *VM, _ api.Module, stack []uint64) {
	t := hostcalls.StreamType(uint32(stack[0]))
	if vm.tracing {
		vm.trace("==> %s(type=%d)", hostcalls.ProxyContinueStream, t)
	}
	s := vm.cur
	switch {
	case t > hostcalls.StreamUpstream:
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	case t == hostcalls.StreamUpstream:
		fail(vm, stack, hostcalls.StatusUnimplemented)
		return
	case t == hostcalls.StreamDownstream:
		setStatus(stack, hostcalls.StatusOK)
		vm.traceRet(hostcalls.StatusOK, "(no effect on an HTTP filter)")
		return
	case s == nil:
		setStatus(stack, hostcalls.StatusOK)
		vm.traceRet(hostcalls.StatusOK, "(no HTTP stream effective: nothing resumed)")
		return
	}
	s.dir(t == hostcalls.StreamHTTPResponse).continuePending = true
	// Envoy's Context::continueStream defers the continue but forgets the
	// request header map at once, for either direction
	// (request_headers_ = nullptr after its switch; envoyproxy/envoy at
	// cb2a49b0, source/extensions/common/wasm/context.cc): a header call
	// later in the same callback is BAD_ARGUMENT, and cannot reach the
	// router's route selection (proxy.NewRouted).
	s.req.headersMutable = false
	vm.deferred = append(vm.deferred, func() {
		s.lock()
		s.applyResume()
		s.unlock()
	})
	fail(vm, stack, hostcalls.StatusOK)
}

// proxyCloseStream is proxy_close_stream(stream_type) → status.
//
// Resets the effective HTTP stream (Envoy resetStream, details
// "wasm_close_stream") when the callback returns; 2 and 3 have no effect
// on an HTTP stream, nor does any type without an HTTP stream effective.
// OK for 0..3; BAD_ARGUMENT above. No memory is touched.
func proxyCloseStream(vm *VM, _ api.Module, stack []uint64) {
	t := hostcalls.StreamType(uint32(stack[0]))
	if vm.tracing {
		vm.trace("==> %s(type=%d)", hostcalls.ProxyCloseStream, t)
	}
	s := vm.cur
	switch {
	case t > hostcalls.StreamUpstream:
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	case s == nil || t > hostcalls.StreamHTTPResponse:
		setStatus(stack, hostcalls.StatusOK)
		vm.traceRet(hostcalls.StatusOK, "(no HTTP stream effective: nothing closed)")
		return
	}
	s.closeReq = true
	vm.deferred = append(vm.deferred, func() {
		s.lock()
		s.afterCallback()
		s.unlock()
	})
	fail(vm, stack, hostcalls.StatusOK)
}

// httpCallResult is what on_http_call_response reads.
type httpCallResult struct {
	headers, trailers [][2]string
	body              []byte
}

// HTTPCallClient is the client http_calls use; replace it in tests if
// needed. Its zero Timeout is overridden per call by timeout_ms.
var HTTPCallClient = &http.Client{}

// proxyHTTPCall is proxy_http_call(upstream_ptr, upstream_len, hdrs_ptr,
// hdrs_len, body_ptr, body_len, trls_ptr, trls_len, timeout_ms,
// ret_token_ptr) → status.
//
// Sends an HTTP request to the cluster named upstream (Options.Clusters
// maps it to a base URL; the request goes to base + :path with :method
// and :authority as Host; Content-Length from the body). OK: the token is
// written and, when the response (or failure) arrives,
// proxy_on_http_call_response(ctx, token, headers, body_size, trailers)
// runs on the calling context — read the headers with map 6, the body with
// buffer 4, trailers with map 7; on failure headers=0 and proxy_get_status
// gives 11 "reset". A call from an HTTP context that has ended is
// cancelled. timeout_ms 0 means none. BAD_ARGUMENT: unknown cluster,
// malformed headers or a missing :method, :path or :authority;
// INVALID_MEMORY_ACCESS. The request runs in real time even with a
// VirtualClock (Host.Wait waits for the answers).
//
//	upstream_ptr  hdrs_ptr (pairs)  body_ptr  trls_ptr (pairs)   ret_token_ptr
//	[ c l u s t e r ] [ ... ]        [ ... ]   [ ... ]            [ token u32le ]
func proxyHTTPCall(vm *VM, mod api.Module, stack []uint64) {
	cluster, ok1 := readString(mod, uint32(stack[0]), uint32(stack[1]))
	rawH, ok2 := read(mod, uint32(stack[2]), uint32(stack[3]))
	body, ok3 := read(mod, uint32(stack[4]), uint32(stack[5]))
	rawT, ok4 := read(mod, uint32(stack[6]), uint32(stack[7]))
	timeout := time.Duration(uint32(stack[8])) * time.Millisecond
	if !ok1 || !ok2 || !ok3 || !ok4 {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	hdrs, err1 := hostcalls.DecodePairs(rawH)
	_, err2 := hostcalls.DecodePairs(rawT)
	if vm.tracing {
		vm.trace("==> %s(upstream=%q,headers=%q,body=%s,timeout_ms=%d)", hostcalls.ProxyHTTPCall, cluster, hdrs, quoteMax(body), uint32(stack[8]))
	}
	base, known := vm.h.opts.Clusters[cluster]
	hv := map[string]string{}
	for _, kv := range hdrs {
		k := strings.ToLower(kv[0])
		if _, dup := hv[k]; !dup {
			hv[k] = kv[1]
		}
	}
	var noHost bool
	if hdr, ok := vm.h.opts.OriginalDst[cluster]; ok {
		known = true
		base, noHost = originalDst(hdr, hv)
	}
	if !known || err1 != nil || err2 != nil || hv[":method"] == "" || hv[":path"] == "" || hv[":authority"] == "" {
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	}
	token := vm.h.token.Add(1)
	if !writeU32(mod, uint32(stack[9]), token) {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	ctxID, s := vm.curID, vm.cur
	h := vm.h
	h.calls.Add(1)
	go func() {
		defer h.calls.Done()
		res, ok := noHealthyUpstream(), true
		if !noHost {
			res, ok = doHTTPCall(base, hdrs, body, timeout)
		}
		if h.opts.HTTPCallsOnWait {
			h.answeredMu.Lock()
			h.answered = append(h.answered, heldAnswer{vm: vm, ctxID: ctxID, s: s, token: token, res: res, ok: ok})
			h.answeredMu.Unlock()
			return
		}
		vm.deliverHTTPCall(ctxID, s, token, res, ok)
	}()
	setStatus(stack, hostcalls.StatusOK)
	if vm.tracing {
		vm.traceRet(hostcalls.StatusOK, "token=%d", token)
	}
}

// originalDst is the base URL of a call to an ORIGINAL_DST cluster whose
// load balancer reads the destination from header hdr ("":
// x-envoy-original-dst-host) of the call (hv: the call's headers by
// lower-case name, first value each), or noHost when the header is
// missing or not an IP address and port. Envoy's load balancer takes the
// first value of the header and parses it with
// parseInternetAddressAndPortNoThrow (an IPv4 "a.b.c.d:port" or an IPv6
// "[addr]:port", never a name), and with no address it chooses no host
// (source/extensions/clusters/original_dst/original_dst_cluster.cc,
// requestOverrideHost and chooseHost, at
// 051b1bcc155c058389ac5ab5118a89068c7f307f); the router then answers the
// request itself with 503 "no healthy upstream"
// (source/common/router/router.cc, sendNoHealthyUpstreamResponse, at
// 001b1c0cd4cb18d9a3658d5453c1e534b3ff864e), which an http_call's caller
// receives as the response. The call's headers are the async request's,
// which the load balancer reads as the downstream headers.
func originalDst(hdr string, hv map[string]string) (base string, noHost bool) {
	if hdr == "" {
		hdr = "x-envoy-original-dst-host"
	}
	v, ok := hv[strings.ToLower(hdr)]
	if !ok {
		return "", true
	}
	ap, err := netip.ParseAddrPort(v)
	if err != nil || ap.Addr().Zone() != "" {
		return "", true
	}
	return "http://" + ap.String(), false
}

// noHealthyUpstream is the router's local reply when no host is chosen.
func noHealthyUpstream() *httpCallResult {
	return &httpCallResult{
		headers: [][2]string{{":status", "503"}, {"content-length", "19"}, {"content-type", "text/plain"}},
		body:    []byte("no healthy upstream"),
	}
}

func doHTTPCall(base string, hdrs [][2]string, body []byte, timeout time.Duration) (*httpCallResult, bool) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var method, path, authority string
	hh := http.Header{}
	for _, kv := range hdrs {
		k := strings.ToLower(kv[0])
		switch k {
		case ":method":
			method = kv[1]
		case ":path":
			path = kv[1]
		case ":authority":
			authority = kv[1]
		case "content-length":
		default:
			if !strings.HasPrefix(k, ":") {
				hh.Add(k, kv[1])
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	req.Header = hh
	req.Host = authority
	req.ContentLength = int64(len(body))
	resp, err := HTTPCallClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, false
	}
	res := &httpCallResult{body: b, headers: [][2]string{{":status", strconv.Itoa(resp.StatusCode)}}}
	for k, vs := range resp.Header {
		for _, v := range vs {
			res.headers = append(res.headers, [2]string{strings.ToLower(k), v})
		}
	}
	for k, vs := range resp.Trailer {
		for _, v := range vs {
			res.trailers = append(res.trailers, [2]string{strings.ToLower(k), v})
		}
	}
	return res, true
}

// deliverHTTPCall runs proxy_on_http_call_response on the issuing context.
func (vm *VM) deliverHTTPCall(ctxID uint32, s *Stream, token uint32, res *httpCallResult, ok bool) {
	vm.enter()
	defer vm.exit()
	if vm.closed || vm.failed != nil || (s != nil && (s.complete || vm.streams[s.id] != s)) {
		return
	}
	if ok {
		vm.status.code, vm.status.msg = 0, ""
		vm.callResp = res
	} else {
		vm.status.code, vm.status.msg = uint32(hostcalls.StatusBrokenConnection), "reset"
		vm.callResp = &httpCallResult{}
	}
	r := vm.callResp
	vm.curID, vm.cur = ctxID, s
	_, err := vm.callback(cbHTTPCallResponse, 0, uint64(ctxID), uint64(token),
		uint64(len(r.headers)), uint64(len(r.body)), uint64(len(r.trailers)))
	if err != nil && s != nil {
		s.endLocal(&LocalReply{Status: 503, Details: "wasm_fail_stream", Body: []byte("wasm_fail_stream"), GRPCStatus: -1})
	}
	vm.curID, vm.cur = rootContextID, nil
	vm.callResp = nil
	vm.status.code, vm.status.msg = 0, ""
	if s != nil {
		s.afterCallback()
		s.applyResume()
	}
}
