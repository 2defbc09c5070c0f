package proxytestcompat

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// tiny is a valid module built in init: one type () -> (), one import
// env.proxy_get_status, one function exported as "_initialize" and "keep".
var tiny []byte

func init() {
	name := "proxy_get_status"
	imp := append([]byte{0x01, 0x03, 'e', 'n', 'v', byte(len(name))}, name...)
	imp = append(imp, 0x00, 0x00) // kind func, type 0
	exp := []byte{0x02}
	exp = append(exp, byte(len("_initialize")))
	exp = append(exp, "_initialize"...)
	exp = append(exp, 0x00, 0x01) // func index 1 (index 0 is the import)
	exp = append(exp, 0x04, 'k', 'e', 'e', 'p', 0x00, 0x01)
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	m = append(m, 0x01, 0x04, 0x01, 0x60, 0x00, 0x00) // types
	m = append(m, 0x02, byte(len(imp)))
	m = append(m, imp...)
	m = append(m, 0x03, 0x02, 0x01, 0x00) // functions: 1, type 0
	m = append(m, 0x07, byte(len(exp)))
	m = append(m, exp...)
	m = append(m, 0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b) // code: 1 body, size 2, no locals, end
	tiny = m
}

func exportNames(t *testing.T, wasm []byte) []string {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("CompileModule: %v", err)
	}
	var names []string
	for n := range cm.ExportedFunctions() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestRenameInitialize(t *testing.T) {
	if got := exportNames(t, tiny); !slices.Equal(got, []string{"_initialize", "keep"}) {
		t.Fatalf("tiny exports %v", got)
	}
	out, err := RenameInitialize(tiny)
	if err != nil {
		t.Fatal(err)
	}
	if got := exportNames(t, out); !slices.Equal(got, []string{"_start", "keep"}) {
		t.Errorf("renamed exports %v, want [_start keep]", got)
	}
	if len(out) != len(tiny)-len("_initialize")+len("_start") {
		t.Errorf("renamed module is %d bytes, want %d", len(out), len(tiny)-5)
	}
	if _, err := RenameInitialize(out); err == nil {
		t.Errorf("RenameInitialize of a module with _start and no _initialize succeeded")
	}
}

func TestRenameInitializeGoModule(t *testing.T) {
	wasm := wasmbuild.Module(t, "./hostcalls/internal/conformance/basic")
	out, err := RenameInitialize(wasm)
	if err != nil {
		t.Fatal(err)
	}
	names := exportNames(t, out)
	if !slices.Contains(names, "_start") || slices.Contains(names, "_initialize") {
		t.Errorf("exports %v: want _start and no _initialize", names)
	}
	if !bytes.Equal(wasm[:8], out[:8]) {
		t.Errorf("header changed")
	}
}

func TestMissingImports(t *testing.T) {
	got, err := MissingImports(tiny)
	if err != nil || !slices.Equal(got, []string{"proxy_get_status"}) {
		t.Errorf("MissingImports(tiny) = %v, %v; want [proxy_get_status]", got, err)
	}
	full := wasmbuild.Module(t, "./hostcalls/internal/conformance")
	want := []string{"proxy_get_buffer_status", "proxy_get_header_map_size", "proxy_get_log_level", "proxy_get_status"}
	if got, err := MissingImports(full); err != nil || !slices.Equal(got, want) {
		t.Errorf("MissingImports(conformance) = %v, %v; want %v", got, err, want)
	}
}

func TestMalformedModules(t *testing.T) {
	tests := map[string][]byte{
		"empty":            nil,
		"bad magic":        []byte("\x00asx\x01\x00\x00\x00"),
		"section overruns": append(slices.Clone(tiny[:8]), 0x07, 0x7f, 0x00),
		"bad LEB":          append(slices.Clone(tiny[:8]), 0x07, 0xff, 0xff, 0xff, 0xff, 0xff),
		"truncated export": append(slices.Clone(tiny[:8]), 0x07, 0x02, 0x01, 0x09),
	}
	for name, wasm := range tests {
		if _, err := RenameInitialize(wasm); err == nil {
			t.Errorf("%s: RenameInitialize succeeded", name)
		}
		if _, err := FunctionImports(wasm); err == nil && name != "truncated export" {
			t.Errorf("%s: FunctionImports succeeded", name)
		}
	}
}

func FuzzRenameInitialize(f *testing.F) {
	f.Add(tiny)
	f.Add(tiny[:20])
	f.Fuzz(func(t *testing.T, wasm []byte) {
		// Neither function may panic, and a renamed module must still split
		// into well-formed sections.
		if out, err := RenameInitialize(wasm); err == nil {
			if _, err := sections(out); err != nil {
				t.Errorf("renamed module does not parse: %v", err)
			}
		}
		FunctionImports(wasm)
	})
}
