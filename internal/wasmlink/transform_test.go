package wasmlink_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/internal/wasmlink"
)

// Types of the hand-assembled modules.
const (
	tRet    = 0 // () -> i32
	tTwo    = 1 // (i32, i32) -> i32
	tFour   = 2 // (i32, i32, i32, i32) -> i32
	tArg    = 3 // (i32) -> ()
	tArgRet = 4 // (i32) -> i32
	tNone   = 5 // () -> ()
)

func types() []byte {
	return sec(1, vec(
		functype(nil, []byte{tI32}),
		functype([]byte{tI32, tI32}, []byte{tI32}),
		functype([]byte{tI32, tI32, tI32, tI32}, []byte{tI32}),
		functype([]byte{tI32}, nil),
		functype([]byte{tI32}, []byte{tI32}),
		functype(nil, nil),
	))
}

const wasi = "wasi_snapshot_preview1"

// callsModule imports three WASI functions the step replaces between
// functions it keeps (the first import is replaced, the last kept), calls
// them directly, through element segments of three encodings, through
// ref.func and table.set, exports a replaced and a kept import, has an
// imported start function and names every function.
//
//	f0 wasi.sched_yield   -> 4      f7  yield      f13 ind_last
//	f1 env.note           -> 0      f8  setflags   f14 ind_flags
//	f2 wasi.fd_fdstat_set_flags -> 5 f9 poll       f15 ref_note
//	f3 wasi.fd_write      -> 1      f10 notes      f16 ind_poll
//	f4 wasi.poll_oneoff   -> 6      f11 write      f17 blocks
//	f5 env.last           -> 2      f12 ind_yield
//	f6 env.started        -> 3
func callsModule() []byte {
	imports := sec(2, vec(
		funcImport(wasi, "sched_yield", tRet),
		funcImport("env", "note", tArg),
		funcImport(wasi, "fd_fdstat_set_flags", tTwo),
		funcImport(wasi, "fd_write", tFour),
		funcImport(wasi, "poll_oneoff", tFour),
		funcImport("env", "last", tArg),
		funcImport("env", "started", tNone),
	))
	defined := []struct {
		name string
		typ  uint32
		code []byte
	}{
		{"yield", tRet, cat(call(0), end)},
		{"setflags", tRet, cat(i32const(1), i32const(4), call(2), end)},
		{"poll", tArgRet, cat(i32const(0), i32const(0), i32const(1), localGet(0), callPadded(4), end)},
		{"notes", tNone, cat(i32const(7), call(1), i32const(9), callPadded(5), end)},
		{"write", tRet, cat(i32const(1), i32const(0), i32const(0), i32const(60), call(3), end)},
		{"ind_yield", tRet, cat(i32const(1), callIndirect(tRet), end)},
		{"ind_last", tNone, cat(i32const(5), i32const(0), callIndirect(tArg), end)},
		{"ind_flags", tRet, cat(i32const(0), i32const(0), i32const(4), callIndirect(tTwo), end)},
		{"ref_note", tNone, cat(i32const(3), []byte{0xd2}, u32(1), []byte{0x26, 0}, i32const(42), i32const(3), callIndirect(tArg), end)},
		{"ind_poll", tArgRet, cat(i32const(0), i32const(0), i32const(1), localGet(0), i32const(6), callIndirect(tFour), end)},
		{"blocks", tRet, cat(
			[]byte{0x02, 0x40, 0x02, 0x40, 0x41, 0x01, 0x0e, 0x01, 0x00, 0x01, 0x0b, 0x0b}, // block block i32.const 1 br_table 0 1 end end
			[]byte{0x43, 0x00, 0x00, 0xc0, 0x3f, 0xfc, 0x00, 0xc0, 0x1a},                   // f32.const 1.5 i32.trunc_sat_f32_s i32.extend8_s drop
			[]byte{0x42, 0x80, 0x80, 0x80, 0x80, 0x10, 0x1a},                               // i64.const 2^32 drop
			[]byte{0x41, 0xe4, 0x00, 0x41, 0x00, 0x41, 0x04, 0xfc, 0x0b, 0x00},             // memory.fill 100, 0, 4
			[]byte{0x41, 0x00, 0x28, 0x02, 0x00, 0x1a},                                     // i32.load drop
			callPadded(7), []byte{0x1a}, // call yield (a defined function) drop
			[]byte{0x02, 0x7f, 0x41, 0x01, 0x04, 0x7f}, call(0), []byte{0x05, 0x41, 0x09, 0x0b, 0x0b}, // block (i32) if (i32) call sched_yield else 9 end end
			end)},
	}
	var funcs, bodies, exports [][]byte
	names := map[uint32]string{0: "sched_yield", 1: "note", 2: "fd_fdstat_set_flags", 3: "fd_write", 4: "poll_oneoff", 5: "last", 6: "started"}
	order := []uint32{0, 1, 2, 3, 4, 5, 6}
	exports = append(exports, export("memory", 2, 0), export("note", 0, 1), export("sy", 0, 0))
	for i, d := range defined {
		idx := uint32(7 + i)
		funcs = append(funcs, u32(d.typ))
		bodies = append(bodies, body(d.code))
		exports = append(exports, export(d.name, 0, idx))
		names[idx] = d.name
		order = append(order, idx)
	}
	elems := sec(9, vec(
		cat(u32(0), i32const(0), end, vec(u32(5), u32(0), u32(12), u32(4))),                                                                // active, table 0, indices
		cat(u32(4), i32const(4), end, vec(cat([]byte{0xd2}, u32(2), end), cat([]byte{0xd2}, u32(1), end), cat([]byte{0xd2}, u32(4), end))), // active, expressions
		cat(u32(3), []byte{0}, vec(u32(6))),         // declarative
		cat(u32(1), []byte{0}, vec(u32(2), u32(5))), // passive
	))
	localNames := vec(cat(u32(9), vec(cat(u32(0), str("ptr")))))
	return wasmModule(
		types(), imports,
		sec(3, vec(funcs...)),
		sec(4, vec([]byte{0x70, 0x00, 0x08})), // table funcref min 8
		sec(5, vec([]byte{0x00, 0x01})),       // memory min 1 page
		sec(7, vec(exports...)),
		sec(8, u32(6)), // start: env.started
		elems,
		sec(10, vec(bodies...)),
		custom("name", []byte{1}, u32(uint32(len(nameMap(names, order)))), nameMap(names, order),
			[]byte{2}, u32(uint32(len(localNames))), localNames),
	)
}

