package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// rootContextID is the id of each VM's root (plugin) context. Context ids
// are per VM; HTTP contexts take the following ids.
const rootContextID = 1

// CanaryVM is the VM index of the canary in logs and transcripts.
const CanaryVM = -1

// VM is one instance of the module (one Envoy worker's clone). Every call
// into it holds mu, so a VM runs one call at a time; different VMs run in
// parallel. Host functions run on the goroutine of the call that made them.
type VM struct {
	h     *Host
	index int // position in Host.VMs at creation; CanaryVM for the canary
	mod   api.Module
	ctx   context.Context

	mu    sync.Mutex
	alloc api.Function
	cbs   [numCallbacks]export // the guest's proxy_on_* callbacks

	// stacks are the value stacks of calls into the guest, one per
	// nesting depth (a callback; the allocator called from a host function
	// during it), reused so that a call allocates none.
	stacks     [4][8]uint64
	stackDepth int

	nextID  uint32
	streams map[uint32]*Stream

	// Effective context of the running call: the root (cur == nil) or an
	// HTTP stream.
	curID uint32
	cur   *Stream

	inAlloc, inStart bool
	configuring      []byte // PLUGIN_CONFIGURATION during on_configure, else nil
	inConfigure      bool
	callResp         *httpCallResult // during on_http_call_response

	tickPeriod time.Duration
	nextTick   time.Time
	tickWake   chan struct{}

	deferred []func()

	failed error

	tracing    bool
	transcript []string

	fdbuf    [3][]byte
	pairsBuf []byte // proxy_get_header_map_pairs' encoding, reused
	rnd      *splitmix
	status   struct {
		code uint32
		msg  string
	}
	rootFS  map[string][]byte
	active  atomic.Int32
	retired bool // no new streams (replaced by Reconfigure or a failure)
	// rootGone: the root context was deleted (on_delete(root) ran): no
	// more ticks or queue notifications, as Envoy finds no root context
	// for them. A retired VM whose on_done returned false keeps its root,
	// and so its ticks, until the guest calls proxy_done.
	rootGone bool
	shutdown bool // on_done(root) has run
	closed   bool
	waitDone bool // on_done returned false: on_delete waits for proxy_done
	// replaceFailed: PickStream could not replace this failed VM.
	replaceFailed bool
}

// Index returns the VM's index (CanaryVM for the canary).
func (vm *VM) Index() int { return vm.index }

// Failed returns the error of the call that trapped the VM, or nil. A
// failed VM is not called again (Envoy drops it).
func (vm *VM) Failed() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.failed
}

// enter locks the VM for a top-level call; exit unlocks it and then runs
// the actions deferred by host functions (queue notifications, http_call
// completions), outside the lock.
func (vm *VM) enter() { vm.mu.Lock() }

func (vm *VM) exit() {
	d := vm.deferred
	vm.deferred = nil
	vm.mu.Unlock()
	for _, f := range d {
		f()
	}
}

// restrictedError is the trap of a host call that cpp-host forbids in the
// current phase.
type restrictedError struct{ name, phase string }

func (e *restrictedError) Error() string {
	return fmt.Sprintf("restricted_callback: %s is not allowed during %s", e.name, e.phase)
}

// checkRestricted traps (panics, which wazero turns into the call's error)
// when a host function is called where cpp-host forbids it: during the
// guest's allocator only proxy_log, fd_write and clock_time_get (plus
// poll_oneoff from 94091cd); during _initialize only logging, args,
// environ, clocks, random and prestat, and more with each newer cpp-host
// (allowedDuringAlloc, allowedDuringStart: the lists of Options.Profile).
func (vm *VM) checkRestricted(name string) {
	if vm.inAlloc && !allowedDuringAlloc(vm.h.opts.Profile, name) {
		if vm.tracing {
			vm.trace("==> %s(...) during allocation", name)
		}
		panic(&restrictedError{name, "memory allocation"})
	}
	if vm.inStart && !allowedDuringStart(vm.h.opts.Profile, name) {
		if vm.tracing {
			vm.trace("==> %s(...) during _initialize", name)
		}
		panic(&restrictedError{name, "_initialize"})
	}
}

// trace appends a transcript line when the transcript is on. Call sites
// that pass arguments guard it with `if vm.tracing`: converting them to
// interfaces allocates even when the transcript is off.
func (vm *VM) trace(format string, args ...any) {
	if vm.tracing {
		vm.transcript = append(vm.transcript, fmt.Sprintf(format, args...))
	}
}

// wtrace appends a transcript line for a WASI call when
// Options.TranscriptWASI is on too.
func (vm *VM) wtrace(format string, args ...any) {
	if vm.tracing && vm.h.opts.TranscriptWASI {
		vm.transcript = append(vm.transcript, fmt.Sprintf(format, args...))
	}
}

