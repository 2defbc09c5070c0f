// Package proxytestcompat lets the tetratelabs proxy-wasm-go-sdk v0.24.0
// emulator (proxytest.NewWasmVMContext) run a standard-Go wasip1 reactor.
//
// That emulator instantiates the module with wazero's default start
// function, "_start", while a Go c-shared module exports "_initialize"; a
// module whose runtime was never initialised fails every callback with
// "wasmexport function called before runtime initialization". RenameInitialize
// renames the export, which makes wazero run the Go runtime's initialisation
// at instantiation, as Envoy does. MissingImports lists the host functions a
// module imports that the emulator does not provide (wazero then refuses to
// instantiate it).
//
// Other differences from Envoy a test against that emulator must allow for:
//
//   - It keeps log messages, queue items, bodies written with
//     proxy_set_buffer_bytes, property values and local-response bodies as
//     references into guest memory, not copies (internal.RawBytePtrToString).
//     Once the guest's garbage collector frees and reuses that memory, what
//     GetInfoLogs, GetCurrentRequestBody etc. report changes. Read them right
//     after the callback, or keep the data alive in the guest (the
//     conformance module does).
//   - Shared data: cas 0 on an existing key is a mismatch and a key's cas is
//     the previous cas+1 (Envoy: cas 0 is unconditional; one global counter).
//   - Ids: metric and queue ids start at 0; context ids are process-wide.
//   - proxy_enqueue_shared_queue calls proxy_on_queue_ready from inside the
//     host call; proxy_on_vm_start gets root context id 0; proxy_on_done and
//     proxy_on_delete are never called for HTTP streams (only proxy_on_log).
//   - A zero-length header map (ptr=0, size=0) passed to the host panics in
//     its deserialiser; hostcalls sends an empty map as the 4-byte N=0 form.
package proxytestcompat

import (
	"errors"
	"fmt"
	"slices"
)

const (
	sectionImport = 2
	sectionExport = 7
)

// ProxytestHostFunctions are the "env" imports the v0.24.0 emulator
// provides (proxytest/wasmwrapper.go). Missing among the ABI v0.2.1 host
// functions: proxy_get_log_level, proxy_get_current_time_nanoseconds,
// proxy_get_buffer_status, proxy_get_header_map_size, proxy_get_status.
var ProxytestHostFunctions = []string{
	"proxy_add_header_map_value", "proxy_call_foreign_function", "proxy_close_stream",
	"proxy_continue_stream", "proxy_define_metric", "proxy_dequeue_shared_queue", "proxy_done",
	"proxy_enqueue_shared_queue", "proxy_get_buffer_bytes", "proxy_get_header_map_pairs",
	"proxy_get_header_map_value", "proxy_get_metric", "proxy_get_property", "proxy_get_shared_data",
	"proxy_http_call", "proxy_increment_metric", "proxy_log", "proxy_record_metric",
	"proxy_register_shared_queue", "proxy_remove_header_map_value", "proxy_replace_header_map_value",
	"proxy_resolve_shared_queue", "proxy_send_local_response", "proxy_set_buffer_bytes",
	"proxy_set_effective_context", "proxy_set_header_map_pairs", "proxy_set_property",
	"proxy_set_shared_data", "proxy_set_tick_period_milliseconds",
}

// ErrMalformed reports a module that is not a well-formed Wasm binary as far
// as the sections read here go.
var ErrMalformed = errors.New("proxytestcompat: malformed wasm module")

type section struct {
	id   byte
	body []byte
}

func sections(wasm []byte) ([]section, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || string(wasm[4:8]) != "\x01\x00\x00\x00" {
		return nil, fmt.Errorf("%w: bad header", ErrMalformed)
	}
	var out []section
	for rest := wasm[8:]; len(rest) > 0; {
		id := rest[0]
		size, n, err := readU32(rest[1:])
		if err != nil {
			return nil, err
		}
		start := 1 + n
		if uint64(start)+uint64(size) > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: section %d overruns the module", ErrMalformed, id)
		}
		out = append(out, section{id: id, body: rest[start : start+int(size)]})
		rest = rest[start+int(size):]
	}
	return out, nil
}

