// Package host is a proxy-wasm host on wazero that behaves like Envoy, for
// tests, simulations, benchmarks and a real local proxy. It runs a
// standard-Go (wasip1, c-shared) or any other proxy-wasm ABI 0.2.x module.
//
// # What it models
//
// A Module is compiled once (wazero CompiledModule); Module.Start runs a
// canary VM (started, configured, discarded, as Envoy validates a plugin
// configuration) and then N worker VMs instantiated from it (Envoy's
// workers, --concurrency), each with _initialize, proxy_on_context_create
// (root, 0), proxy_on_vm_start and proxy_on_configure (the configuration
// is buffer 7, readable only there). Each VM runs one call at a time; VMs
// run in parallel. Host.Reconfigure models Envoy creating new VMs for a new
// configuration: the old VMs take no new streams and finish their open
// ones, their root contexts ticking and receiving queue notifications
// meanwhile (each Envoy stream holds the plugin handle), so they can
// dispatch the requests they hold; root on_done/on_delete follow the last
// stream (a root whose on_done answers false keeps ticking until
// proxy_done); shared data survives (same vm_id).
//
// Every proxy_* import of ABI 0.2.1 is provided (gRPC answers
// UNIMPLEMENTED), with Envoy's semantics where they differ from the spec
// (cpp-host src/shared_data.cc, Envoy context.cc): shared data per vm_id shared by all VMs
// of the process (cas 0 unconditional on an existing key, a missing key
// always settable, one counter starting at 1 and skipping 0); shared
// queues; metrics per Host by name (counter increments must be > 0, record
// on a counter adds, histograms only record); header maps with lower-case
// keys, first value on get, and available only while the filter can act
// on them (request headers are forgotten once on_request_headers
// continues: later calls on them are BAD_ARGUMENT, and get_pairs is OK
// with no pairs); bodies with StopIterationAndBuffer accumulation,
// Buffer::copyFrom semantics for set_buffer_bytes (no partial drain) and
// the buffer limit (413 request, 500 response);
// headers StopIteration converted to StopAllIterationAndWatermark, or
// with Options.AllowOnHeadersStopIteration (Envoy ≥ 1.35's
// allow_on_headers_stop_iteration) kept as a real StopIteration: body
// callbacks delivered, headers mutable and unreleased until the filter
// continues, then released with the buffered body; local
// replies deferred until the callback returns; the end-of-stream order
// on_log → on_done → on_delete for every stream (reset ones too), or, for
// an HTTP/3 downstream (Stream.CompleteHTTP3, Envoy ≥ 1.26 logging on the
// client's last ACK), on_done → on_delete with on_log after the delete,
// for the same id, at Stream.DeferredLog (http3.go cites Envoy); maps
// read-only during on_log, the request trailers absent there (Envoy's
// Context::getConstMap answers nullptr for them in the access-log phase:
// a value read is NOT_FOUND, the pairs empty); tick
// timers per VM; http_call to named
// clusters, and to ORIGINAL_DST clusters routed by a header
// (Options.OriginalDst: the address in x-envoy-original-dst-host, a 503
// "no healthy upstream" without one); properties (upstream.address once
// the front end names the host, Stream.SetUpstreamAddress); the allocator rules (malloc before
// proxy_on_memory_allocate, empty results as ptr=0,size=0 without
// allocation, restricted callbacks during allocation and _initialize).
//
// The WASI is the host's own wasi_snapshot_preview1 (and wasi_unstable)
// with the functions cpp-host provides. The clocks read the host Clock, so
// a VirtualClock drives a Go guest's time.Now.
//
// # Profiles
//
// Options.Profile picks the proxy-wasm-cpp-host, and so the Envoy
// releases, emulated where the shipped hosts differ (profile.go has each
// fact with its file and commit):
//
//	ProfileCppHost94091cd     Envoy ≥ 1.39 (the zero value): every WASI function the
//	                          host has, poll_oneoff succeeds, the long _initialize list
//	ProfileCppHostC4d7bb0     Envoy 1.32.13–1.38: 18 WASI functions, poll_oneoff
//	                          ENOSYS (kills a Go guest at a GC), sched_yield 0,
//	                          fd_fdstat_set_flags ENOSYS
//	ProfileCppHostPreC4d7bb0  Envoy 1.24–1.32.12: the 15 WASI functions only; a module
//	                          importing another fails to load ("Failed to load Wasm
//	                          module due to a missing import: wasi_snapshot_preview1.
//	                          sched_yield"); _initialize may not call fd_fdstat_get
//
// What differs: the WASI functions a module may import (anything else is
// refused at Start with cpp-host's message), poll_oneoff's answer, and
// the host functions V8 lets a guest call during _initialize and during
// its allocator (a call outside the list traps with restricted_callback,
// as Envoy's default engine does; WAMR and Wasmtime do not check). The
// env (proxy_*) functions are the same under every profile: cpp-host's
// lists of them are identical at f199214, c4d7bb0 and 94091cd and none of
// their implementations changed in a way a 0.2.x module can see.
//
// # Holding a request
//
// A request whose body callback returned StopIterationAndBuffer can be
// read, rewritten, resumed (proxy_continue_stream) or answered
// (proxy_send_local_response) from any later callback of the same VM with
// the stream effective (proxy_set_effective_context): a tick,
// on_queue_ready, an http_call answer. What Envoy refuses is refused here
// with Envoy's status: an id that is not a live context of this VM
// (BAD_ARGUMENT), a write to a body that is not held (BAD_ARGUMENT), a
// header change after the headers continued, or after a continue_stream
// earlier in the same callback (BAD_ARGUMENT); what Envoy
// ignores is ignored (a continue or local reply with no stream effective:
// OK, nothing done, noted in the transcript). A continue from a callback
// of the same stream and direction, on which a debug Envoy aborts and a
// release one leaves the stream paused for good, is a fatal host error
// (Host.HostErrors, ErrContinueInOwnCallback) and resumes nothing. A shared queue notifies the VM that registered
// it last, after the enqueuing callback returns. FLOW-NOTES.md lists the
// facts with their places in Envoy's and cpp-host's source.
//
// Streams are driven synchronously with Stream (NewStream: RequestHeaders,
// RequestBody, ..., Complete) or through package proxy
// (hostcalls/host/proxy: proxy.New(h, upstream)), a real local proxy
// built on it. Tests read what happened from Logs, Transcript (per VM:
// "==> proxy_x(args)" / "<== STATUS results" for host calls, "--> callback"
// / "<-- result" for calls into the guest), Metrics, SharedData and the
// Stream accessors.
//
// # Where things are
//
// The host functions are plain Go functions named after their ABI names
// (proxy_get_buffer_bytes is proxyGetBufferBytes, fd_write is fdWrite),
// each documented with its parameters, its results and, where it reads or
// writes guest memory, a picture of that memory. They are registered from
// one table, functions.go: envFunctions (module "env") and wasiFunctions
// (wasi_snapshot_preview1 and wasi_unstable; wasiProvides in profile.go
// says which of them each Profile has). Compile
// instantiates the host modules from the tables (module.go: wrap finds the
// calling VM and enforces the restricted callbacks). One file per family:
//
//	log.go           proxy_log, proxy_get_log_level
//	clock.go         Clock, RealClock, VirtualClock; proxy_get_current_time_nanoseconds
//	timer.go         proxy_set_tick_period_milliseconds; tick goroutines, Tick, RunDue, Advance
//	context.go       proxy_set_effective_context, proxy_done, proxy_get_status,
//	                 proxy_call_foreign_function, proxy_grpc_* (UNIMPLEMENTED),
//	                 envoy_resolve_dns, pthread_equal, emscripten_notify_memory_growth
//	buffer.go        proxy_get_buffer_bytes, proxy_get_buffer_status, proxy_set_buffer_bytes (VM.buffer, setBody)
//	headers.go       proxy_*_header_map_* (VM.headerMap)
//	http.go          proxy_send_local_response, proxy_continue_stream, proxy_close_stream, proxy_http_call
//	shared_data.go   proxy_get_shared_data, proxy_set_shared_data; the per-vm_id store
//	shared_queue.go  proxy_{register,resolve,enqueue,dequeue}_shared_queue; proxy_on_queue_ready
//	metrics.go       proxy_define_metric, proxy_increment_metric, proxy_record_metric,
//	                 proxy_get_metric; Metrics, WritePrometheus
//	properties.go    proxy_get_property, proxy_set_property (VM.property)
//	wasi.go          the WASI functions (fd_write, clock_time_get, poll_oneoff, ...)
//
// The rest: module.go (Module, Compile, the host modules), host.go (Host,
// Start, Reconfigure, Close, the VMs' lifecycle), vm.go (VM: calls into
// the guest, the allocator, the transcript, guest-memory helpers),
// options.go (Options), profile.go (Profile: what differs between the
// cpp-hosts Envoy ships, and the lists that say so), stream.go and stream_state.go (Stream: the filter
// chain's events and what they did), http3.go (Stream.CompleteHTTP3 and
// DeferredLog: the HTTP/3 end of stream), serve.go (what a front end uses:
// EnterServe, ExitServe, PickStream). The local proxy is package
// hostcalls/host/proxy; it uses only this package's exported API.
//
// # Where it differs from Envoy
//
//   - A malformed header-map serialisation is refused with BAD_ARGUMENT
//     (Envoy silently uses an empty map and answers OK).
//   - A local reply sent by the filter does not pass through that filter's
//     response callbacks; the proxy's 503 for an unreachable upstream
//     does (as Envoy's router reply does).
//   - The canary is discarded without on_done/on_delete.
//   - Reconfigure replaces every VM (as Istio's new vm_key per change
//     does); Envoy with an unchanged VM configuration would keep the VM
//     and create a new root context in it.
//   - A trap fails the VM; its streams end with 503 "wasm_fail_stream"
//     (fail closed); PickStream (the proxy's) replaces a failed VM with a
//     new one for new streams (if the new VM fails to start, new streams run on the
//     failed VM and get the 503).
//   - Host.Close lets the proxy's requests in flight finish (up to its
//     context) and answers new ones 503; Stream-driven streams still open
//     fail once the instances close.
//   - An HTTP body written after its stream was resumed, or held with
//     StopIterationAndWatermark/NoBuffer, is refused with BAD_ARGUMENT
//     (Envoy answers OK and the bytes go nowhere).
//   - proxy_on_queue_ready runs on the goroutine that drove the enqueuing
//     call, once that call returned, not on an event loop of the owner's.
//   - The CAS counter is per vm_id store rather than process-wide (guests
//     cannot tell the difference). Queue tokens are process-wide.
//   - fd_write output is logged line by line (cpp-host logs each write).
//   - Between Stream.CompleteHTTP3 and Stream.DeferredLog the stream's id
//     is no live context (proxy_set_effective_context: BAD_ARGUMENT);
//     Envoy still has the Context registered, its filter callbacks gone.
//   - Not modelled: network (L4) filters and their buffers, gRPC, foreign
//     functions, metadata callbacks,
//     request trailers in the proxy, HTTP/2 stream limits, most CEL
//     attributes beyond those listed on VM.property, the ~25 extra WASI
//     stubs of cpp-host ≥ 94091cd.
//   - http_calls run in real time even under a VirtualClock; Host.Wait
//     waits for their answers.
//   - Options.SharedDataFault is a test hook Envoy does not have: it fails
//     chosen shared-data gets and sets (or makes every set a CAS mismatch,
//     or traps the VM) so that failure handling can be tested;
//     Options.BufferFault likewise refuses chosen body rewrites.
package host
