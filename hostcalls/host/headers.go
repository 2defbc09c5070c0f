package host

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// headerMap returns the header map of type t in the effective context and
// whether it may be changed. Envoy keeps a map only while the filter can
// act on it: request (response) headers during the headers callback and
// while the stream is stopped there — once the filter continues, Envoy
// forgets the pointer and every call on the map is BAD_ARGUMENT; trailers
// during the trailers callback; everything but the request trailers
// read-only during on_log; the
// http_call response maps (6, 7) during proxy_on_http_call_response.
func (vm *VM) headerMap(t hostcalls.MapType) (m *[][2]string, mutable, ok bool) {
	switch t {
	case hostcalls.MapHTTPCallResponseHeaders:
		if vm.callResp != nil {
			return &vm.callResp.headers, false, true
		}
		return nil, false, false
	case hostcalls.MapHTTPCallResponseTrailers:
		if vm.callResp != nil {
			return &vm.callResp.trailers, false, true
		}
		return nil, false, false
	}
	s := vm.cur
	if s == nil {
		return nil, false, false
	}
	var d *direction
	trailers := false
	switch t {
	case hostcalls.MapHTTPRequestHeaders:
		d = &s.req
	case hostcalls.MapHTTPRequestTrailers:
		d, trailers = &s.req, true
	case hostcalls.MapHTTPResponseHeaders:
		d = &s.resp
	case hostcalls.MapHTTPResponseTrailers:
		d, trailers = &s.resp, true
	default:
		return nil, false, false
	}
	if trailers {
		if d.trailersMutable || d.trailersStopped {
			return &d.trailers, true, true
		}
		if s.logPhase && d == &s.resp {
			// Envoy's getConstMap keeps the response trailers sent for
			// on_log (access_log_response_trailers_) but answers nullptr
			// for the request trailers there.
			return &d.trailers, false, true
		}
		return nil, false, false
	}
	if d.headersMutable {
		return &d.headers, true, true
	}
	if s.logPhase {
		return &d.headers, false, true
	}
	return nil, false, false
}

// headerByteSize is Envoy's HeaderMap::byteSize: the sum of the keys' and
// values' lengths.
func headerByteSize(m [][2]string) int {
	n := 0
	for _, kv := range m {
		n += len(kv[0]) + len(kv[1])
	}
	return n
}

// removeHeader removes every pair of key from m, in place.
func removeHeader(m [][2]string, key []byte) [][2]string {
	out := m[:0]
	for _, kv := range m {
		if kv[0] != string(key) {
			out = append(out, kv)
		}
	}
	return out
}

// replaceHeader sets the first value of key and removes its later pairs,
// in place (the pairs after it only move towards the front), or appends
// the pair if key is absent.
func replaceHeader(m [][2]string, key, value []byte) [][2]string {
	for i, kv := range m {
		if kv[0] == string(key) {
			m[i][1] = string(value)
			return append(m[:i+1], removeHeader(m[i+1:], key)...)
		}
	}
	return append(m, newPair(key, value))
}

// newPair copies a header's key and value into one new string, which
// both share.
func newPair(key, value []byte) [2]string {
	kv := string(key) + string(value)
	return [2]string{kv[:len(key)], kv[len(key):]}
}

