package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// Host is one plugin configuration running in N worker VMs instantiated
// from one Module, with a host-side store shared by all of them (shared
// data, queues, metrics, logs). It is safe for concurrent use.
type Host struct {
	m       *Module
	opts    Options
	store   *sharedStore
	metrics *metricStore
	virtual *VirtualClock

	mu      sync.RWMutex
	vms     []*VM
	retired []*VM
	closed  bool

	logMu   sync.Mutex
	logs    []LogEntry
	hostErr []error // HostErrors, under logMu

	stop  chan struct{}
	ticks sync.WaitGroup
	calls sync.WaitGroup
	// answered are the http_call answers kept for Wait (Options.
	// HTTPCallsOnWait), under answeredMu.
	answeredMu sync.Mutex
	answered   []heldAnswer
	serving    sync.WaitGroup // front-end requests in flight (EnterServe: Add under mu while !closed)
	rr         atomic.Uint32
	connID     atomic.Uint64
	token      atomic.Uint32
}

// LogEntry is one guest log line: proxy_log, or a line written to
// stdout (info) or stderr (error) through fd_write.
type LogEntry struct {
	Time    time.Time
	Level   hostcalls.LogLevel
	VM      int // CanaryVM for the canary
	Message string
}

// maxLogs bounds the kept log: beyond it the oldest half is dropped.
const maxLogs = 20000

// Start instantiates the canary VM (started, configured and discarded, as
// Envoy validates a configuration) and then opts.VMs worker VMs, each
// running _initialize, proxy_on_context_create(root, 0),
// proxy_on_vm_start(root, len(VMConfig)) and proxy_on_configure(root,
// len(PluginConfig)). It fails if an import is missing for the chosen
// Profile, if a call traps, or if on_vm_start or on_configure returns
// false. With a RealClock each worker VM gets a tick goroutine.
func (m *Module) Start(ctx context.Context, opts Options) (*Host, error) {
	opts.defaults()
	if err := m.checkImports(opts.Profile); err != nil {
		return nil, err
	}
	h := &Host{m: m, opts: opts, metrics: newMetricStore(), stop: make(chan struct{})}
	h.virtual, _ = opts.Clock.(*VirtualClock)
	h.store = acquireStore(opts.VMID)
	vms, err := h.startGeneration(ctx, opts.PluginConfig)
	if err != nil {
		releaseStore(h.store)
		return nil, err
	}
	h.vms = vms
	h.startTickers(vms)
	m.mu.Lock()
	m.hosts = append(m.hosts, h)
	m.mu.Unlock()
	return h, nil
}

// startGeneration starts a canary and then the worker VMs for cfg; on error
// every VM it made is closed.
func (h *Host) startGeneration(ctx context.Context, cfg []byte) ([]*VM, error) {
	canary, err := h.newVM(ctx, CanaryVM, cfg)
	if canary != nil {
		canary.closeInstance(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("host: canary VM: %w", err)
	}
	vms := make([]*VM, 0, h.opts.VMs)
	for i := 0; i < h.opts.VMs; i++ {
		vm, err := h.newVM(ctx, i, cfg)
		if err != nil {
			if vm != nil {
				vm.closeInstance(ctx)
			}
			for _, v := range vms {
				v.closeInstance(ctx)
			}
			return nil, fmt.Errorf("host: VM %d: %w", i, err)
		}
		vms = append(vms, vm)
	}
	return vms, nil
}

// newVM instantiates the module and runs its start-up sequence.
func (h *Host) newVM(ctx context.Context, index int, cfg []byte) (*VM, error) {
	vm := &VM{h: h, index: index, nextID: rootContextID + 1, streams: map[uint32]*Stream{},
		tracing: h.opts.Transcript, tickWake: make(chan struct{}, 1), curID: rootContextID}
	vm.ctx = &vmContext{Context: context.Background(), vm: vm}
	if h.opts.Seed != 0 {
		vm.rnd = &splitmix{x: h.opts.Seed*0x9e3779b97f4a7c15 + uint64(index+2)}
	}
	vm.enter()
	defer vm.exit()
	vm.inStart = true
	vm.trace("--> _initialize()")
	mod, err := h.m.rt.InstantiateModule(vm.ctx, h.m.compiled,
		wazero.NewModuleConfig().WithName("").WithStartFunctions(hostcalls.ExportInitialize))
	vm.inStart = false
	if err != nil {
		if vm.tracing {
			vm.trace("<-- trap: %v", err)
		}
		return nil, fmt.Errorf("_initialize: %w", err)
	}
	vm.trace("<--")
	vm.mod = mod
	for id, name := range callbackNames {
		if d := h.m.exports[name]; d != nil {
			vm.cbs[id] = export{fn: mod.ExportedFunction(name), hasResult: len(d.ResultTypes()) > 0}
		}
	}
	vm.alloc = mod.ExportedFunction(hostcalls.ExportMalloc)
	if vm.alloc == nil {
		vm.alloc = mod.ExportedFunction(hostcalls.ExportMemoryAllocate)
	}
	if _, err := vm.callback(cbContextCreate, 0, rootContextID, 0); err != nil {
		return vm, err
	}
	ok, err := vm.callback(cbVMStart, 1, rootContextID, uint64(len(h.opts.VMConfig)))
	if err != nil {
		return vm, err
	}
	if uint32(ok) == 0 {
		return vm, errors.New("proxy_on_vm_start returned false")
	}
	vm.inConfigure, vm.configuring = true, cfg
	ok, err = vm.callback(cbConfigure, 1, rootContextID, uint64(len(cfg)))
	vm.inConfigure, vm.configuring = false, nil
	if err != nil {
		return vm, err
	}
	if uint32(ok) == 0 {
		return vm, errors.New("proxy_on_configure returned false")
	}
	return vm, nil
}

// deleteRoot records that the root context is gone and stops its timer.
// Caller holds vm.mu.
func (vm *VM) deleteRoot() {
	vm.rootGone = true
	vm.tickPeriod = 0
	select {
	case vm.tickWake <- struct{}{}:
	default:
	}
}

// closeInstance closes the wazero instance without callbacks.
func (vm *VM) closeInstance(ctx context.Context) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if !vm.closed && vm.mod != nil {
		vm.closed = true
		vm.mod.Close(ctx)
	}
}

