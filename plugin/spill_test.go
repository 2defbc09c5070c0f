package plugin_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/tidwall/gjson"
)

// Spill-over through plugin.wasm: a request that would be held in its own
// pool goes to a fallback pool that has room, routed by the request
// headers that hold_headers "on" keeps until the decision.

// spillConfig: pool a (C 2, teams x and y one slot each, model m) spills
// to b (C 2, team z all of it, model m-b; its engines serve m too).
const spillConfig = `{"max_queue_time":"10s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,"half_life":"0s",
 "hold_headers":"on","hold_headers_probe":"100ms","status_token":"sesame",
 "pools":[{"name":"a","capacity":2,"models":["m"],"spill_to":["b"],"teams":{"x":{"share":0.5},"y":{"share":0.5}}},
          {"name":"b","capacity":2,"models":["m-b"],"teams":{"z":{"share":1}}}]}`

// inFlight is the number of requests in flight in pool p (phantoms too).
func inFlight(t testing.TB, h *host.Host, p string) int {
	n := 0
	for _, s := range teamStats(t, h, p) {
		n += s.InFlight + s.Phantoms
	}
	return n
}

// routed returns the x-fairshare-pool and x-fairshare-spilled-from request
// headers a stream sent upstream (what Envoy's routes match).
func routed(s *host.Stream) (pool, from string) {
	hd := s.RequestHeaderMap()
	pool, _ = header(hd, "x-fairshare-pool")
	from, _ = header(hd, "x-fairshare-spilled-from")
	return pool, from
}

// TestWasmSpillMovesToAFallbackWithRoom: with pool a full, x's next
// requests go to b while b has room (routed there by x-fairshare-pool: b,
// marked x-fairshare-spilled-from: a, at a borrower's priority as b's
// unknown team), and once b is full too the next one is held in a; b's own
// team still goes within share; every release goes to the pool the request
// ran in, and the counts show in the metric, the response headers and the
// status endpoint.
func TestWasmSpillMovesToAFallbackWithRoom(t *testing.T) {
	h := startHost(t, spillConfig, 1, true)
	x1 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	x2 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	for i, s := range []*host.Stream{x1, x2} {
		if p, from := routed(s); p != "a" || from != "" {
			t.Fatalf("x%d routed to %q (spilled from %q), want a", i+1, p, from)
		}
	}
	x3 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	x4 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	for i, s := range []*host.Stream{x3, x4} {
		if held(s) {
			t.Fatalf("request %d held in a while b has room", i+3)
		}
		if p, from := routed(s); p != "b" || from != "a" {
			t.Errorf("request %d routed to %q spilled from %q, want b from a", i+3, p, from)
		}
		if p := priority(t, s); p < fairshare.BorrowBase {
			t.Errorf("spilled request %d priority %d, want a borrower's", i+3, p)
		}
	}
	equal(t, "in flight a, b", []int{inFlight(t, h, "a"), inFlight(t, h, "b")}, []int{2, 2})
	equal(t, "b's unknown team", teamStats(t, h, "b")[fairshare.UnknownTeam].Borrowing, 2)
	x5 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	if !held(x5) || waiting(t, h, "a") != 1 {
		t.Fatalf("x5 not held in a with both pools full (forwarded %q)", x5.ForwardedRequestBody())
	}
	// b's own team reaches b by b's model, within share.
	z1 := request(h, 0, "/v1/chat/completions", team("z"), chat("m-b", 4, ""))
	if p := priority(t, z1); p != fairshare.WithinShareBase {
		t.Errorf("z1 priority %d, want within share", p)
	}
	if p, from := routed(z1); p != "b" || from != "" {
		t.Errorf("z1 routed to %q from %q", p, from)
	}
	wantMetrics(t, h, map[string]int64{
		"fairshare.pool.a.team.x.to_pool.b.spilled_total": 2,
	})
	st := statusBody(t, h)
	equal(t, "status a", []string{gjson.Get(st, "pools.0.spill_to").Raw, gjson.Get(st, "pools.0.spilled_to").Raw, gjson.Get(st, "pools.0.spilled_in").Raw},
		[]string{`["b"]`, `{"b":2}`, "0"})
	equal(t, "status b", []string{gjson.Get(st, "pools.1.spill_to").Raw, gjson.Get(st, "pools.1.spilled_in").Raw}, []string{`[]`, "2"})

	x3.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	rh := x3.ResponseHeaderMap()
	p, _ := header(rh, "x-fairshare-pool")
	from, _ := header(rh, "x-fairshare-spilled-from")
	equal(t, "x3 response headers", []string{p, from}, []string{"b", "a"})
	x3.ResponseBody([]byte(`{"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`), true)
	x3.Complete()
	equal(t, "in flight a, b after x3", []int{inFlight(t, h, "a"), inFlight(t, h, "b")}, []int{2, 2}) // z1 is b's
	if held(x5) != true {
		t.Error("x5 left a's queue when b freed: a held request is offered to fallbacks on arrival only")
	}
	respondJSON(x1, 3, 2)
	if held(x5) {
		t.Fatal("x5 not dispatched in a after a release there")
	}
	if p, _ := routed(x5); p != "a" {
		t.Errorf("x5 routed to %q, want a", p)
	}
	for _, s := range []*host.Stream{x2, x4, x5, z1} {
		respondJSON(s, 3, 2)
	}
	checkIdle(t, h, "a", "b")
	if u := teamStats(t, h, "b")[fairshare.UnknownTeam].Usage; u <= 0 {
		t.Errorf("b's unknown team usage %v: the spilled requests' usage was not charged where they ran", u)
	}
}

