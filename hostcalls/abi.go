// Package hostcalls is the proxy-wasm ABI v0.2.1 for standard Go
// (GOOS=wasip1, -buildmode=c-shared): the host functions a plugin imports, the
// callbacks it exports, and the vocabulary both sides share.
//
// The files without a build constraint (this one, pairs.go, status.go) hold
// the ABI's names, enumerations, status errors and the header-map
// serialisation; they compile on every platform because the test host in
// package hostcalls/host uses them too, so guest and host cannot disagree on
// a byte layout.
//
// The guest side: the //go:wasmimport declarations of every host function
// are in imports_wasip1.go (one line each, the exact Wasm signatures); the
// typed wrappers that call them, one file per family (log.go, buffer.go,
// headers.go, shareddata.go, queue.go, metrics.go, properties.go, http.go,
// stream.go, tick.go), document each host function's parameters, result
// codes and the memory it reads and writes. The //go:wasmexport callbacks
// are in exports.go (wasip1 only); they dispatch to the SDK's context
// interfaces as context.go describes, and the allocator the host returns data
// through is described in alloc.go. A native build replaces only the raw
// imports (imports_native.go): every wrapper then returns
// types.ErrorUnimplemented and logging does nothing, so packages importing
// hostcalls build, vet and unit-test their pure parts natively.
//
// Usage, as with the SDK's proxywasm package:
//
//	func init() { hostcalls.SetVMContext(&vm{}) } // no host calls in init
//	func main() {}                                 // never runs in a reactor
//
//	func (c *stream) OnHttpRequestHeaders(n int, eos bool) types.Action {
//		team, err := hostcalls.GetHttpRequestHeader("x-team")
//		...
//	}
//
// Facts and their sources: proxy-wasm/spec abi-versions/v0.2.1/README.md
// (3a844b8), proxy-wasm-cpp-host src/exports.cc and src/wasm.cc (52a0291),
// Envoy source/extensions/common/wasm/context.cc (b40935a).
package hostcalls

// ABIVersionExport is the export whose presence announces ABI v0.2.1.
const ABIVersionExport = "proxy_abi_version_0_2_1"

// HostModule is the Wasm import module of every proxy_* host function.
const HostModule = "env"

// Names of the host functions (imports of module "env") that the guest side
// may call, as Envoy's proxy-wasm-cpp-host registers them for ABI v0.2.1.
const (
	ProxyLog                   = "proxy_log"
	ProxyGetLogLevel           = "proxy_get_log_level"
	ProxySetTickPeriod         = "proxy_set_tick_period_milliseconds"
	ProxyGetBufferBytes        = "proxy_get_buffer_bytes"
	ProxyGetBufferStatus       = "proxy_get_buffer_status"
	ProxySetBufferBytes        = "proxy_set_buffer_bytes"
	ProxyGetHeaderMapPairs     = "proxy_get_header_map_pairs"
	ProxySetHeaderMapPairs     = "proxy_set_header_map_pairs"
	ProxyGetHeaderMapSize      = "proxy_get_header_map_size"
	ProxyGetHeaderMapValue     = "proxy_get_header_map_value"
	ProxyAddHeaderMapValue     = "proxy_add_header_map_value"
	ProxyReplaceHeaderMapValue = "proxy_replace_header_map_value"
	ProxyRemoveHeaderMapValue  = "proxy_remove_header_map_value"
	ProxyContinueStream        = "proxy_continue_stream"
	ProxyCloseStream           = "proxy_close_stream"
	ProxySendLocalResponse     = "proxy_send_local_response"
	ProxyHTTPCall              = "proxy_http_call"
	ProxyGetStatus             = "proxy_get_status"
	ProxySetSharedData         = "proxy_set_shared_data"
	ProxyGetSharedData         = "proxy_get_shared_data"
	ProxyRegisterSharedQueue   = "proxy_register_shared_queue"
	ProxyResolveSharedQueue    = "proxy_resolve_shared_queue"
	ProxyEnqueueSharedQueue    = "proxy_enqueue_shared_queue"
	ProxyDequeueSharedQueue    = "proxy_dequeue_shared_queue"
	ProxyDefineMetric          = "proxy_define_metric"
	ProxyIncrementMetric       = "proxy_increment_metric"
	ProxyRecordMetric          = "proxy_record_metric"
	ProxyGetMetric             = "proxy_get_metric"
	ProxyGetProperty           = "proxy_get_property"
	ProxySetProperty           = "proxy_set_property"
	ProxySetEffectiveContext   = "proxy_set_effective_context"
	ProxyDone                  = "proxy_done"
)