// readU32 decodes an unsigned LEB128 u32; n is the number of bytes read.
func readU32(b []byte) (v uint32, n int, err error) {
	var shift uint
	for n < len(b) && n < 5 {
		c := b[n]
		n++
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, n, nil
		}
		shift += 7
	}
	return 0, 0, fmt.Errorf("%w: bad LEB128", ErrMalformed)
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// reader walks a section body.
type reader struct {
	b   []byte
	err error
}

func (r *reader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	v, n, err := readU32(r.b)
	if err != nil {
		r.err = err
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) name() string {
	n := r.u32()
	if r.err != nil || uint64(n) > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated section", ErrMalformed)
	}
}

type export struct {
	name string
	kind byte
	idx  uint32
}

// RenameInitialize returns a copy of wasm in which the export "_initialize"
// is called "_start"; every other byte is unchanged apart from the export
// section's size. It fails if there is no "_initialize" export or there is
// already a "_start".
func RenameInitialize(wasm []byte) ([]byte, error) {
	secs, err := sections(wasm)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), wasm[:8]...)
	renamed := false
	for _, s := range secs {
		body := s.body
		if s.id == sectionExport {
			r := &reader{b: s.body}
			exports := make([]export, r.u32())
			for i := range exports {
				exports[i] = export{name: r.name(), kind: r.byte(), idx: r.u32()}
			}
			if r.err == nil && len(r.b) != 0 {
				r.err = fmt.Errorf("%w: trailing bytes in the export section", ErrMalformed)
			}
			if r.err != nil {
				return nil, r.err
			}
			if slices.ContainsFunc(exports, func(e export) bool { return e.name == "_start" }) {
				return nil, errors.New("proxytestcompat: module already exports _start")
			}
			body = appendU32(nil, uint32(len(exports)))
			for _, e := range exports {
				if e.name == "_initialize" {
					e.name, renamed = "_start", true
				}
				body = appendU32(body, uint32(len(e.name)))
				body = append(body, e.name...)
				body = append(body, e.kind)
				body = appendU32(body, e.idx)
			}
		}
		out = append(out, s.id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if !renamed {
		return nil, errors.New("proxytestcompat: module has no _initialize export")
	}
	return out, nil
}

// Import is one function import of a module.
type Import struct {
	Module, Name string
}

// FunctionImports lists the function imports of wasm in order.
func FunctionImports(wasm []byte) ([]Import, error) {
	secs, err := sections(wasm)
	if err != nil {
		return nil, err
	}
	var out []Import
	for _, s := range secs {
		if s.id != sectionImport {
			continue
		}
		r := &reader{b: s.body}
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			imp := Import{Module: r.name(), Name: r.name()}
			switch kind := r.byte(); kind {
			case 0x00: // func: type index
				r.u32()
				out = append(out, imp)
			case 0x01: // table: reftype, limits
				r.byte()
				r.limits()
			case 0x02: // memory: limits
				r.limits()
			case 0x03: // global: valtype, mutability
				r.byte()
				r.byte()
			case 0x04: // tag: attribute, type index
				r.byte()
				r.u32()
			default:
				r.err = fmt.Errorf("%w: import kind %d", ErrMalformed, kind)
			}
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	return out, nil
}

func (r *reader) limits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

// MissingImports returns the "env" function imports of wasm that the
// v0.24.0 emulator does not provide, sorted; empty means proxytest can
// instantiate the module.
func MissingImports(wasm []byte) ([]string, error) {
	imports, err := FunctionImports(wasm)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, imp := range imports {
		if imp.Module == "env" && !slices.Contains(ProxytestHostFunctions, imp.Name) {
			missing = append(missing, imp.Name)
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing), nil
}