// traceRet appends "<== STATUS", followed by the results (extra) when
// the status is OK.
func (vm *VM) traceRet(st hostcalls.Status, extra string, args ...any) {
	if vm.tracing {
		s := "<== " + StatusName(st)
		if extra != "" && st == hostcalls.StatusOK {
			s += " " + fmt.Sprintf(extra, args...)
		}
		vm.transcript = append(vm.transcript, s)
	}
}

// StatusName returns the spec's name of a status ("OK", "NOT_FOUND", ...).
func StatusName(st hostcalls.Status) string {
	switch st {
	case hostcalls.StatusOK:
		return "OK"
	case hostcalls.StatusNotFound:
		return "NOT_FOUND"
	case hostcalls.StatusBadArgument:
		return "BAD_ARGUMENT"
	case hostcalls.StatusSerializationFailure:
		return "SERIALIZATION_FAILURE"
	case hostcalls.StatusParseFailure:
		return "PARSE_FAILURE"
	case hostcalls.StatusInvalidMemoryAccess:
		return "INVALID_MEMORY_ACCESS"
	case hostcalls.StatusEmpty:
		return "EMPTY"
	case hostcalls.StatusCASMismatch:
		return "CAS_MISMATCH"
	case hostcalls.StatusInternalFailure:
		return "INTERNAL_FAILURE"
	case hostcalls.StatusBrokenConnection:
		return "BROKEN_CONNECTION"
	case hostcalls.StatusUnimplemented:
		return "UNIMPLEMENTED"
	}
	return fmt.Sprintf("STATUS(%d)", uint32(st))
}

// errVMFailed is returned by calls into a VM that trapped before.
var errVMFailed = errors.New("host: the VM failed earlier")

// export is one function the guest exports, with whether it returns a
// value (read once: wazero's Definition().ResultTypes() allocates).
type export struct {
	fn        api.Function
	hasResult bool
}

// callbackID names a proxy_on_* callback. A VM keeps its callbacks in an
// array indexed by it, so that a call does not hash the export's name.
type callbackID uint8

const (
	cbContextCreate callbackID = iota
	cbVMStart
	cbConfigure
	cbTick
	cbRequestHeaders
	cbRequestBody
	cbRequestTrailers
	cbResponseHeaders
	cbResponseBody
	cbResponseTrailers
	cbHTTPCallResponse
	cbQueueReady
	cbLog
	cbDone
	cbDelete
	numCallbacks
)

// callbackNames are the exports' names, by callbackID.
var callbackNames = [numCallbacks]string{
	cbContextCreate:    hostcalls.ExportContextCreate,
	cbVMStart:          hostcalls.ExportVMStart,
	cbConfigure:        hostcalls.ExportConfigure,
	cbTick:             hostcalls.ExportTick,
	cbRequestHeaders:   hostcalls.ExportRequestHeaders,
	cbRequestBody:      hostcalls.ExportRequestBody,
	cbRequestTrailers:  hostcalls.ExportRequestTrailers,
	cbResponseHeaders:  hostcalls.ExportResponseHeaders,
	cbResponseBody:     hostcalls.ExportResponseBody,
	cbResponseTrailers: hostcalls.ExportResponseTrailers,
	cbHTTPCallResponse: hostcalls.ExportHTTPCallResponse,
	cbQueueReady:       hostcalls.ExportQueueReady,
	cbLog:              hostcalls.ExportLog,
	cbDone:             hostcalls.ExportDone,
	cbDelete:           hostcalls.ExportDelete,
}

// pushStack returns a zeroed value stack of n slots for a call into the
// guest at the current nesting depth; popStack releases it.
func (vm *VM) pushStack(n int) []uint64 {
	d := vm.stackDepth
	vm.stackDepth++
	if d < len(vm.stacks) && n <= len(vm.stacks[d]) {
		s := vm.stacks[d][:n]
		clear(s)
		return s
	}
	return make([]uint64, n)
}

func (vm *VM) popStack() { vm.stackDepth-- }

// callback calls the guest's callback id with args; a missing export
// returns (def, nil). A trap marks the VM failed. The caller holds vm.mu.
func (vm *VM) callback(id callbackID, def uint64, args ...uint64) (uint64, error) {
	if vm.failed != nil {
		return def, errVMFailed
	}
	e := vm.cbs[id]
	if e.fn == nil {
		return def, nil
	}
	name := callbackNames[id]
	if vm.tracing {
		vm.transcript = append(vm.transcript, "--> "+name+"("+formatArgs(name, args)+")")
	}
	stack := vm.pushStack(max(len(args), 1))
	copy(stack, args)
	err := e.fn.CallWithStack(vm.ctx, stack)
	r := stack[0]
	vm.popStack()
	if err != nil {
		vm.failed = fmt.Errorf("host: VM %d: %s: %w", vm.index, name, err)
		if vm.tracing {
			vm.trace("<-- trap: %v", err)
		}
		vm.h.addLog(hostcalls.LogLevelCritical, vm.index, vm.failed.Error())
		return def, vm.failed
	}
	if e.hasResult {
		if vm.tracing {
			vm.trace("<-- %d", uint32(r))
		}
	} else {
		r = def
		vm.trace("<--")
	}
	return r, nil
}