// TestWasmSpilledEndsOfStream: a spilled request ends in the fallback on
// every end of stream: a reset (client gone), a delete without on_done
// (a host that skips it), an upstream 503.
func TestWasmSpilledEndsOfStream(t *testing.T) {
	h := startHost(t, spillConfig, 1, true)
	fill := []*host.Stream{
		request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, "")),
		request(h, 0, "/v1/chat/completions", team("y"), chat("m", 4, "")),
	}
	spill := func() *host.Stream {
		s := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
		if p, _ := routed(s); p != "b" {
			t.Fatalf("not spilled: routed to %q", p)
		}
		return s
	}
	s1, s2 := spill(), spill()
	s1.Reset()
	s1.Complete()
	equal(t, "b after a reset", inFlight(t, h, "b"), 1)
	s2.DeleteOnly()
	equal(t, "b after a delete without on_done", inFlight(t, h, "b"), 0)
	s3 := spill()
	s3.ResponseHeaders([][2]string{{":status", "503"}, {"content-length", "0"}}, true)
	s3.Complete()
	equal(t, "b after a 503", inFlight(t, h, "b"), 0)
	for _, s := range fill {
		respondJSON(s, 1, 1)
	}
	checkIdle(t, h, "a", "b")
}

// TestWasmSpillNeedsHeldHeaders: under a host that converts the headers'
// stop (no allow_on_headers_stop_iteration), the probe releases the
// headers before the body is decided, so the route is fixed: a request
// that would be held stays held in its own pool, never spilled.
func TestWasmSpillNeedsHeldHeaders(t *testing.T) {
	h := startHost(t, spillConfig, 1, false)
	var all []*host.Stream
	for i := 0; i < 3; i++ {
		s := h.NewStream(0)
		s.RequestHeaders([][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "vllm"},
			{"content-type", "application/json"}, {"x-team", "x"}}, false)
		h.Advance(150 * time.Millisecond) // the probe continues the headers
		s.RequestBody([]byte(chat("m", 4, "")), true)
		all = append(all, s)
	}
	if !held(all[2]) || waiting(t, h, "a") != 1 || inFlight(t, h, "b") != 0 {
		t.Fatalf("third request: held %v, a waiting %d, b in flight %d; want held in a", held(all[2]), waiting(t, h, "a"), inFlight(t, h, "b"))
	}
	for _, s := range all {
		respondJSON(s, 1, 1)
		h.Advance(20 * time.Millisecond)
	}
	respondJSON(all[2], 1, 1)
	checkIdle(t, h, "a", "b")
}

