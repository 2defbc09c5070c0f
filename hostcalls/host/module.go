package host

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// compilationCache is shared by every Module of the process so that tests
// and benchmarks compiling the same bytes pay the compilation once.
var compilationCache = wazero.NewCompilationCache()

// Module is a compiled proxy-wasm module: one wazero Runtime holding the
// host modules (env, wasi_snapshot_preview1, wasi_unstable) and the
// CompiledModule from which Start instantiates VMs. It is safe for
// concurrent use; Close releases everything, including Hosts not closed.
type Module struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	imports  []api.FunctionDefinition
	exports  map[string]api.FunctionDefinition

	mu    sync.Mutex
	hosts []*Host
}

// Compile compiles wasm once. It fails if the module does not announce a
// proxy-wasm ABI version (proxy_abi_version_0_2_1, _0_2_0 or _0_1_0) or
// exports neither malloc nor proxy_on_memory_allocate, as cpp-host does.
// Cost: the compilation (seconds for a Go module) unless cached.
func Compile(ctx context.Context, wasm []byte) (*Module, error) {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(compilationCache))
	m := &Module{rt: rt}
	if err := m.instantiateHostModules(ctx); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("host: compile: %w", err)
	}
	m.compiled = compiled
	m.imports = compiled.ImportedFunctions()
	m.exports = compiled.ExportedFunctions()
	abi := false
	for name := range m.exports {
		if strings.HasPrefix(name, "proxy_abi_version_") {
			abi = true
		}
	}
	if !abi {
		rt.Close(ctx)
		return nil, fmt.Errorf("host: compile: missing or unknown Proxy-Wasm ABI version")
	}
	if m.exports[hostcalls.ExportMalloc] == nil && m.exports[hostcalls.ExportMemoryAllocate] == nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("host: compile: the module exports neither malloc nor proxy_on_memory_allocate")
	}
	return m, nil
}

// Close closes every Host started from m and the runtime.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	hosts := m.hosts
	m.hosts = nil
	m.mu.Unlock()
	for _, h := range hosts {
		h.Close(ctx)
	}
	return m.rt.Close(ctx)
}

// checkImports reports an import the emulated Envoy does not provide, as
// Envoy does when loading ("Failed to load Wasm module due to a missing
// import"): env imports must be in envFunctions, WASI imports in the set
// of wasiFunctions that profile p provides (wasiProvides). The message is
// cpp-host's (src/v8/v8.cc, src/wamr/wamr.cc, src/wasmtime/wasmtime.cc:
// "Failed to load Wasm module due to a missing import: " + module + "." +
// name, at f199214, c4d7bb0 and 94091cd).
func (m *Module) checkImports(p Profile) error {
	for _, d := range m.imports {
		mod, name, _ := d.Import()
		switch mod {
		case hostcalls.HostModule:
			if _, ok := lookup(envFunctions[:], name); !ok {
				return fmt.Errorf("host: Failed to load Wasm module due to a missing import: %s.%s", mod, name)
			}
		case wasiModule, wasiUnstable:
			if !wasiProvides(p, name) {
				return fmt.Errorf("host: Failed to load Wasm module due to a missing import: %s.%s (profile %s, %s)", mod, name, p, p.Envoy())
			}
		default:
			return fmt.Errorf("host: Failed to load Wasm module due to a missing import: %s.%s", mod, name)
		}
	}
	return nil
}

// instantiateHostModules instantiates the host modules of the runtime:
// env with envFunctions, and wasi_snapshot_preview1 and wasi_unstable
// each with every function of wasiFunctions (which of them a Host
// accepts is checked per Host, by checkImports).
func (m *Module) instantiateHostModules(ctx context.Context) error {
	if err := m.instantiate(ctx, hostcalls.HostModule, envFunctions[:]); err != nil {
		return err
	}
	for _, modName := range []string{wasiModule, wasiUnstable} {
		if err := m.instantiate(ctx, modName, wasiFunctions[:]); err != nil {
			return err
		}
	}
	return nil
}

// instantiate instantiates the host module modName exporting fns.
func (m *Module) instantiate(ctx context.Context, modName string, fns []hostFunction) error {
	b := m.rt.NewHostModuleBuilder(modName)
	for _, f := range fns {
		b.NewFunctionBuilder().WithGoModuleFunction(wrap(f), f.params, f.results).Export(f.name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("host: %s module: %w", modName, err)
	}
	return nil
}

type vmKey struct{}

// vmContext is the context of every call into a VM (VM.ctx): a host
// function finds its VM with a type assertion on it, cheaper than
// ctx.Value. Value(vmKey{}) answers the VM too, for a context that wazero
// would wrap.
type vmContext struct {
	context.Context
	vm *VM
}

// Value returns the VM for vmKey{}, else the parent's value.
func (c *vmContext) Value(key any) any {
	if _, ok := key.(vmKey); ok {
		return c.vm
	}
	return c.Context.Value(key)
}

// wrap turns a hostFunction into a wazero function: it finds the calling
// VM and enforces cpp-host's restricted callbacks (during allocation and
// start), then calls f.fn. The closure holds only the name and the
// function, so a call costs what a call of f.fn costs plus these checks.
func wrap(f hostFunction) api.GoModuleFunc {
	name, fn := f.name, f.fn
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		var vm *VM
		if c, ok := ctx.(*vmContext); ok {
			vm = c.vm
		} else {
			vm, _ = ctx.Value(vmKey{}).(*VM)
		}
		if vm == nil {
			panic(fmt.Errorf("host: %s called outside a VM call", name))
		}
		if vm.inAlloc || vm.inStart {
			vm.checkRestricted(name)
		}
		fn(vm, mod, stack)
	}
}