var callbackParams = map[string][]string{
	hostcalls.ExportContextCreate:    {"ctx", "parent"},
	hostcalls.ExportVMStart:          {"root", "vm_config_size"},
	hostcalls.ExportConfigure:        {"root", "config_size"},
	hostcalls.ExportTick:             {"root"},
	hostcalls.ExportRequestHeaders:   {"ctx", "headers", "eos"},
	hostcalls.ExportResponseHeaders:  {"ctx", "headers", "eos"},
	hostcalls.ExportRequestBody:      {"ctx", "body_size", "eos"},
	hostcalls.ExportResponseBody:     {"ctx", "body_size", "eos"},
	hostcalls.ExportRequestTrailers:  {"ctx", "trailers"},
	hostcalls.ExportResponseTrailers: {"ctx", "trailers"},
	hostcalls.ExportHTTPCallResponse: {"ctx", "token", "headers", "body_size", "trailers"},
	hostcalls.ExportQueueReady:       {"root", "queue"},
	hostcalls.ExportLog:              {"ctx"},
	hostcalls.ExportDone:             {"ctx"},
	hostcalls.ExportDelete:           {"ctx"},
}

func formatArgs(name string, args []uint64) string {
	names := callbackParams[name]
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		if i < len(names) {
			b.WriteString(names[i])
			b.WriteByte('=')
		}
		fmt.Fprintf(&b, "%d", uint32(a))
	}
	return b.String()
}

// allocate calls the guest's allocator (malloc if exported, else
// proxy_on_memory_allocate, as cpp-host) with the restricted-callback
// rules on. It panics (traps the running call) if the allocator traps.
func (vm *VM) allocate(size uint32) uint32 {
	if vm.alloc == nil {
		panic(errors.New("host: the module exports no allocator"))
	}
	prev := vm.inAlloc
	vm.inAlloc = true
	defer func() { vm.inAlloc = prev }()
	stack := vm.pushStack(1)
	stack[0] = uint64(size)
	err := vm.alloc.CallWithStack(vm.ctx, stack)
	p := uint32(stack[0])
	vm.popStack()
	if err != nil {
		panic(err)
	}
	return p
}

// copyOut returns data to the guest the cpp-host way: empty data is
// ptr=0,size=0 without allocation; otherwise allocate first (memory may
// grow during the reentrant call), then write the bytes and both slots.
func (vm *VM) copyOut(mod api.Module, data []byte, ptrPtr, sizePtr uint32) hostcalls.Status {
	mem := mod.Memory()
	if len(data) == 0 {
		if !mem.WriteUint32Le(ptrPtr, 0) || !mem.WriteUint32Le(sizePtr, 0) {
			return hostcalls.StatusInvalidMemoryAccess
		}
		return hostcalls.StatusOK
	}
	// Check the slots before allocating so a bad pointer costs nothing.
	if _, ok := mem.Read(ptrPtr, 4); !ok {
		return hostcalls.StatusInvalidMemoryAccess
	}
	if _, ok := mem.Read(sizePtr, 4); !ok {
		return hostcalls.StatusInvalidMemoryAccess
	}
	p := vm.allocate(uint32(len(data)))
	if p == 0 {
		return hostcalls.StatusInvalidMemoryAccess
	}
	mem = mod.Memory()
	if !mem.Write(p, data) || !mem.WriteUint32Le(ptrPtr, p) || !mem.WriteUint32Le(sizePtr, uint32(len(data))) {
		return hostcalls.StatusInvalidMemoryAccess
	}
	return hostcalls.StatusOK
}

// read returns a copy of guest memory [ptr, ptr+size).
func read(mod api.Module, ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	b, ok := mod.Memory().Read(ptr, size)
	if !ok {
		return nil, false
	}
	return append([]byte(nil), b...), true
}

// readString returns guest memory [ptr, ptr+size) as a string.
func readString(mod api.Module, ptr, size uint32) (string, bool) {
	if size == 0 {
		return "", true
	}
	b, ok := mod.Memory().Read(ptr, size)
	if !ok {
		return "", false
	}
	return string(b), true
}

func writeU32(mod api.Module, ptr, v uint32) bool { return mod.Memory().WriteUint32Le(ptr, v) }

// setStatus writes a status into the result slot of a host function.
func setStatus(stack []uint64, st hostcalls.Status) { stack[0] = uint64(st) }

// contextIDs answers whether id names a live context of the VM.
func (vm *VM) lookupContext(id uint32) (*Stream, bool) {
	if id == rootContextID {
		return nil, true
	}
	s, ok := vm.streams[id]
	return s, ok
}

// splitmix is a deterministic random source for random_get when seeded.
type splitmix struct{ x uint64 }

func (s *splitmix) next() uint64 {
	s.x += 0x9e3779b97f4a7c15
	z := s.x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func strconvQuote(s string) string { return strconv.Quote(s) }
