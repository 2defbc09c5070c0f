package host

import (
	"bytes"
	"context"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// A tiny WebAssembly assembler for memory-level tests: a module that
// imports some host functions, re-exports each as "call_<name>" (so a test
// can call it with chosen pointers), exports its memory, the ABI version
// and a bump "malloc" starting at heapBase (optionally calling one import
// first, to test the restricted callbacks).

const heapBase = 1024

type asmImport struct {
	module, name    string
	params, results []api.ValueType
}

func uleb(n uint64) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if n == 0 {
			return b
		}
	}
}

func sleb(n int64) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if (n == 0 && c&0x40 == 0) || (n == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func vec(items ...[]byte) []byte {
	out := uleb(uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func name(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

func functype(params, results []api.ValueType) []byte {
	b := []byte{0x60}
	b = append(b, vec(bytesOf(params)...)...)
	return append(b, vec(bytesOf(results)...)...)
}

func bytesOf(ts []api.ValueType) [][]byte {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		out[i] = []byte{t}
	}
	return out
}

// assemble builds the module; mallocCalls ≥ 0 makes malloc call that
// import (with zero arguments) before allocating.
func assemble(imports []asmImport, mallocCalls int) []byte {
	return assembleInit(imports, mallocCalls, -1)
}

// zeroArgs returns the instructions that push a zero for each parameter.
func zeroArgs(params []api.ValueType) []byte {
	var b []byte
	for _, p := range params {
		if p == api.ValueTypeI64 {
			b = append(b, 0x42, 0x00)
		} else {
			b = append(b, 0x41, 0x00)
		}
	}
	return b
}

// assembleInit is assemble with, for initCalls ≥ 0, an _initialize export
// that calls that import (with zero arguments).
func assembleInit(imports []asmImport, mallocCalls, initCalls int) []byte {
	var types, imps, funcs, exports, codes [][]byte
	for i, im := range imports {
		types = append(types, functype(im.params, im.results))
		imps = append(imps, append(append(name(im.module), name(im.name)...), append([]byte{0x00}, uleb(uint64(i))...)...))
	}
	n := len(imports)
	addFunc := func(exportName string, params, results []api.ValueType, body []byte) {
		types = append(types, functype(params, results))
		funcs = append(funcs, uleb(uint64(len(types)-1)))
		exports = append(exports, append(name(exportName), append([]byte{0x00}, uleb(uint64(n+len(funcs)-1))...)...))
		code := append([]byte{0x00}, append(body, 0x0b)...) // no locals
		codes = append(codes, append(uleb(uint64(len(code))), code...))
	}
	addFunc("proxy_abi_version_0_2_1", nil, nil, nil)
	var malloc []byte
	if mallocCalls >= 0 {
		im := imports[mallocCalls]
		for _, p := range im.params {
			if p == api.ValueTypeI64 {
				malloc = append(malloc, 0x42, 0x00)
			} else {
				malloc = append(malloc, 0x41, 0x00)
			}
		}
		malloc = append(malloc, 0x10)
		malloc = append(malloc, uleb(uint64(mallocCalls))...)
		for range im.results {
			malloc = append(malloc, 0x1a)
		}
	}
	// global.get 0; global.get 0; local.get 0; i32.add; global.set 0
	malloc = append(malloc, 0x23, 0x00, 0x23, 0x00, 0x20, 0x00, 0x6a, 0x24, 0x00)
	addFunc("malloc", []api.ValueType{i32}, []api.ValueType{i32}, malloc)
	if initCalls >= 0 {
		im := imports[initCalls]
		body := append(zeroArgs(im.params), 0x10)
		body = append(body, uleb(uint64(initCalls))...)
		for range im.results {
			body = append(body, 0x1a)
		}
		addFunc("_initialize", nil, nil, body)
	}
	for i, im := range imports {
		var body []byte
		for j := range im.params {
			body = append(body, 0x20)
			body = append(body, uleb(uint64(j))...)
		}
		body = append(body, 0x10)
		body = append(body, uleb(uint64(i))...)
		addFunc("call_"+im.name, im.params, im.results, body)
	}
	exports = append(exports, append(name("memory"), 0x02, 0x00))
	var m bytes.Buffer
	m.Write([]byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00})
	m.Write(section(1, vec(types...)))
	m.Write(section(2, vec(imps...)))
	m.Write(section(3, vec(funcs...)))
	m.Write(section(5, vec([]byte{0x00, 0x01})))                                                // memory min 1 page
	m.Write(section(6, vec(append([]byte{0x7f, 0x01, 0x41}, append(sleb(heapBase), 0x0b)...)))) // mut i32 = heapBase
	m.Write(section(7, vec(exports...)))
	m.Write(section(10, vec(codes...)))
	return m.Bytes()
}

// envImport describes an env import by its registered signature.
func envImport(name string) asmImport {
	f, _ := lookup(envFunctions[:], name)
	return asmImport{"env", name, f.params, f.results}
}

func wasiImport(name string) asmImport {
	f, _ := lookup(wasiFunctions[:], name)
	return asmImport{wasiModule, name, f.params, f.results}
}

// asmHost starts a Host on an assembled module.
func asmHost(t *testing.T, imports []asmImport, mallocCalls int, opts Options) (*Host, api.Memory) {
	t.Helper()
	m, err := Compile(context.Background(), assemble(imports, mallocCalls))
	if err != nil {
		t.Fatalf("Compile(assembled) = %v", err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	if opts.VMID == "" {
		opts.VMID = uniqueVMID(t)
	}
	opts.Transcript = true
	h, err := m.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("Start(assembled) = %v", err)
	}
	h.ResetTranscript(0)
	return h, h.VMs()[0].mod.Memory()
}

// write puts b at offset off of the guest memory.
func write(t *testing.T, mem api.Memory, off uint32, b []byte) {
	t.Helper()
	if !mem.Write(off, b) {
		t.Fatalf("write at %d out of range", off)
	}
}

// mem returns n bytes at off.
func memAt(t *testing.T, mem api.Memory, off, n uint32) []byte {
	t.Helper()
	b, ok := mem.Read(off, n)
	if !ok {
		t.Fatalf("read at %d out of range", off)
	}
	return append([]byte(nil), b...)
}

// callIn calls a re-exported host function on VM 0 with stream s (or the
// root if nil) effective, and returns its status.
func callIn(t *testing.T, h *Host, s *Stream, fn string, args ...uint64) uint32 {
	t.Helper()
	vm := h.VMs()[0]
	vm.enter()
	vm.curID, vm.cur = rootContextID, nil
	if s != nil {
		vm.curID, vm.cur = s.id, s
	}
	res, err := vm.mod.ExportedFunction("call_"+fn).Call(vm.ctx, args...)
	vm.curID, vm.cur = rootContextID, nil
	vm.exit()
	if err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
	if len(res) == 0 {
		return 0
	}
	return uint32(res[0])
}
