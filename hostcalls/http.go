package hostcalls

// proxy_send_local_response(status, details_ptr, details_len, body_ptr, body_len,
//                           hdrs_ptr, hdrs_len, grpc_status) → status
//
//	details_ptr ──► [ details_len bytes: response code details ]  (read)
//	body_ptr    ──► [ body_len bytes ]                            (read)
//	hdrs_ptr    ──► [ hdrs_len bytes: extra headers, pairs format ] (read)
//
// grpc_status is an i32; -1 (outside 0..16) means no grpc-status. Envoy sends
// the reply after the callback returns and then treats the callback's action
// as stop. It answers the effective context's stream: from a tick or
// OnQueueReady, SetEffectiveContext(stream) first (a held request answered
// 429). Results: OK, also when no HTTP stream is effective (Envoy then sends
// nothing).
//
// proxy_http_call(upstream_ptr, upstream_len, hdrs_ptr, hdrs_len, body_ptr, body_len,
//                 trls_ptr, trls_len, timeout_ms, ret_token_ptr) → status
//
//	upstream_ptr  ──► [ cluster name ]                 (read)
//	hdrs_ptr      ──► [ headers, pairs format ]        (read; needs :method :path :authority)
//	body_ptr      ──► [ body ]                         (read)
//	trls_ptr      ──► [ trailers, pairs format ]       (read)
//	ret_token_ptr ──► [ u32 LE token ]                 (written)
//
// The call belongs to the root context; its answer arrives as
// proxy_on_http_call_response(root, token, num_headers, body_size,
// num_trailers), num_headers=0 on failure. Results: OK; BAD_ARGUMENT for an
// unknown cluster or missing pseudo-headers; INTERNAL_FAILURE.

// defaultDetails is the response code details of SendHttpResponse.
const defaultDetails = "send_local_response"

// SendHttpResponse answers the current HTTP stream locally with statusCode,
// the extra headers and body; grpcStatus -1 sends no grpc-status. Return
// types.ActionPause from the callback afterwards. From a root callback
// (OnTick, OnQueueReady, a DispatchHttpCall callback) it answers the stream
// made effective with SetEffectiveContext; with none, Envoy answers OK and
// sends nothing.
func SendHttpResponse(statusCode uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	return SendHttpResponseWithDetails(statusCode, defaultDetails, headers, body, grpcStatus)
}

// SendHttpResponseWithDetails is SendHttpResponse with the response code
// details Envoy logs (%RESPONSE_CODE_DETAILS%; spaces become '_').
func SendHttpResponseWithDetails(statusCode uint32, details string, headers [][2]string, body []byte, grpcStatus int32) error {
	h := encodeMap(headers)
	return Status(proxySendLocalResponse(statusCode, strPtr(details), u32(len(details)),
		bytesPtr(body), u32(len(body)), bytesPtr(h), u32(len(h)), grpcStatus)).Err()
}

// DispatchHttpCall sends an HTTP request to the upstream cluster and
// returns the call's token. When the answer arrives, callBack runs in the
// root context with the number of response headers, the body size and the
// number of trailers (numHeaders 0: the call failed, see GetStatus); read
// them with GetHttpCallResponseHeaders / GetHttpCallResponseBody /
// GetHttpCallResponseTrailers. timeoutMillisecond 0 means no timeout. To
// resume a paused stream from callBack, SetEffectiveContext(streamID) and
// then ResumeHttpRequest. callBack runs even if that stream has ended in
// the meantime (SetEffectiveContext then fails); it is dropped only with its
// root context.
func DispatchHttpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string,
	timeoutMillisecond uint32, callBack func(numHeaders, bodySize, numTrailers int)) (uint32, error) {
	h, t := encodeMap(headers), encodeMap(trailers)
	beginCall(0)
	st := proxyHTTPCall(strPtr(cluster), u32(len(cluster)), bytesPtr(h), u32(len(h)),
		bytesPtr(body), u32(len(body)), bytesPtr(t), u32(len(t)), timeoutMillisecond, &retU32)
	if err := Status(st).Err(); err != nil {
		return 0, err
	}
	token := retU32
	vm.calls[token] = httpCall{root: rootOf(vm.current), callback: callBack}
	return token, nil
}
