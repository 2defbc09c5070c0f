package host

import (
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// proxySetTickPeriodMilliseconds is proxy_set_tick_period_milliseconds(period_ms) → status.
//
// Sets the tick period of the VM's root context (Envoy keeps one timer per
// root context per VM, so N workers tick N times per period). 0 disables
// the timer. The next tick is due period after the call; after each tick
// it is re-armed period after that tick. Always OK. No memory is touched.
func proxySetTickPeriodMilliseconds(vm *VM, _ api.Module, stack []uint64) {
	ms := uint32(stack[0])
	if vm.tracing {
		vm.trace("==> %s(period_ms=%d)", hostcalls.ProxySetTickPeriod, ms)
	}
	vm.tickPeriod = time.Duration(ms) * time.Millisecond
	if ms > 0 {
		vm.nextTick = vm.h.opts.Clock.Now().Add(vm.tickPeriod)
	} else {
		vm.nextTick = time.Time{}
	}
	select {
	case vm.tickWake <- struct{}{}:
	default:
	}
	vm.traceRet(hostcalls.StatusOK, "")
	setStatus(stack, hostcalls.StatusOK)
}

// startTickers starts one tick goroutine per VM under a RealClock; under a
// VirtualClock ticks run only from Advance/RunDue.
func (h *Host) startTickers(vms []*VM) {
	if h.virtual != nil {
		return
	}
	for _, vm := range vms {
		h.ticks.Add(1)
		go func() {
			defer h.ticks.Done()
			vm.tickLoop(h.stop)
		}()
	}
}

func (vm *VM) tickLoop(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		vm.mu.Lock()
		next, period, gone := vm.nextTick, vm.tickPeriod, vm.rootGone || vm.closed || vm.failed != nil
		vm.mu.Unlock()
		if gone {
			return
		}
		var c <-chan time.Time
		if period > 0 {
			t.Reset(time.Until(next))
			c = t.C
		}
		select {
		case <-stop:
			t.Stop()
			return
		case <-vm.tickWake:
			t.Stop()
		case <-c:
			vm.tickIfDue()
		}
	}
}

// tickIfDue calls proxy_on_tick(root) if the VM's timer is due by the
// host clock and re-arms it. It reports whether a tick ran.
func (vm *VM) tickIfDue() bool {
	vm.enter()
	now := vm.h.opts.Clock.Now()
	ran := false
	if vm.tickPeriod > 0 && !vm.rootGone && !vm.closed && vm.failed == nil && !now.Before(vm.nextTick) {
		vm.nextTick = now.Add(vm.tickPeriod)
		vm.curID, vm.cur = rootContextID, nil
		vm.callback(cbTick, 0, rootContextID)
		ran = true
	}
	vm.exit()
	return ran
}

// tickVMs returns the VMs whose timers may fire: the current ones in
// index order, then the retired ones whose root context still lives
// (on_done returned false and proxy_done has not come yet).
func (h *Host) tickVMs() []*VM {
	h.mu.RLock()
	vms := append([]*VM(nil), h.vms...)
	retired := append([]*VM(nil), h.retired...)
	h.mu.RUnlock()
	for _, vm := range retired {
		vm.mu.Lock()
		live := !vm.rootGone && !vm.closed
		vm.mu.Unlock()
		if live {
			vms = append(vms, vm)
		}
	}
	return vms
}

// Tick runs proxy_on_tick now on every VM whose timer is armed (period >
// 0), current VMs in index order and then retired VMs still waiting for
// proxy_done, whether due or not, re-arming each timer a period from now.
// It returns how many ran.
func (h *Host) Tick() int {
	n := 0
	for _, vm := range h.tickVMs() {
		vm.mu.Lock()
		if vm.tickPeriod > 0 {
			vm.nextTick = h.opts.Clock.Now()
		}
		vm.mu.Unlock()
		if vm.tickIfDue() {
			n++
		}
	}
	return n
}

// RunDue runs, in the order of Tick, proxy_on_tick on every VM whose timer
// is due at the current clock time, once each, and returns how many ran.
func (h *Host) RunDue() int {
	n := 0
	for _, vm := range h.tickVMs() {
		if vm.tickIfDue() {
			n++
		}
	}
	return n
}

// Advance moves the VirtualClock forward by d, stopping at every tick
// deadline on the way: at each, the clock reads the deadline and every VM
// due then ticks, in VM order. It returns the number of ticks run. It
// panics if the Host does not run on a VirtualClock.
func (h *Host) Advance(d time.Duration) int {
	if h.virtual == nil {
		panic("host: Advance needs Options.Clock to be a *VirtualClock")
	}
	target := h.virtual.Now().Add(d)
	n := 0
	for {
		var next time.Time
		for _, vm := range h.tickVMs() {
			vm.mu.Lock()
			if vm.tickPeriod > 0 && vm.failed == nil && (next.IsZero() || vm.nextTick.Before(next)) {
				next = vm.nextTick
			}
			vm.mu.Unlock()
		}
		if next.IsZero() || next.After(target) {
			break
		}
		if next.After(h.virtual.Now()) {
			h.virtual.Set(next)
		}
		n += h.RunDue()
	}
	h.virtual.Set(target)
	return n
}
