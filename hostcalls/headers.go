package hostcalls

// proxy_get_header_map_pairs(map_type, ret_ptr_ptr, ret_size_ptr) → status
//
//	ret_ptr_ptr  ──► [ u32 LE ptr ] ──► [ size bytes: the map serialised as in pairs.go ]
//	ret_size_ptr ──► [ u32 LE size ]        u32 N | N×(u32 klen, u32 vlen) | N×(key\0 value\0)
//
// An empty map is ptr=0, size=0. Results: OK, also with no pairs when the
// map is not available in this callback (Envoy: request headers after the
// headers callback continued, from a tick with no stream effective);
// BAD_ARGUMENT for a bad type.
//
// proxy_set_header_map_pairs(map_type, ptr, len) → status
//
//	ptr ──► [ len bytes: the serialised map ]   (read by the host)
//
// Replaces the whole map. Envoy turns a malformed buffer silently into an
// empty map and answers OK, so the guest only ever sends EncodePairs output.
//
// proxy_get_header_map_size(map_type, ret_size_ptr) → status
//
//	ret_size_ptr ──► [ u32 LE size ]   (Envoy: the map's byteSize; missing in proxytest)
//
// proxy_get_header_map_value(map_type, key_ptr, key_len, ret_ptr_ptr, ret_size_ptr) → status
//
//	key_ptr      ──► [ key_len bytes ]                       (read)
//	ret_ptr_ptr  ──► [ u32 LE ptr ] ──► [ size bytes value ] (written; allocated)
//	ret_size_ptr ──► [ u32 LE size ]
//
// Results: OK (Envoy returns only the first value of a repeated key);
// NOT_FOUND for an absent key. An empty value is ptr=0, size=0 and OK.
//
// proxy_add_header_map_value / proxy_replace_header_map_value
//   (map_type, key_ptr, key_len, value_ptr, value_len) → status
//
//	key_ptr   ──► [ key_len bytes ]     (read)
//	value_ptr ──► [ value_len bytes ]   (read)
//
// add appends a value (the key may repeat); replace sets the key to the one
// value, adding it if absent. Results: OK; BAD_ARGUMENT when the map is not
// available (Envoy: request headers once the headers callback returned
// Continue, also from a later tick on a held request; get_header_map_value
// and get_header_map_size too).
//
// proxy_remove_header_map_value(map_type, key_ptr, key_len) → status
//
//	key_ptr ──► [ key_len bytes ]   (read)
//
// Removes every value of the key; OK also when it was absent.

// GetHeaderMapValue returns the (first) value of key in map mt;
// types.ErrorStatusNotFound if the key is absent.
func GetHeaderMapValue(mt MapType, key string) (string, error) {
	beginCall(0)
	b, err := returnedBytes(proxyGetHeaderMapValue(uint32(mt), strPtr(key), u32(len(key)), &retPtr, &retSize))
	if err != nil {
		return "", err
	}
	// b is this call's own copy (takeResult): the string may view it.
	return bstr(b), nil
}

// GetHeaderMapPairs returns every pair of map mt in order (nil when empty).
// A serialisation the host got wrong is ErrBadPairs.
func GetHeaderMapPairs(mt MapType) ([][2]string, error) {
	beginCall(0)
	b, err := returnedBytes(proxyGetHeaderMapPairs(uint32(mt), &retPtr, &retSize))
	if err != nil {
		return nil, err
	}
	// b is this call's own copy (takeResult): the pairs may point into it.
	return decodePairsView(b)
}

// GetHeaderMapPairsInto is GetHeaderMapPairs that allocates nothing when
// its buffers have room: the host writes the serialised map into dst's
// memory (lent for the call, as GetSharedDataInto), and the pairs are
// written into pairs' memory. The keys and values view buf, which is dst's
// memory (or, for a map larger than cap(dst), a new buffer the caller may
// keep for the next call): they are valid until buf is written again.
func GetHeaderMapPairsInto(dst []byte, pairs [][2]string, mt MapType) (out [][2]string, buf []byte, err error) {
	if cap(dst) == 0 {
		out, err = GetHeaderMapPairs(mt)
		return out, dst, err
	}
	saved := beginCallInto(dst)
	b, err := returnedBytes(proxyGetHeaderMapPairs(uint32(mt), &retPtr, &retSize))
	endCallInto(saved)
	if err != nil {
		return nil, dst, err
	}
	if cap(b) > cap(dst) {
		dst = b[:0]
	}
	out, err = decodePairsInto(pairs, b, true)
	return out, dst, err
}

