//go:build wasip1

package hostcalls

import "unsafe"

// The host functions of ABI v0.2.1 (proxy-wasm/spec), module "env", with
// the exact Wasm signatures: every pointer, size and enum is an i32, the
// metric values are i64, every result is an i32 Status. The typed wrappers
// that call them, with the memory each reads and writes, are in the family
// files (log.go, buffer.go, headers.go, ...). Go keeps only the imports a
// module actually calls.

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, msgLen uint32) uint32

//go:wasmimport env proxy_get_log_level
func proxyGetLogLevel(retLevel *uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriodMilliseconds(periodMs uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(bufType, start, maxSize uint32, retPtr, retSize *uint32) uint32

//go:wasmimport env proxy_get_buffer_status
func proxyGetBufferStatus(bufType uint32, retSize, retFlags *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(bufType, start, size uint32, data unsafe.Pointer, dataLen uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(mapType uint32, retPtr, retSize *uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func proxySetHeaderMapPairs(mapType uint32, pairs unsafe.Pointer, pairsLen uint32) uint32

//go:wasmimport env proxy_get_header_map_size
func proxyGetHeaderMapSize(mapType uint32, retSize *uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, retPtr, retSize *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(streamType uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(streamType uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(statusCode uint32, details unsafe.Pointer, detailsLen uint32, body unsafe.Pointer, bodyLen uint32, headers unsafe.Pointer, headersLen uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(upstream unsafe.Pointer, upstreamLen uint32, headers unsafe.Pointer, headersLen uint32, body unsafe.Pointer, bodyLen uint32, trailers unsafe.Pointer, trailersLen uint32, timeoutMs uint32, retToken *uint32) uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(retCode, retPtr, retSize *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32, cas uint32) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key unsafe.Pointer, keyLen uint32, retPtr, retSize, retCAS *uint32) uint32

//go:wasmimport env proxy_register_shared_queue
func proxyRegisterSharedQueue(name unsafe.Pointer, nameLen uint32, retID *uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
func proxyResolveSharedQueue(vmID unsafe.Pointer, vmIDLen uint32, name unsafe.Pointer, nameLen uint32, retID *uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func proxyEnqueueSharedQueue(queueID uint32, data unsafe.Pointer, dataLen uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func proxyDequeueSharedQueue(queueID uint32, retPtr, retSize *uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(metricType uint32, name unsafe.Pointer, nameLen uint32, retID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(metricID uint32, delta int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecordMetric(metricID uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func proxyGetMetric(metricID uint32, retValue *uint64) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path unsafe.Pointer, pathLen uint32, retPtr, retSize *uint32) uint32

//go:wasmimport env proxy_set_property
func proxySetProperty(path unsafe.Pointer, pathLen uint32, value unsafe.Pointer, valueLen uint32) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(contextID uint32) uint32

//go:wasmimport env proxy_done
func proxyDone() uint32
