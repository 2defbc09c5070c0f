package host

// CompleteHTTP3 ends the stream as Envoy ≥ 1.26 ends an HTTP/3 downstream
// stream whose response was sent (runtime flag
// envoy.reloadable_features.quic_defer_logging_to_ack_listener, on by
// default since 1.26.0): proxy_on_done, then proxy_on_delete, and no
// proxy_on_log yet; the log is deferred until the client acknowledges
// the last byte of the response (DeferredLog). A stream that was reset
// (Reset, ResetWithReason, a closed stream) is logged at once, so
// CompleteHTTP3 then is Complete.
//
// In Envoy (envoyproxy/envoy, commit cb2a49b09ea4f68f1126854a8ae3b336c48af0e7
// of the wbpcode/envoy mirror, 1.40.0-dev):
// ConnectionManagerImpl::doDeferredStreamDestroy
// (source/common/http/conn_manager_impl.cc) skips stream.log for
// Protocol::Http3 when the filter manager saw no downstream reset and
// hands the headers, trailers and stream info to the QUIC stream
// (deferHeadersAndTrailers), then runs destroyFilters, whose
// Context::onDestroy (source/extensions/common/wasm/context.cc) calls
// onDone and onDelete. The QUIC stream's QuicStatsGatherer
// (source/common/quic/quic_stats_gatherer.cc, maybeDoDeferredLog) holds
// the access-log handlers as shared pointers, the wasm Context among
// them (source/extensions/filters/http/wasm/config.h:
// addAccessLogHandler), and calls their log on the last ACK, or when the
// QUIC stream is destroyed first (envoy_quic_server_stream.cc
// OnSoonToBeDestroyed). Context::log checks neither destroyed_ nor
// anything onDelete changed (in_vm_context_created_ stays true), and
// proxy-wasm-cpp-host's ContextBase::onLog (src/context.cc, commit
// 52a02917b301c679ff43565064cffd2c3c750f6d) calls proxy_on_log(id) for
// any live VM: the module sees proxy_on_log for a context id it was told
// to delete. The id is not reused meanwhile (the Context is still
// registered), and the log phase reads the copies the QUIC stream kept:
// request headers, response headers and response trailers. The stream
// counts as open on its VM until its log (the Context holds the plugin
// handle, context.h plugin_handle_), so a retired VM's root waits for it.
func (s *Stream) CompleteHTTP3() {
	s.lock()
	reset := s.reset
	s.unlock()
	if reset {
		s.end(endComplete)
		return
	}
	s.end(endDeferLog)
}

// DeferredLog delivers the proxy_on_log that CompleteHTTP3 deferred, as
// Envoy's QuicStatsGatherer does on the response's last ACK: with the
// stream's id, after its proxy_on_delete, in the same log phase as
// Complete's proxy_on_log (the maps read-only). Between
// CompleteHTTP3 and DeferredLog the id is not a live context for
// proxy_set_effective_context here, where Envoy would still find the
// Context (a call on it then would reach filter callbacks already
// destroyed). It does nothing for a stream that owes no log (not ended
// by CompleteHTTP3, logged already).
func (s *Stream) DeferredLog() {
	s.lock()
	if !s.logOwed {
		s.unlock()
		return
	}
	s.logOwed = false
	s.callLog()
	s.release()
}
