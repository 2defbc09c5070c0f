package hostcalls

import "math"

// proxy_get_buffer_bytes(buf_type, start, max_size, ret_ptr_ptr, ret_size_ptr) → status
//
//	ret_ptr_ptr  ──► [ u32 LE ptr ] ──► [ size bytes: buffer[start : start+size] ]
//	ret_size_ptr ──► [ u32 LE size ]        (allocated with proxy_on_memory_allocate)
//
// The host copies at most max_size bytes from start (clamped to the buffer's
// end). An empty result is written as ptr=0, size=0 without allocating.
// Results: OK; NOT_FOUND when the buffer is not available in this callback
// (Envoy: the http_call body and the plugin configuration outside their
// callbacks; an HTTP body that is not available reads OK and empty;
// proxytest also answers NOT_FOUND for an empty body); BAD_ARGUMENT for a
// start past the end. A body held by StopIterationAndBuffer can be read
// from any later callback with its stream effective (SetEffectiveContext).
//
// proxy_get_buffer_status(buf_type, ret_size_ptr, ret_flags_ptr) → status
//
//	ret_size_ptr  ──► [ u32 LE size of the buffer ]
//	ret_flags_ptr ──► [ u32 LE flags ]
//
// Results: OK; NOT_FOUND when the buffer is not available. Missing in
// proxytest.
//
// proxy_set_buffer_bytes(buf_type, start, size, data_ptr, data_len) → status
//
//	data_ptr ──► [ data_len bytes ]   (read by the host)
//
// Replaces buffer[start : start+size] with the data. Envoy supports only:
// start=0,size=0 prepend; start=0,size>=len replace; start>=len append;
// anything else is BAD_ARGUMENT (Envoy Buffer::copyFrom), and so is any
// write to an HTTP body that is neither in its body callback nor held by
// StopIterationAndBuffer (Envoy hands out a read-only empty buffer then).

// GetBufferBytes returns at most maxSize bytes of buffer bt from start.
// A maxSize up to 16 MiB is reserved in the allocator's arena before the
// call (see alloc.go). An empty buffer returns nil, nil.
func GetBufferBytes(bt BufferType, start, maxSize int) ([]byte, error) {
	reserve := maxSize
	if reserve > maxReserve {
		reserve = 0
	}
	beginCall(reserve)
	return returnedBytes(proxyGetBufferBytes(uint32(bt), u32(start), u32(maxSize), &retPtr, &retSize))
}

// GetBufferBytesInto is GetBufferBytes that has the host write the result
// into dst's memory when dst has room for maxSize bytes (and maxSize is at
// most 16 MiB): the result is then a slice of dst and nothing is allocated,
// so a caller that reuses dst reads bodies without garbage. Otherwise it is
// GetBufferBytes. dst's contents are overwritten; the caller must not use
// them, nor the result once it reuses dst.
func GetBufferBytesInto(dst []byte, bt BufferType, start, maxSize int) ([]byte, error) {
	if maxSize <= 0 || maxSize > maxReserve || cap(dst) < maxSize {
		return GetBufferBytes(bt, start, maxSize)
	}
	saved := beginCallInto(dst)
	b, err := returnedBytes(proxyGetBufferBytes(uint32(bt), u32(start), u32(maxSize), &retPtr, &retSize))
	endCallInto(saved)
	return b, err
}

// GetBufferStatus returns the size of buffer bt and its flags.
func GetBufferStatus(bt BufferType) (size int, flags uint32, err error) {
	beginCall(0)
	if err := Status(proxyGetBufferStatus(uint32(bt), &retSize, &retU32)).Err(); err != nil {
		return 0, 0, err
	}
	return int(retSize), retU32, nil
}

// SetBufferBytes replaces size bytes of buffer bt from start with data.
func SetBufferBytes(bt BufferType, start, size int, data []byte) error {
	return Status(proxySetBufferBytes(uint32(bt), u32(start), u32(size), bytesPtr(data), u32(len(data)))).Err()
}

// GetPluginConfiguration returns the plugin configuration
// (PluginConfig.configuration; for Istio the JSON of pluginConfig). Call it
// from OnPluginStart. An empty configuration returns nil, nil.
func GetPluginConfiguration() ([]byte, error) {
	return GetBufferBytes(BufferPluginConfiguration, 0, math.MaxInt32)
}

// GetVMConfiguration returns the VM configuration (vm_config.configuration).
// Call it from OnVMStart.
func GetVMConfiguration() ([]byte, error) {
	return GetBufferBytes(BufferVMConfiguration, 0, math.MaxInt32)
}

// GetHttpRequestBody returns at most maxSize bytes of the request body from
// start, in OnHttpRequestBody. Unless the previous body callback returned
// ActionPause (StopIterationAndBuffer) the body is only the current chunk.
func GetHttpRequestBody(start, maxSize int) ([]byte, error) {
	return GetBufferBytes(BufferHTTPRequestBody, start, maxSize)
}

// GetHttpRequestBodyInto is GetHttpRequestBody reading into dst's memory
// when it has room (see GetBufferBytesInto).
func GetHttpRequestBodyInto(dst []byte, start, maxSize int) ([]byte, error) {
	return GetBufferBytesInto(dst, BufferHTTPRequestBody, start, maxSize)
}

// GetHttpResponseBody returns at most maxSize bytes of the response body
// from start, in OnHttpResponseBody.
func GetHttpResponseBody(start, maxSize int) ([]byte, error) {
	return GetBufferBytes(BufferHTTPResponseBody, start, maxSize)
}

// GetHttpCallResponseBody returns at most maxSize bytes of the body of an
// http_call response, from start, inside the DispatchHttpCall callback.
func GetHttpCallResponseBody(start, maxSize int) ([]byte, error) {
	return GetBufferBytes(BufferHTTPCallResponseBody, start, maxSize)
}

// ReplaceHttpRequestBody replaces the (buffered) request body with b. Remove
// content-length in OnHttpRequestHeaders if the length may change.
func ReplaceHttpRequestBody(b []byte) error {
	return SetBufferBytes(BufferHTTPRequestBody, 0, math.MaxInt32, b)
}

// AppendHttpRequestBody appends b to the request body.
func AppendHttpRequestBody(b []byte) error {
	return SetBufferBytes(BufferHTTPRequestBody, math.MaxInt32, 0, b)
}

// PrependHttpRequestBody prepends b to the request body.
func PrependHttpRequestBody(b []byte) error {
	return SetBufferBytes(BufferHTTPRequestBody, 0, 0, b)
}

// ReplaceHttpResponseBody replaces the (buffered) response body with b.
func ReplaceHttpResponseBody(b []byte) error {
	return SetBufferBytes(BufferHTTPResponseBody, 0, math.MaxInt32, b)
}

// AppendHttpResponseBody appends b to the response body.
func AppendHttpResponseBody(b []byte) error {
	return SetBufferBytes(BufferHTTPResponseBody, math.MaxInt32, 0, b)
}

// PrependHttpResponseBody prepends b to the response body.
func PrependHttpResponseBody(b []byte) error {
	return SetBufferBytes(BufferHTTPResponseBody, 0, 0, b)
}
