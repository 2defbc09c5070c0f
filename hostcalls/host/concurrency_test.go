package host

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// TestSharedCounterConcurrentVMs: N VMs on N goroutines each add 1 to one
// shared-data counter many times through get / CAS-set retries inside
// the guest. The final value equals the number of successful sets (no
// update lost), and (with -race) the host has no data race.
func TestSharedCounterConcurrentVMs(t *testing.T) {
	const vms, perVM = 4, 100
	h := start(t, rawGuestPkg, Options{VMs: vms})
	// Create the key first: a guest that finds it missing sets it with
	// cas 0, and in Envoy cas 0 on a key another VM created meanwhile is
	// an unconditional overwrite (TestCreateRaceWithCASZero).
	h.SetSharedData("counter", []byte("0"), 0)
	var wg sync.WaitGroup
	done := make([]uint64, vms)
	for i := 0; i < vms; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Call(i, "inc_shared", perVM)
			if err != nil {
				t.Error(err)
				return
			}
			done[i] = res[0]
		}()
	}
	wg.Wait()
	total := uint64(0)
	retries := uint64(0)
	for i := 0; i < vms; i++ {
		total += done[i]
		r, _ := h.Call(i, "retries")
		retries += r[0]
	}
	v, _, _ := h.SharedData("counter")
	equal(t, "successful sets", total, uint64(vms*perVM))
	equal(t, "counter", string(v), strconv.FormatUint(total, 10))
	t.Logf("%d CAS mismatches retried", retries)
}

// TestCreateRaceWithCASZero: two writers that both found the key missing
// both "create" it: the second, with cas 0, silently overwrites the first
// (Envoy's rule) — why a plugin must not create records with cas 0.
func TestCreateRaceWithCASZero(t *testing.T) {
	h := start(t, passthroughPkg, Options{})
	_, cas1, ok1 := h.SharedData("rec")
	_, cas2, ok2 := h.SharedData("rec")
	equal(t, "both see it missing", []any{ok1, ok2, cas1, cas2}, []any{false, false, uint32(0), uint32(0)})
	equal(t, "first create", h.SetSharedData("rec", []byte("A"), cas1), hostcalls.StatusOK)
	equal(t, "second create overwrites", h.SetSharedData("rec", []byte("B"), cas2), hostcalls.StatusOK)
	v, _, _ := h.SharedData("rec")
	equal(t, "value", string(v), "B")
}

// TestSharedStoreRulesFromGo: the store's rules with goroutines racing
// through Host.SetSharedData (get → CAS set with retries). The key is
// created first: two goroutines that both find it missing would both
// "create" it with cas 0, and the second overwrites (TestCreateRaceWithCASZero).
func TestSharedStoreRulesFromGo(t *testing.T) {
	h := start(t, passthroughPkg, Options{})
	h.SetSharedData("n", []byte("0"), 0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				for {
					v, cas, _ := h.SharedData("n")
					n, _ := strconv.Atoi(string(v))
					if h.SetSharedData("n", []byte(strconv.Itoa(n+1)), cas) == hostcalls.StatusOK {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	v, _, _ := h.SharedData("n")
	equal(t, "counter", string(v), "4000")
}

// TestSharedDataAcrossHostsWithSameVMID: two Hosts with the same vm_id
// share one store (as all VMs of an Envoy process with that vm_id do);
// a Reconfigure keeps it.
func TestSharedDataAcrossHostsWithSameVMID(t *testing.T) {
	id := uniqueVMID(t)
	a := start(t, passthroughPkg, Options{VMID: id})
	b := start(t, rawGuestPkg, Options{VMID: id})
	a.SetSharedData("k", []byte("v"), 0)
	v, _, ok := b.SharedData("k")
	equal(t, "other host sees it", []any{string(v), ok}, []any{"v", true})
	if err := b.Reconfigure([]byte("tick_ms=0")); err != nil {
		t.Fatal(err)
	}
	v, _, _ = b.SharedData("k")
	equal(t, "after reconfigure", string(v), "v")
}

// TestTicksVirtualClock: with a VirtualClock, Advance stops at each tick
// deadline and runs every due VM in order: N VMs tick N times per period.
func TestTicksVirtualClock(t *testing.T) {
	clock := NewVirtualClock(time.Unix(1000, 0))
	h := start(t, rawGuestPkg, Options{VMs: 3, Clock: clock, PluginConfig: []byte("tick_ms=100")})
	equal(t, "ticks before", h.Advance(99*time.Millisecond), 0)
	equal(t, "ticks at 100ms", h.Advance(time.Millisecond), 3)
	equal(t, "ticks by 1s", h.Advance(900*time.Millisecond), 27)
	v, _, _ := h.SharedData("ticks")
	equal(t, "ticks counted by the guest", string(v), "30")
	var order []int
	for _, e := range h.Logs() {
		if e.Message == "tick" && len(order) < 6 {
			order = append(order, e.VM)
		}
	}
	equal(t, "VM order", order, []int{0, 1, 2, 0, 1, 2})
	equal(t, "clock", clock.Now(), time.Unix(1001, 0))
	equal(t, "Tick runs every armed VM now", h.Tick(), 3)
	equal(t, "nothing due right after", h.RunDue(), 0)
}

// TestTicksRealClock: with the real clock each VM ticks on its own.
func TestTicksRealClock(t *testing.T) {
	h := start(t, rawGuestPkg, Options{VMs: 2, PluginConfig: []byte("tick_ms=5")})
	deadline := time.Now().Add(2 * time.Minute) // a guard against a hang, not a speed check
	for {
		var per [2]int
		for _, e := range h.Logs() {
			if e.Message == "tick" {
				per[e.VM]++
			}
		}
		if per[0] >= 3 && per[1] >= 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticks per VM = %v after 2 minutes", per)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReconfigure: a new configuration starts a canary and new VMs, the
// old VMs get root on_done and on_delete (one with a stream open only
// once it completed), streams already open finish on the old VM, and a
// configuration the plugin rejects keeps the old VMs.
func TestReconfigure(t *testing.T) {
	h := start(t, rawGuestPkg, Options{VMs: 2, PluginConfig: []byte("a=1")})
	old := h.VMs()
	s := h.NewStream(0)
	s.RequestHeaders(getReq, false)
	if err := h.Reconfigure([]byte("fail=1")); err == nil {
		t.Fatal("Reconfigure(fail=1) = nil, want an error")
	}
	equal(t, "VMs kept", h.VMs(), old)
	if err := h.Reconfigure([]byte("b=2")); err != nil {
		t.Fatal(err)
	}
	if h.VMs()[0] == old[0] {
		t.Fatal("VMs were not replaced")
	}
	rootEnds := func() int {
		n := 0
		for _, e := range h.Logs() {
			if e.Message == "done ctx=1" || e.Message == "delete ctx=1" {
				n++
			}
		}
		return n
	}
	equal(t, "root on_done + on_delete on the idle old VM", rootEnds(), 2)
	// The open stream still runs on its (old) VM.
	equal(t, "old stream body", s.RequestBody([]byte("x"), true), Continue)
	s.Complete()
	equal(t, "and on the other once its stream completed", rootEnds(), 4)
	if old[0].Failed() != nil {
		t.Fatal(old[0].Failed())
	}
	equal(t, "closed once drained", old[0].closed, true)
	_ = context.Background()
}
