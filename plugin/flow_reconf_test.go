package plugin_test

import (
	"testing"
	"time"
)

// TestWasmFlowNewVMsHaveTheirOwnHolderIDs: a reconfiguration starts new
// VMs whose random sources may be seeded as the old ones were (our host
// seeds VM i alike in every generation); their holder ids must still
// differ, or a new VM dispatches an old VM's held request as its own and
// the request is never sent.
func TestWasmFlowNewVMsHaveTheirOwnHolderIDs(t *testing.T) {
	h, _ := start(t, flowConfig, 1)
	run := fill(t, h) // a1 within share, a2 borrowing: full
	x := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if !held(x) {
		t.Fatal("x not held")
	}
	if err := h.Reconfigure([]byte(flowConfig)); err != nil { // same instant, new VMs
		t.Fatal(err)
	}
	b1 := request(h, 0, "/v1/chat/completions", team("b"), chat("m", 4, "")) // on the new VM
	if p := priority(t, b1); p != 0 {
		t.Fatalf("b1 %d, want 0", p)
	}
	respondJSON(run[1], 1, 1) // a1 and b1 still fill the pool
	h.Advance(20 * time.Millisecond)
	if !held(x) {
		t.Fatal("x dispatched on a full pool")
	}
	respondJSON(b1, 1, 1) // the new VM frees room: it must wake the old VM
	h.Advance(20 * time.Millisecond)
	if held(x) {
		t.Fatalf("x still held after room freed (waiting %d): the new VM took it for its own", waiting(t, h, "p"))
	}
	respondJSON(x, 1, 1)
	respondJSON(run[0], 1, 1)
	checkIdle(t, h, "p")
}