// SetHeaderMapPairs replaces map mt with pairs. More than MaxPairs pairs or
// MaxPairsSize bytes is ErrBadPairs without a host call (Envoy would
// silently empty the map).
func SetHeaderMapPairs(mt MapType, pairs [][2]string) error {
	b := encodeMap(pairs)
	if len(pairs) > MaxPairs || len(b) > MaxPairsSize {
		return ErrBadPairs
	}
	return Status(proxySetHeaderMapPairs(uint32(mt), bytesPtr(b), u32(len(b)))).Err()
}

// GetHeaderMapSize returns what proxy_get_header_map_size reports for map
// mt (Envoy: the map's size in bytes).
func GetHeaderMapSize(mt MapType) (int, error) {
	beginCall(0)
	if err := Status(proxyGetHeaderMapSize(uint32(mt), &retSize)).Err(); err != nil {
		return 0, err
	}
	return int(retSize), nil
}

// AddHeaderMapValue adds the pair key: value to map mt.
func AddHeaderMapValue(mt MapType, key, value string) error {
	return Status(proxyAddHeaderMapValue(uint32(mt), strPtr(key), u32(len(key)), strPtr(value), u32(len(value)))).Err()
}

// ReplaceHeaderMapValue sets key to value in map mt, adding it if absent.
func ReplaceHeaderMapValue(mt MapType, key, value string) error {
	return Status(proxyReplaceHeaderMapValue(uint32(mt), strPtr(key), u32(len(key)), strPtr(value), u32(len(value)))).Err()
}

// RemoveHeaderMapValue removes every value of key from map mt.
func RemoveHeaderMapValue(mt MapType, key string) error {
	return Status(proxyRemoveHeaderMapValue(uint32(mt), strPtr(key), u32(len(key)))).Err()
}

// GetHttpRequestHeaders returns every request header in order; valid in OnHttpRequestHeaders (and later
// callbacks of the same direction while the host still has the map).
func GetHttpRequestHeaders() ([][2]string, error) { return GetHeaderMapPairs(MapHTTPRequestHeaders) }

// GetHttpRequestHeadersInto is GetHttpRequestHeaders into the caller's
// buffers (GetHeaderMapPairsInto).
func GetHttpRequestHeadersInto(dst []byte, pairs [][2]string) ([][2]string, []byte, error) {
	return GetHeaderMapPairsInto(dst, pairs, MapHTTPRequestHeaders)
}

// SetHttpRequestHeaders replaces all request headers with pairs.
func SetHttpRequestHeaders(pairs [][2]string) error {
	return SetHeaderMapPairs(MapHTTPRequestHeaders, pairs)
}

// GetHttpRequestHeader returns the first value of the request header key;
// types.ErrorStatusNotFound if absent.
func GetHttpRequestHeader(key string) (string, error) {
	return GetHeaderMapValue(MapHTTPRequestHeaders, key)
}

// AddHttpRequestHeader adds the request header key: value.
func AddHttpRequestHeader(key, value string) error {
	return AddHeaderMapValue(MapHTTPRequestHeaders, key, value)
}

// ReplaceHttpRequestHeader sets the request header key to value, adding it if absent.
func ReplaceHttpRequestHeader(key, value string) error {
	return ReplaceHeaderMapValue(MapHTTPRequestHeaders, key, value)
}

// RemoveHttpRequestHeader removes every value of the request header key.
func RemoveHttpRequestHeader(key string) error {
	return RemoveHeaderMapValue(MapHTTPRequestHeaders, key)
}

// GetHttpRequestTrailers returns every request trailer in order; valid in OnHttpRequestTrailers (and later
// callbacks of the same direction while the host still has the map).
func GetHttpRequestTrailers() ([][2]string, error) { return GetHeaderMapPairs(MapHTTPRequestTrailers) }

// SetHttpRequestTrailers replaces all request trailers with pairs.
func SetHttpRequestTrailers(pairs [][2]string) error {
	return SetHeaderMapPairs(MapHTTPRequestTrailers, pairs)
}

// GetHttpRequestTrailer returns the first value of the request trailer key;
// types.ErrorStatusNotFound if absent.
func GetHttpRequestTrailer(key string) (string, error) {
	return GetHeaderMapValue(MapHTTPRequestTrailers, key)
}