// lastModule replaces only its last import and keeps the one before.
func lastModule() []byte {
	return wasmModule(
		types(),
		sec(2, vec(funcImport("env", "note", tArg), funcImport(wasi, "sched_yield", tRet))),
		sec(3, vec(u32(tRet))),
		sec(5, vec([]byte{0x00, 0x01})),
		sec(7, vec(export("run", 0, 2))),
		sec(10, vec(body(cat(i32const(8), call(0), call(1), end)))),
	)
}

// fdstatModule imports fd_fdstat_get, which every host exports and the
// step replaces all the same, and exports stat(fd, ptr) calling it.
func fdstatModule() []byte {
	return wasmModule(
		types(),
		sec(2, vec(funcImport(wasi, "fd_fdstat_get", tTwo))),
		sec(3, vec(u32(tTwo))),
		sec(5, vec([]byte{0x00, 0x01})),
		sec(7, vec(export("memory", 2, 0), export("stat", 0, 1))),
		sec(10, vec(body(cat(localGet(0), localGet(1), call(0), end)))),
	)
}

// keptModule imports only functions every host exports.
func keptModule() []byte {
	return wasmModule(
		types(),
		sec(2, vec(funcImport(wasi, "fd_write", tFour), funcImport("env", "note", tArg))),
		sec(3, vec(u32(tNone))),
		sec(7, vec(export("run", 0, 2))),
		sec(10, vec(body(cat(i32const(8), call(1), end)))),
	)
}

// recorder is a host with env.note, env.last, env.started and only the
// WASI function of the test modules that every proxy-wasm host exports
// (fd_write, answering 77): a module that still imports sched_yield,
// fd_fdstat_set_flags or poll_oneoff does not instantiate on it.
type recorder struct{ calls []string }

func (rec *recorder) instantiate(t *testing.T, wasm []byte) (api.Module, error) {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	env := r.NewHostModuleBuilder("env")
	for _, name := range []string{"note", "last"} {
		env.NewFunctionBuilder().WithFunc(func(v uint32) { rec.calls = append(rec.calls, fmt.Sprintf("%s %d", name, v)) }).Export(name)
	}
	env.NewFunctionBuilder().WithFunc(func() { rec.calls = append(rec.calls, "started") }).Export("started")
	if _, err := env.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	w := r.NewHostModuleBuilder(wasi)
	w.NewFunctionBuilder().WithFunc(func(fd, iovs, n, nwritten uint32) uint32 {
		rec.calls = append(rec.calls, fmt.Sprintf("fd_write %d", fd))
		return 77
	}).Export("fd_write")
	if _, err := w.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	return r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig())
}