// appendPairs appends the serialisation of hostcalls.EncodePairs to dst
// (nothing for an empty map).
func appendPairs(dst []byte, m [][2]string) []byte {
	if len(m) == 0 {
		return dst
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(m)))
	for _, kv := range m {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[1])))
	}
	for _, kv := range m {
		dst = append(dst, kv[0]...)
		dst = append(dst, 0)
		dst = append(dst, kv[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// stringBytes returns the bytes of s without copying them, for callers
// that only read them (copyOut).
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// headerStatus is the status of a call on a map that is not available:
// BAD_ARGUMENT, or NOT_FOUND for a read during on_log.
func unavailable(vm *VM) hostcalls.Status {
	if vm.cur != nil && vm.cur.logPhase {
		return hostcalls.StatusNotFound
	}
	return hostcalls.StatusBadArgument
}

func fail(vm *VM, stack []uint64, st hostcalls.Status) {
	setStatus(stack, st)
	vm.traceRet(st, "")
}

// proxyGetHeaderMapPairs is proxy_get_header_map_pairs(map_type,
// ret_ptr_ptr, ret_size_ptr) → status.
//
// Copies the whole map out in the pairs serialisation (empty map:
// ptr=0,size=0). OK, also for a map that is not available now (request
// headers after the filter let them through, a tick with no stream
// effective): then no pairs, as Envoy's getHeaderMapPairs; BAD_ARGUMENT:
// an unknown map type; INVALID_MEMORY_ACCESS.
//
//	ret_ptr_ptr   ret_size_ptr
//	[ ptr u32le ] [ size u32le ]
//	   +--> [ N u32le | (klen u32le, vlen u32le) × N | k \0 v \0 ... ]
func proxyGetHeaderMapPairs(vm *VM, mod api.Module, stack []uint64) {
	t := hostcalls.MapType(uint32(stack[0]))
	if vm.tracing {
		vm.trace("==> %s(type=%d)", hostcalls.ProxyGetHeaderMapPairs, t)
	}
	if t > hostcalls.MapHTTPCallResponseTrailers {
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	}
	m, _, ok := vm.headerMap(t)
	if !ok {
		// Envoy's getHeaderMapPairs answers OK with no pairs when the
		// map is not available (headerMapToPairs(nullptr)).
		st := vm.copyOut(mod, nil, uint32(stack[1]), uint32(stack[2]))
		setStatus(stack, st)
		vm.traceRet(st, "pairs=0 (map not available)")
		return
	}
	// Encoded into a buffer of the VM's (copyOut copies it into the
	// guest's memory; the allocator it calls cannot get a header map).
	vm.pairsBuf = appendPairs(vm.pairsBuf[:0], *m)
	st := vm.copyOut(mod, vm.pairsBuf, uint32(stack[1]), uint32(stack[2]))
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "pairs=%d", len(*m))
	}
}

// proxySetHeaderMapPairs is proxy_set_header_map_pairs(map_type, ptr, len)
// → status.
//
// Replaces the whole map (keys lower-cased). OK; BAD_ARGUMENT: map not
// available or not mutable now, or a malformed serialisation (Envoy
// silently wipes the map and answers OK; this host refuses so the bug
// shows); INVALID_MEMORY_ACCESS.
//
//	ptr
//	[ N u32le | (klen u32le, vlen u32le) × N | k \0 v \0 ... ]
func proxySetHeaderMapPairs(vm *VM, mod api.Module, stack []uint64) {
	t := hostcalls.MapType(uint32(stack[0]))
	raw, okm := read(mod, uint32(stack[1]), uint32(stack[2]))
	if !okm {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	pairs, err := hostcalls.DecodePairs(raw)
	if vm.tracing {
		vm.trace("==> %s(type=%d,pairs=%q)", hostcalls.ProxySetHeaderMapPairs, t, pairs)
	}
	m, mutable, ok := vm.headerMap(t)
	if !ok || !mutable || err != nil {
		if err != nil {
			vm.h.addLog(hostcalls.LogLevelError, vm.index, "host: proxy_set_header_map_pairs: "+err.Error())
		}
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	}
	*m = lowerPairs(pairs)
	fail(vm, stack, hostcalls.StatusOK)
}

// proxyGetHeaderMapSize is proxy_get_header_map_size(map_type,
// ret_size_ptr) → status.
//
// Writes the map's byte size (Envoy's byteSize: Σ len(key)+len(value)).
// OK; BAD_ARGUMENT: not available; INVALID_MEMORY_ACCESS.
//
//	ret_size_ptr
//	[ size u32le ]
func proxyGetHeaderMapSize(vm *VM, mod api.Module, stack []uint64) {
	t := hostcalls.MapType(uint32(stack[0]))
	if vm.tracing {
		vm.trace("==> %s(type=%d)", hostcalls.ProxyGetHeaderMapSize, t)
	}
	m, _, ok := vm.headerMap(t)
	if !ok {
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	}
	n := headerByteSize(*m)
	st := hostcalls.StatusOK
	if !writeU32(mod, uint32(stack[1]), uint32(n)) {
		st = hostcalls.StatusInvalidMemoryAccess
	}
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "size=%d", n)
	}
}

// proxyGetHeaderMapValue is proxy_get_header_map_value(map_type, key_ptr,
// key_len, ret_ptr_ptr, ret_size_ptr) → status.
//
// Copies out the FIRST value of the (lower-cased) key; an empty value is
// ptr=0,size=0. OK; NOT_FOUND: no such header (or any map during on_log
// that Envoy does not keep); BAD_ARGUMENT: map not available now;
// INVALID_MEMORY_ACCESS.
//
//	key_ptr        ret_ptr_ptr   ret_size_ptr
//	[ k e y ] ...  [ ptr u32le ] [ size u32le ]
//	                  +--> [ v a l u e ]  (allocated by the guest)
func proxyGetHeaderMapValue(vm *VM, mod api.Module, stack []uint64) {
	t, key, okm := headerKey(vm, mod, stack, hostcalls.ProxyGetHeaderMapValue)
	if !okm {
		return
	}
	m, _, ok := vm.headerMap(t)
	if !ok {
		fail(vm, stack, unavailable(vm))
		return
	}
	for _, kv := range *m {
		if kv[0] == string(key) {
			st := vm.copyOut(mod, stringBytes(kv[1]), uint32(stack[3]), uint32(stack[4]))
			setStatus(stack, st)
			if vm.tracing {
				vm.traceRet(st, "value=%q", kv[1])
			}
			return
		}
	}
	fail(vm, stack, hostcalls.StatusNotFound)
}

