package host

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// faultCall is one call seen by a SharedDataFault hook.
type faultCall struct {
	vm      int
	op, key string
}

// TestSharedDataFaultOnGet: a hook failing gets makes the guest's
// proxy_get_shared_data answer the injected status without the value; a
// hook answering OK lets the call through; the host's own accessors are
// never affected.
func TestSharedDataFaultOnGet(t *testing.T) {
	var fail atomic.Bool
	var mu sync.Mutex
	var seen []faultCall
	h := start(t, rawGuestPkg, Options{VMs: 2, Transcript: true, SharedDataFault: func(vm int, op, key string) hostcalls.Status {
		mu.Lock()
		seen = append(seen, faultCall{vm, op, key})
		mu.Unlock()
		if fail.Load() && op == SharedDataGet {
			return hostcalls.StatusInternalFailure
		}
		return hostcalls.StatusOK
	}})
	h.SetSharedData("bench", []byte("value"), 0)

	fail.Store(true)
	h.ResetTranscript(1)
	if _, err := h.Call(1, "get_shared_loop", 1); err != nil {
		t.Fatal(err)
	}
	equal(t, "faulted get", grep(h.Transcript(1), "proxy_get_shared_data", "<== "),
		[]string{`==> proxy_get_shared_data(key="bench")`, "<== INTERNAL_FAILURE"})
	if v, _, ok := h.SharedData("bench"); !ok || string(v) != "value" {
		t.Errorf("Host.SharedData under a get fault = %q, %v; want the stored value", v, ok)
	}

	fail.Store(false)
	h.ResetTranscript(1)
	if _, err := h.Call(1, "get_shared_loop", 1); err != nil {
		t.Fatal(err)
	}
	got := grep(h.Transcript(1), "<== ")
	if len(got) != 1 || !strings.HasPrefix(got[0], `<== OK value="value"`) {
		t.Errorf("get after the fault is lifted: %q, want OK with the value", got)
	}
	mu.Lock()
	defer mu.Unlock()
	equal(t, "hook calls", seen, []faultCall{{1, SharedDataGet, "bench"}, {1, SharedDataGet, "bench"}})
}

// TestSharedDataFaultOnSet: a failing set stores nothing and the guest
// sees the injected status (rawguest's inc_shared gives up on any status
// but OK and CAS_MISMATCH); the host's SetSharedData is not affected.
func TestSharedDataFaultOnSet(t *testing.T) {
	h := start(t, rawGuestPkg, Options{SharedDataFault: func(vm int, op, key string) hostcalls.Status {
		if op == SharedDataSet && key == "counter" {
			return hostcalls.StatusInternalFailure
		}
		return hostcalls.StatusOK
	}})
	equal(t, "host set under a fault", h.SetSharedData("counter", []byte("41"), 0), hostcalls.StatusOK)
	_, cas, _ := h.SharedData("counter")
	res, err := h.Call(0, "inc_shared", 5)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "increments done", res[0], uint64(0))
	v, cas2, _ := h.SharedData("counter")
	equal(t, "counter and cas after failed sets", []any{string(v), cas2}, []any{"41", cas})
}

// TestSharedDataFaultCASMismatch: forced CAS_MISMATCH answers reach the
// guest as mismatches (its retry loop counts them) and store nothing;
// once the hook lets the sets through, the retried update lands once.
func TestSharedDataFaultCASMismatch(t *testing.T) {
	var left atomic.Int32
	left.Store(3)
	h := start(t, rawGuestPkg, Options{SharedDataFault: func(vm int, op, key string) hostcalls.Status {
		if op == SharedDataSet && left.Add(-1) >= 0 {
			return hostcalls.StatusCASMismatch
		}
		return hostcalls.StatusOK
	}})
	h.SetSharedData("counter", []byte("7"), 0)
	res, err := h.Call(0, "inc_shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := h.Call(0, "retries")
	v, _, _ := h.SharedData("counter")
	equal(t, "done, mismatches seen, counter", []any{res[0], r[0], string(v)}, []any{uint64(1), uint64(3), "8"})
}

// TestSharedDataFaultConcurrentVMs: VMs updating one counter in parallel
// while the hook injects a CAS mismatch on every other set of each VM:
// every injected mismatch is retried and no increment is lost (with -race:
// the hook runs on the VMs' goroutines without a data race in the host).
func TestSharedDataFaultConcurrentVMs(t *testing.T) {
	const vms, perVM = 3, 50
	var sets [vms]atomic.Int32
	var injected atomic.Int32
	h := start(t, rawGuestPkg, Options{VMs: vms, SharedDataFault: func(vm int, op, key string) hostcalls.Status {
		if op == SharedDataSet && vm >= 0 && sets[vm].Add(1)%2 == 1 {
			injected.Add(1)
			return hostcalls.StatusCASMismatch
		}
		return hostcalls.StatusOK
	}})
	h.SetSharedData("counter", []byte("0"), 0)
	var wg sync.WaitGroup
	for i := 0; i < vms; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Call(i, "inc_shared", perVM); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	retries := uint64(0)
	for i := 0; i < vms; i++ {
		r, _ := h.Call(i, "retries")
		retries += r[0]
	}
	v, _, _ := h.SharedData("counter")
	equal(t, "counter", string(v), strconv.Itoa(vms*perVM))
	if retries < uint64(injected.Load()) || injected.Load() < vms*perVM {
		t.Errorf("guest saw %d mismatches, %d injected; want every injected one seen (at least %d injected)", retries, injected.Load(), vms*perVM)
	}
}

// TestSharedDataFaultPanicTrapsVM: a hook that panics traps the guest call
// that made the shared-data call: that VM fails (and is not called again),
// the other VMs run on.
func TestSharedDataFaultPanicTrapsVM(t *testing.T) {
	h := start(t, rawGuestPkg, Options{VMs: 2, SharedDataFault: func(vm int, op, key string) hostcalls.Status {
		if vm == 1 {
			panic("injected crash")
		}
		return hostcalls.StatusOK
	}})
	if _, err := h.Call(1, "get_shared_loop", 1); err == nil || !strings.Contains(err.Error(), "injected crash") {
		t.Fatalf("call on the crashing VM: %v, want a trap with the panic", err)
	}
	if h.VMs()[1].Failed() == nil {
		t.Error("VM 1 not failed after the trap")
	}
	if _, err := h.Call(1, "retries"); err == nil {
		t.Error("a failed VM was called again")
	}
	if h.VMs()[0].Failed() != nil {
		t.Error("VM 0 failed too")
	}
	res, err := h.Call(0, "inc_shared", 2)
	if err != nil || res[0] != 2 {
		t.Errorf("VM 0 after VM 1 trapped: %v, %v; want 2 increments", res, err)
	}
}
