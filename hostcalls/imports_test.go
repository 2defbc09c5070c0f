package hostcalls

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"maps"
	"slices"
	"strings"
	"testing"
)

// funcSigs parses file and returns its top-level functions' signatures as
// text, and for each the //go:wasmimport directive, if any.
func funcSigs(t *testing.T, file string) (sigs, directives map[string]string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	sigs, directives = map[string]string{}, map[string]string{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		var b strings.Builder
		printer.Fprint(&b, fset, fd.Type)
		sigs[fd.Name.Name] = b.String()
		if fd.Doc != nil {
			for _, c := range fd.Doc.List {
				if rest, ok := strings.CutPrefix(c.Text, "//go:wasmimport "); ok {
					directives[fd.Name.Name] = rest
				}
			}
		}
	}
	return sigs, directives
}

// TestImportStubsMatch checks that the native stand-ins have exactly the
// signatures of the wasmimports, and that every wasmimport names a host
// function of abi.go in module env.
func TestImportStubsMatch(t *testing.T) {
	wasm, directives := funcSigs(t, "imports_wasip1.go")
	native, _ := funcSigs(t, "imports_native.go")
	if got, want := slices.Sorted(maps.Keys(native)), slices.Sorted(maps.Keys(wasm)); !slices.Equal(got, want) {
		t.Fatalf("native stubs %v, want %v", got, want)
	}
	for name, sig := range wasm {
		if native[name] != sig {
			t.Errorf("%s: native %s, wasm %s", name, native[name], sig)
		}
	}
	abiNames := []string{
		ProxyLog, ProxyGetLogLevel, ProxySetTickPeriod, ProxyGetBufferBytes, ProxyGetBufferStatus,
		ProxySetBufferBytes, ProxyGetHeaderMapPairs, ProxySetHeaderMapPairs, ProxyGetHeaderMapSize,
		ProxyGetHeaderMapValue, ProxyAddHeaderMapValue, ProxyReplaceHeaderMapValue, ProxyRemoveHeaderMapValue,
		ProxyContinueStream, ProxyCloseStream, ProxySendLocalResponse, ProxyHTTPCall, ProxyGetStatus,
		ProxySetSharedData, ProxyGetSharedData, ProxyRegisterSharedQueue, ProxyResolveSharedQueue,
		ProxyEnqueueSharedQueue, ProxyDequeueSharedQueue, ProxyDefineMetric, ProxyIncrementMetric,
		ProxyRecordMetric, ProxyGetMetric, ProxyGetProperty, ProxySetProperty, ProxySetEffectiveContext, ProxyDone,
	}
	var imported []string
	for name := range wasm {
		mod, fn, ok := strings.Cut(directives[name], " ")
		if !ok || mod != HostModule {
			t.Errorf("%s: directive %q, want module %s", name, directives[name], HostModule)
		}
		imported = append(imported, fn)
	}
	slices.Sort(imported)
	slices.Sort(abiNames)
	if !slices.Equal(imported, abiNames) {
		t.Errorf("wasmimports %v,\nwant the host functions of abi.go %v", imported, abiNames)
	}
}
