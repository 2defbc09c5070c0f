package host

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// property answers a property path (segments joined by '.'), encoded as
// Envoy does: strings raw, integers 8-byte LE, maps in the pairs format.
// Modelled: plugin_name, plugin_root_id, plugin_vm_id; with an HTTP stream
// effective also request.{path,url_path,host,method,scheme,protocol,id,
// headers,headers.<name>}, response.{code,headers,headers.<name>},
// xds.cluster_name, xds.route_name, connection_id, upstream.address (once
// the front end has said it: Stream.SetUpstreamAddress); and filter state
// set with proxy_set_property (looked up as "wasm.<path>").
//
// upstream.address is, in Envoy, the address of the upstream host the
// router chose, as a string (Network::Address asString: "ip:port",
// "[v6]:port"), absent until a host is chosen
// (source/extensions/filters/common/expr/context.cc, UpstreamLookupValues
// Address, at 00ab8ce99a54be6eacf986b4095d40036823a301); a string property
// is handed to the guest raw (source/extensions/common/wasm/context.cc,
// serializeValue kString, at 031fa2b510f4215d0afc72cae5e46343175ad2bd).
func (vm *VM) property(path string) ([]byte, bool) {
	o := &vm.h.opts
	switch path {
	case "plugin_name":
		return []byte(o.PluginName), true
	case "plugin_root_id":
		return []byte(o.RootID), true
	case "plugin_vm_id":
		return []byte(o.VMID), true
	}
	s := vm.cur
	if s == nil {
		v, ok := vm.rootFS["wasm."+path]
		return v, ok
	}
	if v, ok := s.fs["wasm."+path]; ok {
		return v, true
	}
	first := func(m [][2]string, k string) ([]byte, bool) {
		for _, kv := range m {
			if kv[0] == k {
				return []byte(kv[1]), true
			}
		}
		return nil, false
	}
	req, resp := s.req.headers, s.resp.headers
	switch path {
	case "xds.cluster_name":
		return []byte(o.ClusterName), true
	case "xds.route_name":
		return []byte(o.RouteName), true
	case "connection_id":
		return u64(s.conn), true
	case "upstream.address":
		return []byte(s.upstream), s.upstream != ""
	case "request.path":
		return first(req, ":path")
	case "request.url_path":
		p, ok := first(req, ":path")
		if i := strings.IndexByte(string(p), '?'); i >= 0 {
			p = p[:i]
		}
		return p, ok
	case "request.host":
		return first(req, ":authority")
	case "request.method":
		return first(req, ":method")
	case "request.scheme":
		return first(req, ":scheme")
	case "request.protocol":
		return []byte("HTTP/1.1"), true
	case "request.id":
		return first(req, "x-request-id")
	case "request.headers":
		return hostcalls.EncodePairs(req), s.req.headersSeen
	case "response.headers":
		return hostcalls.EncodePairs(resp), s.resp.headersSeen
	case "response.code":
		c, ok := first(resp, ":status")
		if !ok {
			return nil, false
		}
		n, err := strconv.Atoi(string(c))
		return u64(uint64(n)), err == nil
	}
	if k, ok := strings.CutPrefix(path, "request.headers."); ok {
		return first(req, strings.ToLower(k))
	}
	if k, ok := strings.CutPrefix(path, "response.headers."); ok {
		return first(resp, strings.ToLower(k))
	}
	return nil, false
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, v)
	return b
}

// propertyPath turns the ABI's NUL-separated path into a dotted one.
func propertyPath(raw string) string {
	return strings.ReplaceAll(strings.TrimSuffix(raw, "\x00"), "\x00", ".")
}

// proxyGetProperty is proxy_get_property(path_ptr, path_len, ret_ptr_ptr,
// ret_size_ptr) → status.
//
// OK: the value is copied out (empty: ptr=0,size=0); NOT_FOUND: unknown
// or unavailable path; INVALID_MEMORY_ACCESS.
//
//	path_ptr                      ret_ptr_ptr   ret_size_ptr
//	[ r e q u e s t \0 p a t h ]  [ ptr u32le ] [ size u32le ]
//	                                 +--> [ value ]  (allocated by the guest)
func proxyGetProperty(vm *VM, mod api.Module, stack []uint64) {
	raw, ok := readString(mod, uint32(stack[0]), uint32(stack[1]))
	if !ok {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	path := propertyPath(raw)
	if vm.tracing {
		vm.trace("==> %s(path=%q)", hostcalls.ProxyGetProperty, path)
	}
	v, found := vm.property(path)
	if !found {
		fail(vm, stack, hostcalls.StatusNotFound)
		return
	}
	st := vm.copyOut(mod, v, uint32(stack[2]), uint32(stack[3]))
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "value=%s", quoteMax(v))
	}
}

// proxySetProperty is proxy_set_property(path_ptr, path_len, value_ptr,
// value_len) → status.
//
// Stores the value as filter state "wasm.<path>" of the effective stream
// (or of the root context), readable back with proxy_get_property(path)
// and from Go with Stream.FilterState. OK; INVALID_MEMORY_ACCESS.
//
//	path_ptr         value_ptr
//	[ p a t h ] ...  [ v a l u e ]
func proxySetProperty(vm *VM, mod api.Module, stack []uint64) {
	raw, ok1 := readString(mod, uint32(stack[0]), uint32(stack[1]))
	v, ok2 := read(mod, uint32(stack[2]), uint32(stack[3]))
	if !ok1 || !ok2 {
		fail(vm, stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	path := propertyPath(raw)
	if vm.tracing {
		vm.trace("==> %s(path=%q,value=%s)", hostcalls.ProxySetProperty, path, quoteMax(v))
	}
	if s := vm.cur; s != nil {
		if s.fs == nil {
			s.fs = map[string][]byte{}
		}
		s.fs["wasm."+path] = v
	} else {
		if vm.rootFS == nil {
			vm.rootFS = map[string][]byte{}
		}
		vm.rootFS["wasm."+path] = v
	}
	fail(vm, stack, hostcalls.StatusOK)
}
