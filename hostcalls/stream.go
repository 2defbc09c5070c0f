package hostcalls

// proxy_continue_stream(stream_type) → status
// proxy_close_stream(stream_type) → status
//
// No memory. stream_type: HTTP_REQUEST=0, HTTP_RESPONSE=1 (DOWNSTREAM=2,
// UPSTREAM=3 for TCP). continue resumes a stream paused by an earlier
// callback's action, when the running callback returns; close resets it.
// Both act on the effective context. Results (Envoy): OK for 0..2, also
// when nothing is paused or no HTTP stream is effective (then nothing
// happens); continue UPSTREAM is UNIMPLEMENTED; BAD_ARGUMENT above 3.
// Never continue a stream from its own callback (on_request_* for the
// request, on_response_* for the response): cpp-host runs the continue
// when the callback returns, before Envoy records the callback's result,
// so a debug Envoy aborts ("Attempting to continue iteration while the
// IterationState is already Continue", filter_manager.cc commonContinue)
// and a release one resumes nothing and then pauses the stream as the
// callback returned, with no continue pending: the request hangs. The
// call still answers OK. Return Continue instead, or continue from a
// later callback (a tick, on_queue_ready, an http_call answer).
//
// proxy_set_effective_context(context_id) → status
//
// No memory. Makes context_id the context that later host calls of this
// callback act on, for this callback only. Results: OK; BAD_ARGUMENT if
// context_id is not a live context of this VM (a stream that has ended, or
// one of another VM: ids are per VM).
//
// proxy_done() → status
//
// No memory. Tells the host that a root context which answered false from
// proxy_on_done has finished; the host then calls proxy_on_delete.
//
// proxy_get_status(ret_code_ptr, ret_msg_ptr_ptr, ret_msg_size_ptr) → status
//
//	ret_code_ptr     ──► [ u32 LE status code ]                        (written)
//	ret_msg_ptr_ptr  ──► [ u32 LE ptr ] ──► [ size bytes message ]     (written; allocated)
//	ret_msg_size_ptr ──► [ u32 LE size ]
//
// The status of the last gRPC or http_call event (Envoy: code 11 and
// "reset" for a failed http_call).

// ContinueStream resumes stream st of the effective context.
func ContinueStream(st StreamType) error { return Status(proxyContinueStream(uint32(st))).Err() }

// CloseStream closes (resets) stream st of the effective context.
func CloseStream(st StreamType) error { return Status(proxyCloseStream(uint32(st))).Err() }

// ResumeHttpRequest resumes the request of the effective context, paused
// by an earlier callback's action. From OnTick or OnQueueReady, call
// SetEffectiveContext(stream) first and check its error: with no stream
// effective this answers nil and resumes nothing. Called from the callback
// that returns types.ActionPause it resumes nothing either.
func ResumeHttpRequest() error { return ContinueStream(StreamHTTPRequest) }

// ResumeHttpResponse resumes the response of the effective context.
func ResumeHttpResponse() error { return ContinueStream(StreamHTTPResponse) }

// CloseHttpStream resets the HTTP stream of the effective context
// (proxy_close_stream(HTTP_REQUEST)).
func CloseHttpStream() error { return CloseStream(StreamHTTPRequest) }

// SetEffectiveContext makes the context id the one later host calls of
// this callback act on, in the host and in CurrentContextID, until the
// callback returns. Use it in OnTick, OnQueueReady or a DispatchHttpCall
// callback before reading or replacing a held body, resuming the stream or
// answering it. types.ErrorStatusBadArgument: id is not a live context of
// this VM (the stream ended, or belongs to another VM).
func SetEffectiveContext(id uint32) error {
	if err := Status(proxySetEffectiveContext(id)).Err(); err != nil {
		return err
	}
	vm.current = id
	return nil
}

// PluginDone tells the host that the current root context, which returned
// false from OnPluginDone, has finished.
func PluginDone() error { return Status(proxyDone()).Err() }

// GetStatus returns the code and message of the last http_call or gRPC
// event.
func GetStatus() (code uint32, msg []byte, err error) {
	beginCall(0)
	st := proxyGetStatus(&retU32, &retPtr, &retSize)
	code = retU32
	msg, err = returnedBytes(st)
	if err != nil {
		return 0, nil, err
	}
	return code, msg, nil
}