func callExport(t *testing.T, m api.Module, name string, args ...uint64) []uint64 {
	t.Helper()
	f := m.ExportedFunction(name)
	if f == nil {
		t.Fatalf("export %s missing", name)
	}
	res, err := f.Call(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// imports compiles wasm (the interpreter's compile validates as the
// compiler's does, faster) and returns its function imports in order.
func imports(t *testing.T, wasm []byte) []string {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("CompileModule: %v", err)
	}
	var out []string
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		out = append(out, mod+"."+name)
	}
	return out
}

func mustTransform(t *testing.T, wasm []byte) []byte {
	t.Helper()
	out, err := wasmlink.Transform(wasm)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	return out
}

func TestTransform(t *testing.T) {
	for _, tc := range []struct {
		name        string
		wasm        []byte
		wantImports []string
		check       func(t *testing.T, m api.Module, rec *recorder)
	}{
		{
			name:        "calls, tables, start and names",
			wasm:        callsModule(),
			wantImports: []string{"env.note", wasi + ".fd_write", "env.last", "env.started"},
			check: func(t *testing.T, m api.Module, rec *recorder) {
				mem := m.Memory()
				for _, c := range []struct {
					fn   string
					args []uint64
					want uint64
				}{
					{"yield", nil, 0}, {"sy", nil, 0}, {"setflags", nil, 52}, {"write", nil, 77},
					{"ind_yield", nil, 0}, {"ind_flags", nil, 52}, {"blocks", nil, 0},
				} {
					if got := callExport(t, m, c.fn, c.args...); got[0] != c.want {
						t.Errorf("%s() = %d, want %d", c.fn, got[0], c.want)
					}
				}
				// poll_oneoff: nevents = 0 and success inside memory,
				// EFAULT and nothing written across its end.
				for _, c := range []struct {
					fn        string
					ptr       uint32
					want      uint64
					wantBytes []byte
				}{
					{"poll", 300, 0, []byte{0, 0, 0, 0}},
					{"ind_poll", 400, 0, []byte{0, 0, 0, 0}},
					{"poll", 65532, 0, []byte{0, 0, 0, 0}},
					{"poll", 65533, 21, []byte{0xff, 0xff, 0xff}},
				} {
					mem.Write(c.ptr, bytes.Repeat([]byte{0xff}, len(c.wantBytes)))
					if got := callExport(t, m, c.fn, uint64(c.ptr)); got[0] != c.want {
						t.Errorf("%s(nevents=%d) = %d, want %d", c.fn, c.ptr, got[0], c.want)
					}
					if got, _ := mem.Read(c.ptr, uint32(len(c.wantBytes))); !bytes.Equal(got, c.wantBytes) {
						t.Errorf("%s(nevents=%d): memory % x, want % x", c.fn, c.ptr, got, c.wantBytes)
					}
				}
				callExport(t, m, "notes")
				callExport(t, m, "ind_last")
				callExport(t, m, "ref_note")
				callExport(t, m, "note", 3)
				want := []string{"started", "fd_write 1", "note 7", "last 9", "last 5", "note 42", "note 3"}
				if !slices.Equal(rec.calls, want) {
					t.Errorf("host calls %q, want %q", rec.calls, want)
				}
				// The name section moved with the functions.
				for export, name := range map[string]string{"sy": "sched_yield", "note": "note", "yield": "yield", "blocks": "blocks"} {
					if got := m.ExportedFunction(export).Definition().Name(); got != name {
						t.Errorf("export %s is named %q, want %q", export, got, name)
					}
				}
			},
		},
		{
			name:        "last import replaced",
			wasm:        lastModule(),
			wantImports: []string{"env.note"},
			check: func(t *testing.T, m api.Module, rec *recorder) {
				if got := callExport(t, m, "run"); got[0] != 0 {
					t.Errorf("run() = %d, want sched_yield's 0", got[0])
				}
				if !slices.Equal(rec.calls, []string{"note 8"}) {
					t.Errorf("host calls %q, want [note 8]", rec.calls)
				}
			},
		},
		{
			name:        "fd_fdstat_get",
			wasm:        fdstatModule(),
			wantImports: nil,
			check: func(t *testing.T, m api.Module, rec *recorder) {
				mem := m.Memory()
				stat := cat([]byte{0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 8))
				untouched := bytes.Repeat([]byte{0xff}, 24)
				for _, c := range []struct {
					fd, ptr uint32
					want    uint64
					mem     []byte
				}{
					{1, 100, 0, stat},
					{2, 200, 0, stat},
					{0, 300, 8, untouched},
					{3, 400, 8, untouched},
					{1, 65536 - 24, 0, stat},
				} {
					mem.Write(c.ptr, untouched)
					if got := callExport(t, m, "stat", uint64(c.fd), uint64(c.ptr)); got[0] != c.want {
						t.Errorf("stat(fd=%d, %d) = %d, want %d", c.fd, c.ptr, got[0], c.want)
					}
					if got, _ := mem.Read(c.ptr, 24); !bytes.Equal(got, c.mem) {
						t.Errorf("stat(fd=%d, %d): memory % x, want % x", c.fd, c.ptr, got, c.mem)
					}
				}
				// Across the end of memory: nothing written, and 0 as
				// cpp-host answers (it ignores setMemory's failure).
				mem.Write(65536-23, untouched[:23])
				if got := callExport(t, m, "stat", 1, 65536-23); got[0] != 0 {
					t.Errorf("stat(fd=1, end-23) = %d, want 0", got[0])
				}
				if got, _ := mem.Read(65536-23, 23); !bytes.Equal(got, untouched[:23]) {
					t.Errorf("stat(fd=1, end-23): memory % x, want it untouched", got)
				}
				if len(rec.calls) != 0 {
					t.Errorf("host calls %q, want none", rec.calls)
				}
			},
		},
		{
			name:        "nothing to replace",
			wasm:        keptModule(),
			wantImports: []string{wasi + ".fd_write", "env.note"},
			check: func(t *testing.T, m api.Module, rec *recorder) {
				callExport(t, m, "run")
				if !slices.Equal(rec.calls, []string{"note 8"}) {
					t.Errorf("host calls %q, want [note 8]", rec.calls)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := mustTransform(t, tc.wasm)
			if got := imports(t, out); !slices.Equal(got, tc.wantImports) {
				t.Errorf("imports %q, want %q", got, tc.wantImports)
			}
			if again := mustTransform(t, tc.wasm); !bytes.Equal(again, out) {
				t.Error("two transforms of the same module differ")
			}
			if twice := mustTransform(t, out); !bytes.Equal(twice, out) {
				t.Error("the transformed module changes when transformed again")
			}
			sameExports(t, tc.wasm, out)
			rawRec := &recorder{}
			_, rawErr := rawRec.instantiate(t, tc.wasm)
			replaced := len(imports(t, tc.wasm)) != len(tc.wantImports)
			if replaced != (rawErr != nil) {
				t.Errorf("untransformed module instantiates on a host without the replaced functions: err = %v, want an error: %v", rawErr, replaced)
			}
			rec := &recorder{}
			m, err := rec.instantiate(t, out)
			if err != nil {
				t.Fatalf("instantiate the transformed module: %v", err)
			}
			tc.check(t, m, rec)
		})
	}
}

// sameExports: both modules compile with wazero.NewRuntime's defaults
// (validation included); every export keeps its name and kind, a defined
// function keeps its index and type, an exported import its import.
func sameExports(t *testing.T, before, after []byte) {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	compile := func(b []byte) wazero.CompiledModule {
		cm, err := r.CompileModule(ctx, b)
		if err != nil {
			t.Fatalf("CompileModule: %v", err)
		}
		return cm
	}
	b, a := compile(before), compile(after)
	bf, af := b.ExportedFunctions(), a.ExportedFunctions()
	if len(bf) != len(af) {
		t.Errorf("%d function exports, want %d", len(af), len(bf))
	}
	bImports, aImports := len(b.ImportedFunctions()), len(a.ImportedFunctions())
	for name, bd := range bf {
		ad, ok := af[name]
		if !ok {
			t.Errorf("export %s lost", name)
			continue
		}
		if !slices.Equal(ad.ParamTypes(), bd.ParamTypes()) || !slices.Equal(ad.ResultTypes(), bd.ResultTypes()) {
			t.Errorf("export %s changed type", name)
		}
		if int(bd.Index()) >= bImports && ad.Index() != bd.Index() {
			t.Errorf("export %s: defined function %d moved to %d", name, bd.Index(), ad.Index())
		}
		bm, bn, bimp := bd.Import()
		am, an, aimp := ad.Import()
		if aimp && (!bimp || am != bm || an != bn) {
			t.Errorf("export %s: import %s.%s, was %s.%s", name, am, an, bm, bn)
		}
		if bimp && !aimp && (int(ad.Index()) < aImports || int(ad.Index()) >= bImports) {
			t.Errorf("export %s: the replacement of %s.%s is function %d, not among the first defined", name, bm, bn, ad.Index())
		}
	}
	if !slices.Equal(keys(b.ExportedMemories()), keys(a.ExportedMemories())) {
		t.Errorf("memory exports %v, want %v", keys(a.ExportedMemories()), keys(b.ExportedMemories()))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestTransformRewritesOnlyImportIndices: a padded call to an import is
// written back as a canonical LEB128 of its new index; a padded call to a
// defined function is left as it was.
func TestTransformRewritesOnlyImportIndices(t *testing.T) {
	in := callsModule()
	out := mustTransform(t, in)
	// notes: i32.const 7, call note (1 -> 0), i32.const 9, call last (padded 5 -> 2).
	if want := cat(i32const(7), call(0), i32const(9), call(2), end); !bytes.Contains(out, want) {
		t.Errorf("notes' body % x not found in the output", want)
	}
	if want := cat(callPadded(7), []byte{0x1a}); !bytes.Contains(out, want) || !bytes.Contains(in, want) {
		t.Errorf("the padded call to defined function 7 (% x) is not kept", want)
	}
}

func TestTransformErrors(t *testing.T) {
	withImport := func(name string, typ uint32) []byte {
		return wasmModule(types(), sec(2, vec(funcImport(wasi, name, typ))), sec(5, vec([]byte{0x00, 0x01})))
	}
	withBody := func(code []byte) []byte {
		return wasmModule(types(), sec(2, vec(funcImport(wasi, "sched_yield", tRet))), sec(3, vec(u32(tNone))),
			sec(5, vec([]byte{0x00, 0x01})), sec(10, vec(body(code))))
	}
	calls := callsModule()
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"not wasm", []byte("\x00asm\x02\x00\x00\x00"), "not a Wasm binary"},
		{"truncated", calls[:len(calls)/2], "unexpected end of input"},
		{"WASI import without a replacement", withImport("sock_accept", tTwo), "sock_accept"},
		{"replaced import of another type", withImport("poll_oneoff", tRet), "has type"},
		{"no memory", wasmModule(types(), sec(2, vec(funcImport(wasi, "sched_yield", tRet)))), "32-bit memory 0"},
		{"64-bit memory", wasmModule(types(), sec(2, vec(funcImport(wasi, "sched_yield", tRet))), sec(5, vec([]byte{0x04, 0x01}))), "32-bit memory 0"},
		{"SIMD instruction", withBody(cat([]byte{0xfd, 0x0c}, make([]byte, 16), []byte{0x1a}, end)), "unknown opcode 0xfd"},
		{"unknown 0xfc instruction", withBody(cat([]byte{0xfc, 0x12, 0x00}, end)), "unknown instruction 0xfc 18"},
		{"call of a missing function", withBody(cat(call(9), end)), "function 9 does not exist"},
		{"bytes after the body's end", withBody(cat(end, []byte{0x01})), "before its last byte"},
		{"body without its end", withBody([]byte{0x01}), "unexpected end of input"},
		{"debug section", append(withBody(end), custom(".debug_info", []byte{0})...), ".debug_info"},
		{"sections out of order", wasmModule(sec(3, vec()), types()), "out of order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := wasmlink.Transform(tc.wasm)
			if err == nil {
				t.Fatalf("Transform succeeded (%d bytes), want an error with %q", len(out), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "wasmlink: ") {
				t.Errorf("error %q, want one with %q", err, tc.want)
			}
		})
	}
}

// FuzzTransform: on any input Transform returns an error or a module, never
// panics; a module it returns is a fixed point of the step.
func FuzzTransform(f *testing.F) {
	f.Add(callsModule())
	f.Add(lastModule())
	f.Add(keptModule())
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, err := wasmlink.Transform(wasm)
		if err != nil {
			return
		}
		again, err := wasmlink.Transform(out)
		if err != nil {
			t.Fatalf("Transform of its own output: %v", err)
		}
		if !bytes.Equal(again, out) {
			t.Fatal("Transform of its own output changed it")
		}
	})
}
