package host

import (
	"context"
	"fmt"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// What a front end serving real requests (package proxy) uses besides the
// Stream API: EnterServe and ExitServe around each request, so that Close
// lets the requests in flight finish, and PickStream for its stream.

// EnterServe counts a front-end request in flight unless the Host is
// closed, and reports whether it did; then the caller calls ExitServe when
// the request is over (after Stream.Complete). Close waits for the
// requests in flight, up to its context, before it retires the VMs.
func (h *Host) EnterServe() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return false
	}
	h.serving.Add(1)
	return true
}

// ExitServe ends a request counted by EnterServe.
func (h *Host) ExitServe() { h.serving.Done() }

// PickStream opens a stream for a front end that serves requests (package
// proxy) on a VM picked by Options.Balance, replacing a failed VM first
// (Envoy drops a VM that trapped and creates a new one for the next
// stream) and picking again if the VM was retired meanwhile. If the
// failed VM cannot be replaced the stream runs on it (and gets 503
// wasm_fail_stream). Unlike NewStream's, the stream signals Notify after
// every change and drops the data passed on once Take returned it. It
// returns nil once the Host is closed.
func (h *Host) PickStream() *Stream {
	for {
		vm := h.pickVM()
		if vm.Failed() != nil && h.replaceFailed(vm) {
			continue
		}
		if s := h.tryNewStream(vm); s != nil {
			return s
		}
		if h.isClosed() {
			return nil
		}
	}
}

// replaceFailed swaps a failed worker VM for a new one started with the
// current configuration and reports whether old is no longer a current VM
// (replaced now or before); if the new VM fails too, the failed VM stays
// (its streams get 503) and it reports false.
func (h *Host) replaceFailed(old *VM) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if old.index < 0 || old.index >= len(h.vms) || h.vms[old.index] != old {
		return true
	}
	vm, err := h.newVM(context.Background(), old.index, h.opts.PluginConfig)
	if err != nil {
		if vm != nil {
			vm.closeInstance(context.Background())
		}
		h.addLog(hostcalls.LogLevelCritical, old.index, "host: replacing the failed VM: "+err.Error())
		old.mu.Lock()
		if !old.replaceFailed { // tried again for each new stream: wrap once
			old.failed = fmt.Errorf("%w (replacement failed: %v)", old.failed, err)
			old.replaceFailed = true
		}
		old.mu.Unlock()
		return false
	}
	h.vms[old.index] = vm
	h.retired = append(h.retired, old)
	old.mu.Lock()
	old.retired = true
	old.mu.Unlock()
	h.startTickers([]*VM{vm})
	return true
}

// pickVM picks the VM for a new stream.
func (h *Host) pickVM() *VM {
	vms := h.VMs()
	start := int(h.rr.Add(1)-1) % len(vms)
	if h.opts.Balance == RoundRobin {
		return vms[start]
	}
	best := vms[start]
	for i := 1; i < len(vms); i++ {
		vm := vms[(start+i)%len(vms)]
		if vm.active.Load() < best.active.Load() {
			best = vm
		}
	}
	return best
}
