package plugin_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/tidwall/gjson"
)

// TestWasmTrappedVMRequestsBecomePhantoms: one worker VM of three traps
// (Envoy fails its streams with 503 and never calls it again) while it
// holds requests in flight. The other VMs keep ticking: once the dead VM
// has not been seen for holder_timeout its requests become phantoms (the
// record, the status endpoint and the gauges show them, and they still
// hold their team's reserved slots), and request_timeout later they expire:
// nothing is in flight any more and the team is within its share again.
// TestWasmDeadVMLeaksNoSlot covers a whole Host going away; this covers a
// trap inside a running Host, seen only through the surviving VMs' ticks.
func TestWasmTrappedVMRequestsBecomePhantoms(t *testing.T) {
	cfg := strings.Replace(testConfig, `"tick": "1s"`,
		`"tick": "1s", "holder_timeout": "3s", "request_timeout": "20s", "half_life": "0s"`, 1)
	h, f := startFaulty(t, cfg, 3, pluginName+"/")
	t0 := h.Now()
	body := chat("m", 10, "")
	estimate := float64((len(gjson.Get(body, "messages").Raw)+3)/4) + 2*10 // prompt + 2 × max_tokens
	status := func() gjson.Result {
		t.Helper()
		s := h.NewStream(1)
		s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/fairshare/status"}, {"authorization", "Bearer sesame"}}, true)
		lr := s.LocalReply()
		if lr == nil || lr.Status != 200 {
			t.Fatalf("status reply %+v", lr)
		}
		s.Complete()
		return gjson.ParseBytes(lr.Body).Get("pools.0")
	}

	// VM 2 holds both of a's reserved slots; VM 0 holds one of b's.
	d1 := request(h, 2, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	d2 := request(h, 2, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	live := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, body)
	for _, s := range []*host.Stream{d1, d2, live} {
		if p := priority(t, s); p != 0 {
			t.Fatalf("setup: priority %d, want 0 (within share)", p)
		}
	}

	// VM 2 traps in the middle of its next request.
	f.crashVM.Store(2 + 1)
	crash := request(h, 2, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	if !f.crashed.Load() || h.VMs()[2].Failed() == nil {
		t.Fatalf("VM 2 did not trap (crashed %v, failed %v)", f.crashed.Load(), h.VMs()[2].Failed())
	}
	if lr := crash.LocalReply(); lr == nil || lr.Status != 503 {
		t.Errorf("request on the trapping VM: local reply %+v, want 503", lr)
	}
	// Its streams in flight end without the plugin: nothing releases them.
	for _, s := range []*host.Stream{d1, d2} {
		s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
		s.Complete()
		if lr := s.LocalReply(); lr == nil || lr.Status != 503 {
			t.Errorf("stream of the failed VM: local reply %+v, want 503", lr)
		}
	}

	// Before holder_timeout: still counted as in flight.
	if n := h.Advance(2 * time.Second); n != 4 {
		t.Errorf("ticks in 2s = %d, want 4 (2 live VMs, the failed one never ticks)", n)
	}
	if st := teamStats(t, h, "small")["a"]; st.InFlight != 2 || st.Phantoms != 0 {
		t.Errorf("at t0+2s: a in flight %d phantoms %d, want 2 and 0", st.InFlight, st.Phantoms)
	}

	// Past holder_timeout (VM 2 last seen at t0): phantoms.
	h.Advance(2 * time.Second)
	st := teamStats(t, h, "small")
	if st["a"].InFlight != 0 || st["a"].Phantoms != 2 {
		t.Errorf("at t0+4s: a in flight %d phantoms %d, want 0 and 2", st["a"].InFlight, st["a"].Phantoms)
	}
	if st["b"].InFlight != 1 || st["b"].Phantoms != 0 {
		t.Errorf("at t0+4s: b (live VM) in flight %d phantoms %d, want 1 and 0", st["b"].InFlight, st["b"].Phantoms)
	}
	doc := status()
	a := doc.Get(`teams.#(team=="a")`)
	if doc.Get("in_flight").Int() != 3 || a.Get("phantoms").Int() != 2 || a.Get("in_flight").Int() != 0 {
		t.Errorf("status at t0+4s: pool in_flight %d, a phantoms %d in_flight %d; want 3, 2, 0 (%s)",
			doc.Get("in_flight").Int(), a.Get("phantoms").Int(), a.Get("in_flight").Int(), doc.Raw)
	}
	wantMetrics(t, h, map[string]int64{
		"fairshare.pool.small.team.a.phantoms":  2,
		"fairshare.pool.small.team.a.in_flight": 0,
		"fairshare.pool.small.in_flight":        3,
	})
	// The phantoms still hold a's two reserved slots: a new request of a
	// borrows.
	s := request(h, 1, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	if p := priority(t, s); p < fairshare.BorrowBase {
		t.Errorf("a's request while its phantoms hold its reservation: priority %d, want borrowing (>= %d)", p, fairshare.BorrowBase)
	}
	respondJSON(s, 5, 5)
	respondJSON(live, 7, 1)

	// Just before the phantoms expire (t0 + holder_timeout +
	// request_timeout = t0+23s) they are still there; after, they are gone.
	h.Advance(t0.Add(22 * time.Second).Sub(h.Now()))
	if st := teamStats(t, h, "small")["a"]; st.Phantoms != 2 {
		t.Errorf("at t0+22s: a phantoms %d, want 2", st.Phantoms)
	}
	h.Advance(2 * time.Second)
	checkIdle(t, h, "small", "rest")
	wantMetrics(t, h, map[string]int64{
		"fairshare.pool.small.team.a.phantoms": 0,
		"fairshare.pool.small.in_flight":       0,
	})
	if doc := status(); doc.Get("in_flight").Int() != 0 {
		t.Errorf("status after expiry: in_flight %d, want 0", doc.Get("in_flight").Int())
	}

	// a is within its share again.
	s = request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	if p := priority(t, s); p != 0 {
		t.Errorf("a's request after the phantoms expired: priority %d, want 0", p)
	}
	respondJSON(s, 3, 2)
	checkIdle(t, h, "small")
	// Charged: the dead VM's two requests their estimate (the entry
	// penalty nobody settled), the others what they reported.
	st = teamStats(t, h, "small")
	if want := 2*estimate + (5 + 2*5) + (3 + 2*2); math.Abs(st["a"].Usage-want) > 1e-6 {
		t.Errorf("usage a = %v, want %v (2 estimates of %v + reported)", st["a"].Usage, want, estimate)
	}
	if want := float64(7 + 2*1); math.Abs(st["b"].Usage-want) > 1e-6 {
		t.Errorf("usage b = %v, want %v", st["b"].Usage, want)
	}
	if st["a"].InFlightEstimate != 0 {
		t.Errorf("a in-flight estimate %v with nothing in flight, want 0", st["a"].InFlightEstimate)
	}
}