// retire ends a worker VM the way Envoy tears a plugin down. The VM takes
// no new streams; its root context keeps ticking and receiving queue
// notifications while streams are open on it (in Envoy every stream
// context holds the plugin handle, and releasing the last one is what
// calls on_done: cpp-host ~PluginHandleBase → WasmBase::startShutdown).
// Once none is left (at once if none is open, or now if force), on_done
// runs on the root context, then on_delete: at once if on_done returned
// true, else when the guest calls proxy_done (until then the root keeps
// its ticks). The instance is closed when the root is gone and the last
// stream has completed.
func (vm *VM) retire(force bool) {
	vm.enter()
	vm.retired = true
	closeNow := false
	if !vm.shutdown && (force || vm.active.Load() == 0) {
		closeNow = vm.shutdownRoot()
	}
	vm.exit()
	if closeNow {
		vm.closeInstance(context.Background())
	}
}

// shutdownRoot runs on_done on the root context and on_delete if it
// returned true, and reports whether the instance may be closed now (no
// stream open, root gone). Caller holds vm.mu.
func (vm *VM) shutdownRoot() bool {
	vm.shutdown = true
	vm.curID, vm.cur = rootContextID, nil
	done, err := vm.callback(cbDone, 1, rootContextID)
	switch {
	case err == nil && uint32(done) != 0:
		vm.callback(cbDelete, 0, rootContextID)
		vm.deleteRoot()
	case err == nil:
		vm.waitDone = true
	default:
		vm.deleteRoot()
	}
	return vm.active.Load() == 0 && vm.rootGone
}

// Reconfigure applies a new plugin configuration the way Envoy does: a
// canary and a new set of worker VMs are started with cfg; if any fails
// the old VMs stay and the error is returned. Otherwise the new VMs
// replace the old ones for new streams and the old ones are retired:
// streams already running finish on the old VMs, whose roots keep ticking
// until then, and then get on_done and on_delete (see VM.retire). Shared
// data is kept (same vm_id). Metrics are kept.
func (h *Host) Reconfigure(cfg []byte) error {
	h.mu.RLock()
	closed := h.closed
	h.mu.RUnlock()
	if closed {
		return errors.New("host: reconfigure: host closed")
	}
	vms, err := h.startGeneration(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("host: reconfigure: %w", err)
	}
	h.mu.Lock()
	old := h.vms
	h.vms = vms
	h.opts.PluginConfig = cfg
	h.retired = append(h.retired, old...)
	h.mu.Unlock()
	h.startTickers(vms)
	for _, vm := range old {
		vm.retire(false)
	}
	return nil
}

// Close first lets the front end's requests in flight finish (those
// between EnterServe and ExitServe: the proxy's), with ticks and
// http_calls still running (Envoy keeps a VM alive while streams use it),
// until ctx is done; the proxy answers new requests 503 meanwhile. Then
// it retires every VM (root on_done, on_delete), stops the tick
// goroutines, waits for outstanding http_calls, closes the instances
// (streams driven through Stream that are still open fail from then on)
// and releases the shared-data store (erased when the last Host with the
// same VMID closes, as Envoy erases it with the last VM of a vm_id).
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	served := make(chan struct{})
	go func() {
		h.serving.Wait()
		close(served)
	}()
	select {
	case <-served:
	case <-ctx.Done():
	}
	h.mu.RLock()
	vms := append(append([]*VM(nil), h.vms...), h.retired...)
	h.mu.RUnlock()
	close(h.stop)
	h.ticks.Wait()
	h.calls.Wait()
	for _, vm := range vms {
		vm.retire(true)
	}
	for _, vm := range vms {
		vm.closeInstance(ctx)
	}
	releaseStore(h.store)
	return nil
}

// isClosed reports whether Close was called.
func (h *Host) isClosed() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}

// VMs returns the current worker VMs (a copy of the slice), in index order.
func (h *Host) VMs() []*VM {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return append([]*VM(nil), h.vms...)
}