// AddHttpRequestTrailer adds the request trailer key: value.
func AddHttpRequestTrailer(key, value string) error {
	return AddHeaderMapValue(MapHTTPRequestTrailers, key, value)
}

// ReplaceHttpRequestTrailer sets the request trailer key to value, adding it if absent.
func ReplaceHttpRequestTrailer(key, value string) error {
	return ReplaceHeaderMapValue(MapHTTPRequestTrailers, key, value)
}

// RemoveHttpRequestTrailer removes every value of the request trailer key.
func RemoveHttpRequestTrailer(key string) error {
	return RemoveHeaderMapValue(MapHTTPRequestTrailers, key)
}

// GetHttpResponseHeaders returns every response header in order; valid in OnHttpResponseHeaders (and later
// callbacks of the same direction while the host still has the map).
func GetHttpResponseHeaders() ([][2]string, error) { return GetHeaderMapPairs(MapHTTPResponseHeaders) }

// GetHttpResponseHeadersInto is GetHttpResponseHeaders into the caller's
// buffers (GetHeaderMapPairsInto).
func GetHttpResponseHeadersInto(dst []byte, pairs [][2]string) ([][2]string, []byte, error) {
	return GetHeaderMapPairsInto(dst, pairs, MapHTTPResponseHeaders)
}

// SetHttpResponseHeaders replaces all response headers with pairs.
func SetHttpResponseHeaders(pairs [][2]string) error {
	return SetHeaderMapPairs(MapHTTPResponseHeaders, pairs)
}

// GetHttpResponseHeader returns the first value of the response header key;
// types.ErrorStatusNotFound if absent.
func GetHttpResponseHeader(key string) (string, error) {
	return GetHeaderMapValue(MapHTTPResponseHeaders, key)
}

// AddHttpResponseHeader adds the response header key: value.
func AddHttpResponseHeader(key, value string) error {
	return AddHeaderMapValue(MapHTTPResponseHeaders, key, value)
}

// ReplaceHttpResponseHeader sets the response header key to value, adding it if absent.
func ReplaceHttpResponseHeader(key, value string) error {
	return ReplaceHeaderMapValue(MapHTTPResponseHeaders, key, value)
}

// RemoveHttpResponseHeader removes every value of the response header key.
func RemoveHttpResponseHeader(key string) error {
	return RemoveHeaderMapValue(MapHTTPResponseHeaders, key)
}

// GetHttpResponseTrailers returns every response trailer in order; valid in OnHttpResponseTrailers (and later
// callbacks of the same direction while the host still has the map).
func GetHttpResponseTrailers() ([][2]string, error) {
	return GetHeaderMapPairs(MapHTTPResponseTrailers)
}

// SetHttpResponseTrailers replaces all response trailers with pairs.
func SetHttpResponseTrailers(pairs [][2]string) error {
	return SetHeaderMapPairs(MapHTTPResponseTrailers, pairs)
}

// GetHttpResponseTrailer returns the first value of the response trailer key;
// types.ErrorStatusNotFound if absent.
func GetHttpResponseTrailer(key string) (string, error) {
	return GetHeaderMapValue(MapHTTPResponseTrailers, key)
}

// AddHttpResponseTrailer adds the response trailer key: value.
func AddHttpResponseTrailer(key, value string) error {
	return AddHeaderMapValue(MapHTTPResponseTrailers, key, value)
}

// ReplaceHttpResponseTrailer sets the response trailer key to value, adding it if absent.
func ReplaceHttpResponseTrailer(key, value string) error {
	return ReplaceHeaderMapValue(MapHTTPResponseTrailers, key, value)
}

// RemoveHttpResponseTrailer removes every value of the response trailer key.
func RemoveHttpResponseTrailer(key string) error {
	return RemoveHeaderMapValue(MapHTTPResponseTrailers, key)
}

// GetHttpCallResponseHeaders returns the headers of an http_call response,
// inside the DispatchHttpCall callback.
func GetHttpCallResponseHeaders() ([][2]string, error) {
	return GetHeaderMapPairs(MapHTTPCallResponseHeaders)
}

// GetHttpCallResponseTrailers returns the trailers of an http_call
// response, inside the DispatchHttpCall callback.
func GetHttpCallResponseTrailers() ([][2]string, error) {
	return GetHeaderMapPairs(MapHTTPCallResponseTrailers)
}
