//go:build !wasip1

package hostcalls

import "unsafe"

// Native stand-ins for the host functions of imports_wasip1.go: every one
// answers UNIMPLEMENTED, so every typed wrapper returns
// types.ErrorUnimplemented (and the Log functions do nothing) outside Wasm.
// They let packages that import hostcalls build and unit-test natively.

func proxyLog(level uint32, msg unsafe.Pointer, msgLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyGetLogLevel(retLevel *uint32) uint32 { return uint32(StatusUnimplemented) }

func proxySetTickPeriodMilliseconds(periodMs uint32) uint32 { return uint32(StatusUnimplemented) }

func proxyGetBufferBytes(bufType, start, maxSize uint32, retPtr, retSize *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyGetBufferStatus(bufType uint32, retSize, retFlags *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxySetBufferBytes(bufType, start, size uint32, data unsafe.Pointer, dataLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyGetHeaderMapPairs(mapType uint32, retPtr, retSize *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxySetHeaderMapPairs(mapType uint32, pairs unsafe.Pointer, pairsLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyGetHeaderMapSize(mapType uint32, retSize *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyGetHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, retPtr, retSize *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyAddHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyReplaceHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyRemoveHeaderMapValue(mapType uint32, key unsafe.Pointer, keyLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyContinueStream(streamType uint32) uint32 { return uint32(StatusUnimplemented) }

func proxyCloseStream(streamType uint32) uint32 { return uint32(StatusUnimplemented) }

func proxySendLocalResponse(statusCode uint32, details unsafe.Pointer, detailsLen uint32, body unsafe.Pointer, bodyLen uint32, headers unsafe.Pointer, headersLen uint32, grpcStatus int32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyHTTPCall(upstream unsafe.Pointer, upstreamLen uint32, headers unsafe.Pointer, headersLen uint32, body unsafe.Pointer, bodyLen uint32, trailers unsafe.Pointer, trailersLen uint32, timeoutMs uint32, retToken *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyGetStatus(retCode, retPtr, retSize *uint32) uint32 { return uint32(StatusUnimplemented) }

func proxySetSharedData(key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32, cas uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyGetSharedData(key unsafe.Pointer, keyLen uint32, retPtr, retSize, retCAS *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyRegisterSharedQueue(name unsafe.Pointer, nameLen uint32, retID *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyResolveSharedQueue(vmID unsafe.Pointer, vmIDLen uint32, name unsafe.Pointer, nameLen uint32, retID *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyEnqueueSharedQueue(queueID uint32, data unsafe.Pointer, dataLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyDequeueSharedQueue(queueID uint32, retPtr, retSize *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyDefineMetric(metricType uint32, name unsafe.Pointer, nameLen uint32, retID *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxyIncrementMetric(metricID uint32, delta int64) uint32 { return uint32(StatusUnimplemented) }

func proxyRecordMetric(metricID uint32, value uint64) uint32 { return uint32(StatusUnimplemented) }

func proxyGetMetric(metricID uint32, retValue *uint64) uint32 { return uint32(StatusUnimplemented) }

func proxyGetProperty(path unsafe.Pointer, pathLen uint32, retPtr, retSize *uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxySetProperty(path unsafe.Pointer, pathLen uint32, value unsafe.Pointer, valueLen uint32) uint32 {
	return uint32(StatusUnimplemented)
}

func proxySetEffectiveContext(contextID uint32) uint32 { return uint32(StatusUnimplemented) }

func proxyDone() uint32 { return uint32(StatusUnimplemented) }