func (h *Host) vm(i int) *VM {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if i < 0 || i >= len(h.vms) {
		panic(fmt.Sprintf("host: no VM %d (have %d)", i, len(h.vms)))
	}
	return h.vms[i]
}

// Options returns the options the Host runs with (defaults applied).
func (h *Host) Options() Options {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.opts
}

// Now returns the host clock's time.
func (h *Host) Now() time.Time { return h.opts.Clock.Now() }

// addLog records a guest log line and forwards it to Options.Logger.
func (h *Host) addLog(level hostcalls.LogLevel, vm int, msg string) {
	e := LogEntry{Time: h.opts.Clock.Now(), Level: level, VM: vm, Message: msg}
	h.logMu.Lock()
	if len(h.logs) >= maxLogs {
		h.logs = append(h.logs[:0], h.logs[maxLogs/2:]...)
	}
	h.logs = append(h.logs, e)
	h.logMu.Unlock()
	if l := h.opts.Logger; l != nil {
		l.Log(context.Background(), slogLevel(level), msg, "vm", vm)
	}
}

func slogLevel(l hostcalls.LogLevel) slog.Level {
	switch {
	case l <= hostcalls.LogLevelDebug:
		return slog.LevelDebug
	case l == hostcalls.LogLevelInfo:
		return slog.LevelInfo
	case l == hostcalls.LogLevelWarn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// hostError records a fatal host error: something a module did that
// Envoy answers with an ASSERT (an abort in a debug build) and a release
// build with a broken stream. It is logged at critical level ("host: "
// + err) and kept for HostErrors; the caller leaves the stream as a
// release build would.
func (h *Host) hostError(vm int, err error) {
	h.addLog(hostcalls.LogLevelCritical, vm, "host: "+err.Error())
	h.logMu.Lock()
	h.hostErr = append(h.hostErr, err)
	h.logMu.Unlock()
}

// HostErrors returns the fatal host errors recorded so far, oldest first:
// calls a debug build of Envoy aborts on (ASSERT) and a release build
// answers by leaving the stream stuck, which the host records instead of
// aborting (each is also a critical "host: ..." log line). Today one:
// proxy_continue_stream made inside the callback of the same stream and
// direction (ErrContinueInOwnCallback). A test of a module that must run
// on Envoy checks that there are none.
func (h *Host) HostErrors() []error {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return append([]error(nil), h.hostErr...)
}

// Logs returns a copy of the captured guest log (the most recent
// maxLogs/2..maxLogs entries), oldest first.
func (h *Host) Logs() []LogEntry {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return append([]LogEntry(nil), h.logs...)
}

// Transcript returns a copy of VM i's transcript (Options.Transcript):
// "==> proxy_x(args)" / "<== STATUS results" for host calls made by the
// guest, "--> callback(args)" / "<-- result" for calls into the guest.
func (h *Host) Transcript(i int) []string {
	vm := h.vm(i)
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return append([]string(nil), vm.transcript...)
}

// ResetTranscript clears VM i's transcript.
func (h *Host) ResetTranscript(i int) {
	vm := h.vm(i)
	vm.mu.Lock()
	vm.transcript = nil
	vm.mu.Unlock()
}

// Wait blocks until every http_call issued so far has been answered
// (its proxy_on_http_call_response has returned). With
// Options.HTTPCallsOnWait it delivers the answers itself, in the order the
// calls were made, once every call under way has its answer, and again
// for the calls those callbacks make, until none is left.
func (h *Host) Wait() {
	for {
		h.calls.Wait()
		h.answeredMu.Lock()
		a := h.answered
		h.answered = nil
		h.answeredMu.Unlock()
		if len(a) == 0 {
			return
		}
		slices.SortFunc(a, func(x, y heldAnswer) int { return cmp.Compare(x.token, y.token) })
		for _, x := range a {
			x.vm.deliverHTTPCall(x.ctxID, x.s, x.token, x.res, x.ok)
		}
	}
}

// heldAnswer is an http_call answer kept for Wait.
type heldAnswer struct {
	vm    *VM
	ctxID uint32
	s     *Stream
	token uint32
	res   *httpCallResult
	ok    bool
}

// Call calls the guest export name on VM vm with the root context
// effective, as a test or benchmark hook (for example an export that runs
// a host call in a loop). A trap marks the VM failed.
func (h *Host) Call(vm int, name string, args ...uint64) ([]uint64, error) {
	v := h.vm(vm)
	v.enter()
	defer v.exit()
	if v.failed != nil {
		return nil, errVMFailed
	}
	fn := v.mod.ExportedFunction(name)
	if fn == nil {
		return nil, fmt.Errorf("host: VM %d exports no %s", vm, name)
	}
	v.curID, v.cur = rootContextID, nil
	v.trace("--> %s(%s)", name, formatArgs(name, args))
	res, err := fn.Call(v.ctx, args...)
	if err != nil {
		v.failed = fmt.Errorf("host: VM %d: %s: %w", v.index, name, err)
		v.trace("<-- trap: %v", err)
		return nil, v.failed
	}
	v.trace("<-- %v", res)
	return res, nil
}