// headerKey reads the (map_type, key_ptr, key_len) arguments of a host
// function that names one header, lower-cases the key as Envoy does and
// traces the call; on an unreadable key it sets INVALID_MEMORY_ACCESS and
// reports false. The key may be a view of guest memory (see lowerKey).
func headerKey(vm *VM, mod api.Module, stack []uint64, name string) (hostcalls.MapType, []byte, bool) {
	t := hostcalls.MapType(uint32(stack[0]))
	key, ok := view(mod, uint32(stack[1]), uint32(stack[2]))
	if !ok {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return t, nil, false
	}
	key = lowerKey(key)
	if vm.tracing { // boxing the strings allocates even when the transcript is off
		vm.trace("==> %s(type=%d,key=%q)", name, t, key)
	}
	return t, key, true
}

// lowerKey returns strings.ToLower of a header key read from guest memory:
// the key itself (a view, valid until the guest runs again) when it holds
// no upper-case letter and no byte beyond ASCII, as header keys mostly do,
// else a lower-cased copy.
func lowerKey(b []byte) []byte {
	for _, c := range b {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return []byte(strings.ToLower(string(b)))
		}
	}
	return b
}

// proxyAddHeaderMapValue is proxy_add_header_map_value(map_type, key_ptr,
// key_len, value_ptr, value_len) → status.
//
// Appends a header (another value if the key exists). OK; BAD_ARGUMENT:
// the map is not available or frozen (after the filter continued);
// INVALID_MEMORY_ACCESS.
//
//	key_ptr         value_ptr
//	[ k e y ]  ...  [ v a l u e ]
func proxyAddHeaderMapValue(vm *VM, mod api.Module, stack []uint64) {
	modifyHeader(vm, mod, stack, hostcalls.ProxyAddHeaderMapValue, addHeader)
}

// proxyReplaceHeaderMapValue is proxy_replace_header_map_value(map_type,
// key_ptr, key_len, value_ptr, value_len) → status.
//
// Sets the first value of the key and removes the others (adds it if
// absent). Same results and memory as proxy_add_header_map_value.
func proxyReplaceHeaderMapValue(vm *VM, mod api.Module, stack []uint64) {
	modifyHeader(vm, mod, stack, hostcalls.ProxyReplaceHeaderMapValue, replaceHeader)
}

// addHeader appends the pair (key, value) to m.
func addHeader(m [][2]string, k, v []byte) [][2]string {
	return append(m, newPair(k, v))
}

// modifyHeader is the body of the host functions name (add and replace)
// which share a layout:
//
//	key_ptr         value_ptr
//	[ k e y ]  ...  [ v a l u e ]
//
// apply gets the key and the value as views of guest memory and copies
// what it keeps.
func modifyHeader(vm *VM, mod api.Module, stack []uint64, name string, apply func(m [][2]string, k, v []byte) [][2]string) {
	t := hostcalls.MapType(uint32(stack[0]))
	key, ok1 := view(mod, uint32(stack[1]), uint32(stack[2]))
	value, ok2 := view(mod, uint32(stack[3]), uint32(stack[4]))
	if !ok1 || !ok2 {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	key = lowerKey(key)
	if vm.tracing { // boxing the strings allocates even when the transcript is off
		vm.trace("==> %s(type=%d,key=%q,value=%q)", name, t, key, value)
	}
	m, mutable, ok := vm.headerMap(t)
	if !ok || !mutable {
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	}
	*m = apply(*m, key, value)
	fail(vm, stack, hostcalls.StatusOK)
}

// proxyRemoveHeaderMapValue is proxy_remove_header_map_value(map_type,
// key_ptr, key_len) → status.
//
// Removes every value of the key (absent: still OK). BAD_ARGUMENT: the map
// is not available or frozen; INVALID_MEMORY_ACCESS.
//
//	key_ptr
//	[ k e y ]
func proxyRemoveHeaderMapValue(vm *VM, mod api.Module, stack []uint64) {
	t, key, okm := headerKey(vm, mod, stack, hostcalls.ProxyRemoveHeaderMapValue)
	if !okm {
		return
	}
	m, mutable, ok := vm.headerMap(t)
	if !ok || !mutable {
		fail(vm, stack, hostcalls.StatusBadArgument)
		return
	}
	*m = removeHeader(*m, key)
	fail(vm, stack, hostcalls.StatusOK)
}
