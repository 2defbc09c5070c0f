package hostcalls

// proxy_get_shared_data(key_ptr, key_len, ret_ptr_ptr, ret_size_ptr, ret_cas_ptr) → status
//
//	key_ptr      ──► [ key_len bytes ]                        (read)
//	ret_ptr_ptr  ──► [ u32 LE ptr ] ──► [ size bytes value ]  (written; allocated)
//	ret_size_ptr ──► [ u32 LE size ]
//	ret_cas_ptr  ──► [ u32 LE cas ]
//
// Results: OK; NOT_FOUND for a missing key. An empty value is ptr=0, size=0.
//
// proxy_set_shared_data(key_ptr, key_len, value_ptr, value_len, cas) → status
//
//	key_ptr   ──► [ key_len bytes ]     (read)
//	value_ptr ──► [ value_len bytes ]   (read)
//
// Results: OK; CAS_MISMATCH when the key exists, cas != 0 and cas differs
// from the key's current cas. In Envoy a missing key is always written
// whatever cas is, cas 0 is unconditional, and cas values come from one
// global counter (cpp-host src/shared_data.cc); proxytest differs (cas 0 on an existing
// key mismatches, per-key cas+1).

// GetSharedData returns the value of key in the VM-id wide store and the cas
// to pass to SetSharedData; types.ErrorStatusNotFound if absent.
func GetSharedData(key string) (value []byte, cas uint32, err error) {
	beginCall(0)
	st := proxyGetSharedData(strPtr(key), u32(len(key)), &retPtr, &retSize, &retU32)
	cas = retU32
	value, err = returnedBytes(st)
	if err != nil {
		return nil, 0, err
	}
	return value, cas, nil
}

// GetSharedDataInto is GetSharedData that has the host write the value into
// dst's memory when it fits in cap(dst): the value is then a slice of dst
// and nothing is allocated; a larger value is returned in new memory. dst's
// contents are overwritten; the caller must not use them, nor the value
// once it reuses dst.
func GetSharedDataInto(dst []byte, key string) (value []byte, cas uint32, err error) {
	if cap(dst) == 0 {
		return GetSharedData(key)
	}
	saved := beginCallInto(dst)
	st := proxyGetSharedData(strPtr(key), u32(len(key)), &retPtr, &retSize, &retU32)
	cas = retU32
	value, err = returnedBytes(st)
	endCallInto(saved)
	if err != nil {
		return nil, 0, err
	}
	return value, cas, nil
}

// SetSharedData writes value under key if cas still matches (see above);
// types.ErrorStatusCasMismatch otherwise. Never call it from init.
func SetSharedData(key string, value []byte, cas uint32) error {
	return Status(proxySetSharedData(strPtr(key), u32(len(key)), bytesPtr(value), u32(len(value)), cas)).Err()
}