// mutualSpill: pools a and b (C 3 each) spill to each other; no team is
// configured, so every request borrows (unknown_team "borrow") and each
// pool can hold at most C in flight.
const mutualSpill = `{"max_queue_time":"10s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,"half_life":"0s",
 "hold_headers":"on","hold_headers_probe":"10s",
 "pools":[{"name":"a","capacity":3,"models":["m"],"spill_to":["b"],"teams":{"q":{"share":0.1}}},
          {"name":"b","capacity":3,"models":["m-b"],"spill_to":["a"],"teams":{"r":{"share":0.1}}}]}`

// TestWasmSpillConcurrentNeverPastC: four VMs on real goroutines send
// requests to both pools of mutualSpill at once, with one record write in
// three failing as a lost compare-and-swap: the pools spill into each
// other, yet neither ever has more than C in flight (the requests never
// end during the fill, so the final count is the largest), every request
// is either forwarded (counted in exactly one pool) or held, and once
// both pools are full nothing more is forwarded or spilled.
func TestWasmSpillConcurrentNeverPastC(t *testing.T) {
	h, f := startFaultyHost(t, mutualSpill, 4)
	f.conflictEvery.Store(3)
	var (
		mu      sync.Mutex
		streams []*host.Stream
		wg      sync.WaitGroup
	)
	// Each pool first gets two of its three slots taken; then all four
	// VMs race for the last slot of each, each pool's overflow spilling
	// into the other.
	for i := 0; i < 4; i++ {
		s := request(h, 0, "/v1/chat/completions", team("first"), chat([]string{"m", "m-b"}[i%2], 4, ""))
		if p, _ := routed(s); p != []string{"a", "b"}[i%2] {
			t.Fatalf("request %d of the prelude routed to %q", i, p)
		}
		streams = append(streams, s)
	}
	for vm := 0; vm < 4; vm++ {
		wg.Add(1)
		go func(vm int) {
			defer wg.Done()
			model := []string{"m", "m-b"}[vm%2]
			for i := 0; i < 3; i++ {
				s := request(h, vm, "/v1/chat/completions", team(fmt.Sprintf("t%d", vm)), chat(model, 4, ""))
				mu.Lock()
				streams = append(streams, s)
				mu.Unlock()
			}
		}(vm)
	}
	wg.Wait()
	forwarded, heldN := 0, 0
	for _, s := range streams {
		switch {
		case held(s):
			heldN++
		case len(s.ForwardedRequestBody()) > 0:
			forwarded++
		default:
			t.Errorf("a request neither held nor forwarded: reply %+v", s.LocalReply())
		}
	}
	a, b := inFlight(t, h, "a"), inFlight(t, h, "b")
	if a > 3 || b > 3 {
		t.Errorf("in flight a %d, b %d: past C = 3", a, b)
	}
	equal(t, "forwarded = a + b, held = waiting", []int{forwarded, heldN}, []int{a + b, waiting(t, h, "a") + waiting(t, h, "b")})
	equal(t, "both pools full", []int{a, b}, []int{3, 3})
	spilled := metric(h, "fairshare.pool.a.team._unknown.to_pool.b.spilled_total") + metric(h, "fairshare.pool.b.team._unknown.to_pool.a.spilled_total")
	if f.sets.Load() == 0 {
		t.Error("no conflict was injected")
	}
	t.Logf("%d forwarded, %d held, %d spilled, %d conflicts injected", forwarded, heldN, spilled, f.sets.Load())
	// Both full: TryAcquire never succeeds, whatever the conflicts.
	for vm := 0; vm < 4; vm++ {
		s := request(h, vm, "/v1/chat/completions", team("late"), chat([]string{"m", "m-b"}[vm%2], 4, ""))
		if !held(s) {
			t.Errorf("a request forwarded with both pools full (routed %v)", s.RequestHeaderMap())
		}
		streams = append(streams, s)
	}
	after := metric(h, "fairshare.pool.a.team._unknown.to_pool.b.spilled_total") + metric(h, "fairshare.pool.b.team._unknown.to_pool.a.spilled_total")
	equal(t, "spilled once both are full", after, spilled)
	equal(t, "in flight a, b", []int{inFlight(t, h, "a"), inFlight(t, h, "b")}, []int{3, 3})
	// Drain: every request ends, on its own VM's streams; what is held is
	// dispatched as slots free.
	f.conflictEvery.Store(0)
	for len(streams) > 0 {
		progress := false
		rest := streams[:0]
		for _, s := range streams {
			if held(s) {
				rest = append(rest, s)
				continue
			}
			respondJSON(s, 1, 1)
			progress = true
		}
		streams = rest
		h.Advance(20 * time.Millisecond)
		if !progress && len(streams) > 0 {
			h.Advance(time.Second)
		}
	}
	checkIdle(t, h, "a", "b")
}

