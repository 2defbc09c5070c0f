//go:build wasip1

// Command conformance is a test-only proxy-wasm module that exercises every
// host function through the typed wrappers of package hostcalls and logs
// what happened in a fixed text format, so that a host's tests can compare
// transcripts (and memory) against expectations. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared ./hostcalls/internal/conformance
//
// or, in tests, wasmbuild.Module(t, "./hostcalls/internal/conformance").
// It imports every host function of hostcalls/abi.go (all of ABI v0.2.1's
// env imports that hostcalls uses), so the host must provide them all. The variant in
// ./basic leaves out the families whose host functions the SDK's proxytest
// emulator lacks (get_log_level, get_buffer_status, get_header_map_size,
// get_status) and is otherwise identical.
//
// # Script
//
// The plugin configuration is a JSON script; unknown fields, unknown
// callbacks and calls that are not in the module make on_configure log the
// error at critical level and return false. An empty configuration is an
// empty script.
//
//	{
//	  "on": {
//	    "configure":       [ {"call": "set_shared_data", "key": "k", "value": "v"} ],
//	    "request_headers": [ {"call": "get_header_map_value", "map": "request_headers", "key": ":path"} ]
//	  },
//	  "return": { "request_headers": 1 }
//	}
//
// "on" maps a callback to the steps it runs, in order; "return" sets a
// callback's answer: the action of the HTTP callbacks (default 0, Continue;
// any u32 is passed through, e.g. 1 StopIteration / StopIterationAndBuffer),
// or for configure, vm_start and plugin_done 0 to return false (default
// true). Callback names:
//
//	vm_start            proxy_on_vm_start (steps come from the VM configuration, which is then a script too)
//	configure           proxy_on_configure (the script is read first)
//	tick                proxy_on_tick
//	queue_ready         proxy_on_queue_ready
//	http_call_response  proxy_on_http_call_response of a call made by an http_call step
//	request_headers, request_body, request_trailers,
//	response_headers, response_body, response_trailers
//	stream_done         HttpContext.OnHttpStreamDone (proxy_on_log, or proxy_on_done if it comes first)
//	plugin_done         proxy_on_done of the root context
//
// Every HTTP stream of a root context runs the same steps.
//
// # Transcript
//
// Everything is logged with proxy_log at level info (the "log" step also
// logs its own message at its level; script errors are critical). Each
// callback first logs one line:
//
//	on_context_create(ctx=1 parent=0)          root context; parent=R for a stream of root R
//	on_vm_start(vm_config_size=N)
//	on_configure(ctx=1 config_size=N)
//	on_tick(ctx=1)
//	on_queue_ready(ctx=1 queue=Q)
//	on_http_call_response(ctx=<root> token=T headers=H body=B trailers=N)
//	on_request_headers(ctx=2 headers=N eos=false)    also on_response_headers
//	on_request_body(ctx=2 size=N eos=true)           also on_response_body
//	on_request_trailers(ctx=2 trailers=N)            also on_response_trailers
//	on_stream_done(ctx=2)
//	on_done(ctx=1)
//
// and then one line per step:
//
//	<call>(<args>) -> [<results> ]status=<STATUS>
//
// STATUS is the Status name of the wrapper's error (OK, NOT_FOUND,
// BAD_ARGUMENT, EMPTY, CAS_MISMATCH, INVALID_MEMORY_ACCESS, ...; see
// hostcalls.Status.String and hostcalls.StatusOf). Results are printed even
// when the status is not OK (then they are zero values). Strings and bytes
// are Go-quoted (%q); header maps and property paths are JSON arrays. With
// "hash": true, returned bytes and the value argument print as
// <name>_len=N <name>_fnv=<FNV-1a 64, 16 hex digits> instead.
//
// An unknown level, buffer, map, stream or metric name makes no host call
// and logs status=BAD_ARGUMENT.
//
// # Steps
//
// Names accepted by the fields: level trace|debug|info|warn|error|critical;
// buffer request_body|response_body|http_call_response_body|vm_configuration|
// plugin_configuration; map request_headers|request_trailers|response_headers|
// response_trailers|http_call_response_headers|http_call_response_trailers;
// stream request|response|downstream|upstream; metric counter|gauge|histogram.
//
//	call (family)                 fields                       line
//	log (Log)                     level, msg                   log(level=info msg="m") -> status=OK
//	get_log_level (LogLevel)      -                            get_log_level() -> level=2 status=OK
//	set_tick_period_milliseconds  n                            set_tick_period_milliseconds(ms=100) -> status=OK
//	  (Tick)
//	get_buffer_bytes (Buffer)     buffer, start, max?, hash?   get_buffer_bytes(buffer=request_body start=0 max=5) -> bytes="hello" status=OK
//	                              max omitted: max=max (math.MaxInt32 is passed)
//	set_buffer_bytes (Buffer)     buffer, start, size, value,  set_buffer_bytes(buffer=request_body start=0 size=0 value="x") -> status=OK
//	                              repeat?, hash?
//	get_buffer_status             buffer                       get_buffer_status(buffer=request_body) -> size=11 flags=0 status=OK
//	  (BufferStatus)
//	get_header_map_pairs          map                          get_header_map_pairs(map=request_headers) -> pairs=[[":path","/"]] status=OK
//	set_header_map_pairs          map, pairs                   set_header_map_pairs(map=response_headers pairs=[["a","b"]]) -> status=OK
//	get_header_map_value          map, key                     get_header_map_value(map=request_headers key=":path") -> value="/" status=OK
//	add_header_map_value          map, key, value              add_header_map_value(map=request_headers key="k" value="v") -> status=OK
//	replace_header_map_value      map, key, value              replace_header_map_value(map=request_headers key="k" value="v") -> status=OK
//	remove_header_map_value       map, key                     remove_header_map_value(map=request_headers key="k") -> status=OK
//	  (the six above: Headers)
//	get_header_map_size           map                          get_header_map_size(map=request_headers) -> size=42 status=OK
//	  (HeaderMapSize)
//	continue_stream (Stream)      stream                       continue_stream(stream=request) -> status=OK
//	close_stream (Stream)         stream                       close_stream(stream=response) -> status=OK
//	set_effective_context         ctx (0 or omitted: the       set_effective_context(ctx=2) -> status=OK
//	  (Stream)                    context that made the last http_call)
//	done (Stream)                 -                            done() -> status=OK
//	send_local_response           status, details, body,       send_local_response(status=429 details="d" body="b" headers=[["a","b"]] grpc=-1) -> status=OK
//	  (LocalResponse)             pairs (extra headers), grpc (default -1)
//	http_call (HTTPCall)          upstream, pairs (headers),   http_call(upstream="c" headers=[...] body="b" trailers=[] timeout=500) -> token=1 status=OK
//	                              body, trailers, timeout
//	get_status (Status)           -                            get_status() -> code=11 msg="reset" status=OK
//	get_shared_data (SharedData)  key, hash?                   get_shared_data(key="k") -> value="v" cas=1 status=OK
//	set_shared_data (SharedData)  key, value, cas, repeat?,    set_shared_data(key="k" value="v" cas=0) -> status=OK
//	                              hash?
//	register_shared_queue (Queue) name                         register_shared_queue(name="q") -> id=1 status=OK
//	resolve_shared_queue (Queue)  vm_id, name                  resolve_shared_queue(vm_id="" name="q") -> id=1 status=OK
//	enqueue_shared_queue (Queue)  id | name, value, repeat?,   enqueue_shared_queue(id=1 value="x") -> status=OK
//	                              hash?
//	dequeue_shared_queue (Queue)  id | name, hash?             dequeue_shared_queue(id=1) -> value="x" status=OK
//	define_metric (Metrics)       metric, name                 define_metric(metric=counter name="c") -> id=1 status=OK
//	increment_metric (Metrics)    id | name, n                 increment_metric(id=1 delta=3) -> status=OK
//	record_metric (Metrics)       id | name, n                 record_metric(id=1 value=42) -> status=OK
//	get_metric (Metrics)          id | name                    get_metric(id=1) -> value=3 status=OK
//	get_property (Properties)     path, hash?                  get_property(path=["plugin_name"]) -> value="p" status=OK
//	set_property (Properties)     path, value                  set_property(path=["wasm","x"] value="y") -> status=OK
//	gc (Runtime)                  n (default 1)                gc(n=3) -> status=OK    runtime.GC() n times
//
// Queues and metrics are remembered by name when registered, resolved or
// defined; a step with "name" uses that id, one with "id" uses the id given,
// and a queue step with neither uses the last queue registered or resolved.
// "repeat": N makes the value argument the value N times (large payloads).
// The "gc" step makes the Go runtime call WASI poll_oneoff once its poller
// is set up: with a legacy-WASI host (poll_oneoff → ENOSYS) the module then
// dies with "fatal error: poll_oneoff failed" (Go runtime/netpoll_wasip1.go;
// proxy-wasm-cpp-host c4d7bb0 to 94091cd, golang/go#78513).
//
// Everything the module passes to the host by pointer (log lines, values)
// stays reachable for the life of the VM, so a host that keeps references
// into guest memory instead of copying (proxytest) reports it intact.
//
// # Example
//
// Script (145 bytes on one line):
//
//	{"on":{"configure":[{"call":"get_shared_data","key":"k"},
//	                    {"call":"set_shared_data","key":"k","value":"v"},
//	                    {"call":"get_shared_data","key":"k"}]}}
//
// Transcript under Envoy's rules (a fresh store, global cas counter at 1):
//
//	on_context_create(ctx=1 parent=0)
//	on_vm_start(vm_config_size=0)
//	on_configure(ctx=1 config_size=145)
//	get_shared_data(key="k") -> value="" cas=0 status=NOT_FOUND
//	set_shared_data(key="k" value="v" cas=0) -> status=OK
//	get_shared_data(key="k") -> value="v" cas=1 status=OK
package main
