package hostcalls

import "strings"

// proxy_get_property(path_ptr, path_len, ret_ptr_ptr, ret_size_ptr) → status
//
//	path_ptr     ──► [ path_len bytes: segments joined by \0, no trailing \0 ]
//	ret_ptr_ptr  ──► [ u32 LE ptr ] ──► [ size bytes value ]  (written; allocated)
//	ret_size_ptr ──► [ u32 LE size ]
//
// Values are encoded as Envoy's attributes are: strings raw, integers 8-byte
// LE, bool 1 byte, maps and lists in the pairs format (Envoy context.cc).
// Results: OK; NOT_FOUND for an unknown path.
//
// proxy_set_property(path_ptr, path_len, value_ptr, value_len) → status
//
//	path_ptr  ──► [ path_len bytes ]    (read)
//	value_ptr ──► [ value_len bytes ]   (read)
//
// Envoy stores the value as filter state under the "wasm." prefix.

func propertyPath(path []string) string { return strings.Join(path, "\x00") }

// GetProperty returns the property at path, e.g. []string{"request", "path"}
// or []string{"plugin_name"}; types.ErrorStatusNotFound if unknown.
func GetProperty(path []string) ([]byte, error) {
	p := propertyPath(path)
	beginCall(0)
	return returnedBytes(proxyGetProperty(strPtr(p), u32(len(p)), &retPtr, &retSize))
}

// SetProperty sets the property at path to value.
func SetProperty(path []string, value []byte) error {
	p := propertyPath(path)
	return Status(proxySetProperty(strPtr(p), u32(len(p)), bytesPtr(value), u32(len(value)))).Err()
}