// startFaultyHost is startFaulty on pool records with
// allow_on_headers_stop_iteration.
func startFaultyHost(t *testing.T, cfg string, vms int) (*host.Host, *faults) {
	t.Helper()
	return startFaultyOpts(t, cfg, vms, pluginName+"/", func(o *host.Options) { o.AllowOnHeadersStopIteration = true })
}

// TestWasmSpillRespectsLendingLimits: the fallback's team keeps half of
// its reservation (lending_limit 0.5 of b's 2 slots): one request spills
// into b, the next is held in a although b has fewer than C in flight.
func TestWasmSpillRespectsLendingLimits(t *testing.T) {
	cfg := `{"max_queue_time":"10s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,"half_life":"0s",
 "hold_headers":"on","hold_headers_probe":"100ms",
 "pools":[{"name":"a","capacity":1,"models":["m"],"spill_to":["b"],"teams":{"x":{"share":1}}},
          {"name":"b","capacity":2,"models":["m-b"],"teams":{"z":{"share":1,"lending_limit":0.5}}}]}`
	h := startHost(t, cfg, 1, true)
	x1 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	x2 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	if p, from := routed(x2); p != "b" || from != "a" {
		t.Fatalf("x2 routed to %q from %q, want b from a", p, from)
	}
	x3 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	if !held(x3) || inFlight(t, h, "b") != 1 {
		t.Fatalf("x3: held %v, b in flight %d; want held in a, b keeping z's slot", held(x3), inFlight(t, h, "b"))
	}
	z1 := request(h, 0, "/v1/chat/completions", team("z"), chat("m-b", 4, ""))
	if p := priority(t, z1); p != fairshare.WithinShareBase {
		t.Errorf("z1 priority %d, want within share", p)
	}
	equal(t, "b in flight with z1", inFlight(t, h, "b"), 2)
	for _, s := range []*host.Stream{x1, x2, z1} {
		respondJSON(s, 1, 1)
	}
	h.Advance(20 * time.Millisecond)
	respondJSON(x3, 1, 1)
	checkIdle(t, h, "a", "b")
}

// TestWasmSpilledLocalReplyLeaksNothing: a spilled request whose body
// cannot be rewritten is answered 500 (a local reply) and ends in the
// fallback it was moved to; its own pool holds nothing of it either.
func TestWasmSpilledLocalReplyLeaksNothing(t *testing.T) {
	var refuse atomic.Bool
	h, err := compiled(t).Start(context.Background(), host.Options{
		Profile: hostProfile, AllowOnHeadersStopIteration: true,
		VMs: 1, PluginName: pluginName, VMID: t.Name(), PluginConfig: []byte(spillConfig),
		Clock: host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
		BufferFault: func(_ int, bt hostcalls.BufferType) hostcalls.Status {
			if refuse.Load() && bt == hostcalls.BufferHTTPRequestBody {
				return hostcalls.StatusInternalFailure
			}
			return hostcalls.StatusOK
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	noHostErrors(t, h)
	defer h.Close(context.Background())
	x1 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	y1 := request(h, 0, "/v1/chat/completions", team("y"), chat("m", 4, ""))
	refuse.Store(true)
	s := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	jsonError(t, s, 500)
	s.Complete()
	refuse.Store(false)
	equal(t, "in flight a, b; a waiting", []int{inFlight(t, h, "a"), inFlight(t, h, "b"), waiting(t, h, "a")}, []int{2, 0, 0})
	if n := metric(h, "fairshare.pool.a.team.x.to_pool.b.spilled_total"); n != 1 {
		t.Errorf("spilled_total %d, want 1 (it was moved before the rewrite failed)", n)
	}
	respondJSON(x1, 1, 1)
	respondJSON(y1, 1, 1)
	checkIdle(t, h, "a", "b")
}
