package host

import (
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// Clock is the host's time source. The WASI clocks (and so a Go guest's
// time.Now), proxy_get_current_time_nanoseconds and the tick timers read it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// RealClock is the wall clock. Its zero value is ready to use. With a
// RealClock each VM's tick timer runs on its own goroutine.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// VirtualClock is a clock that moves only when told to, for deterministic
// simulations and tests. With a VirtualClock no goroutine ticks: call
// Host.Advance (or Set/Advance on the clock, then Host.RunDue). The zero
// value reads the Unix epoch. It is safe for concurrent use.
type VirtualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewVirtualClock returns a VirtualClock reading t.
func NewVirtualClock(t time.Time) *VirtualClock { return &VirtualClock{now: t} }

// Now returns the clock's current time.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return time.Unix(0, 0)
	}
	return c.now
}

// Set moves the clock to t (backwards too: the caller is in charge).
func (c *VirtualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d and returns the new time.
func (c *VirtualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = time.Unix(0, 0)
	}
	c.now = c.now.Add(d)
	return c.now
}

// proxyGetCurrentTimeNanoseconds is proxy_get_current_time_nanoseconds(ret_u64_ptr) → status
// (deprecated in ABI 0.2.x; the SDKs read the WASI clock instead).
//
// Writes the host clock's Unix time in nanoseconds as u64 LE. OK;
// INVALID_MEMORY_ACCESS.
//
//	ret_u64_ptr
//	  |
//	  v
//	[ ns u64le ]
func proxyGetCurrentTimeNanoseconds(vm *VM, mod api.Module, stack []uint64) {
	now := uint64(vm.h.opts.Clock.Now().UnixNano())
	vm.trace("==> proxy_get_current_time_nanoseconds()")
	st := hostcalls.StatusOK
	if !mod.Memory().WriteUint64Le(uint32(stack[0]), now) {
		st = hostcalls.StatusInvalidMemoryAccess
	}
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "ns=%d", now)
	}
}