// Names of the callbacks (exports) the guest provides.
const (
	ExportInitialize       = "_initialize"
	ExportMemoryAllocate   = "proxy_on_memory_allocate"
	ExportMalloc           = "malloc" // the same allocator, for WAMR (exports.go)
	ExportFree             = "free"   // a no-op, for WAMR (exports.go)
	ExportContextCreate    = "proxy_on_context_create"
	ExportVMStart          = "proxy_on_vm_start"
	ExportConfigure        = "proxy_on_configure"
	ExportTick             = "proxy_on_tick"
	ExportRequestHeaders   = "proxy_on_request_headers"
	ExportRequestBody      = "proxy_on_request_body"
	ExportRequestTrailers  = "proxy_on_request_trailers"
	ExportResponseHeaders  = "proxy_on_response_headers"
	ExportResponseBody     = "proxy_on_response_body"
	ExportResponseTrailers = "proxy_on_response_trailers"
	ExportHTTPCallResponse = "proxy_on_http_call_response"
	ExportQueueReady       = "proxy_on_queue_ready"
	ExportLog              = "proxy_on_log"
	ExportDone             = "proxy_on_done"
	ExportDelete           = "proxy_on_delete"
)

// Status is the result code of every host function.
type Status uint32

// Status values (spec; cpp-sdk proxy_wasm_common.h for the extras).
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCASMismatch          Status = 8
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12
)

// BufferType selects the buffer of proxy_get_buffer_bytes and friends.
type BufferType uint32

// BufferType values.
const (
	BufferHTTPRequestBody      BufferType = 0
	BufferHTTPResponseBody     BufferType = 1
	BufferDownstreamData       BufferType = 2
	BufferUpstreamData         BufferType = 3
	BufferHTTPCallResponseBody BufferType = 4
	BufferGRPCReceive          BufferType = 5
	BufferVMConfiguration      BufferType = 6
	BufferPluginConfiguration  BufferType = 7
	BufferForeignArgs          BufferType = 8
)

// MapType selects the header map of proxy_*_header_map_* calls.
type MapType uint32

// MapType values.
const (
	MapHTTPRequestHeaders       MapType = 0
	MapHTTPRequestTrailers      MapType = 1
	MapHTTPResponseHeaders      MapType = 2
	MapHTTPResponseTrailers     MapType = 3
	MapGRPCInitialMetadata      MapType = 4
	MapGRPCTrailingMetadata     MapType = 5
	MapHTTPCallResponseHeaders  MapType = 6
	MapHTTPCallResponseTrailers MapType = 7
)

// StreamType selects the stream of proxy_continue_stream / proxy_close_stream.
type StreamType uint32

// StreamType values.
const (
	StreamHTTPRequest  StreamType = 0
	StreamHTTPResponse StreamType = 1
	StreamDownstream   StreamType = 2
	StreamUpstream     StreamType = 3
)

// MetricType is the kind of a metric defined with proxy_define_metric.
type MetricType uint32

// MetricType values.
const (
	MetricCounter   MetricType = 0
	MetricGauge     MetricType = 1
	MetricHistogram MetricType = 2
)

// LogLevel is the level of proxy_log.
type LogLevel uint32

// LogLevel values. They are named LogLevel* because LogTrace ... LogCritical
// are the guest's logging functions (the SDK's proxywasm names).
const (
	LogLevelTrace    LogLevel = 0
	LogLevelDebug    LogLevel = 1
	LogLevelInfo     LogLevel = 2
	LogLevelWarn     LogLevel = 3
	LogLevelError    LogLevel = 4
	LogLevelCritical LogLevel = 5
)

// Actions Envoy accepts from the HTTP header and body callbacks beyond the
// spec's Continue(0)/Pause(1) (cpp-sdk proxy_wasm_enums.h). For ABI 0.2.x,
// a headers StopIteration(1) becomes StopAllIterationAndWatermark.
const (
	ActionContinue                  uint32 = 0
	ActionStopIteration             uint32 = 1 // headers; body: StopIterationAndBuffer
	ActionStopIterationAndBuffer    uint32 = 1
	ActionStopIterationAndWatermark uint32 = 2
	ActionStopIterationNoBuffer     uint32 = 3
)
