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
		t.Error("x5 left a's queue when x3 ended: b is full again (z1)")
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

// respillConfig: pool a (C 2, teams x and y one slot each, model m)
// spills to b (C 2, model m-b): b's team z reserves one slot and may not
// borrow (borrowing_limit 0), so a second z request is held in b while
// b has a slot free; team w reserves the other.
const respillConfig = `{"max_queue_time":"10s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,"half_life":"0s",
 "hold_headers":"on","hold_headers_probe":"10s","status_token":"sesame","response_headers":true,
 "pools":[{"name":"a","capacity":2,"models":["m"],"spill_to":["b"],"teams":{"x":{"share":0.5},"y":{"share":0.5}}},
          {"name":"b","capacity":2,"models":["m-b"],"teams":{"z":{"share":0.5,"borrowing_limit":0},"w":{"share":0.5}}}]}`

// respillFill fills a (x, y) and b (z, w) and holds x3 and x4 in a: b was
// full when they arrived, so they were not spilled then.
func respillFill(t *testing.T, h *host.Host, vm int) (fill []*host.Stream, x3, x4 *host.Stream) {
	t.Helper()
	fill = []*host.Stream{
		request(h, vm, "/v1/chat/completions", team("x"), chat("m", 4, "")),
		request(h, vm, "/v1/chat/completions", team("y"), chat("m", 4, "")),
		request(h, vm, "/v1/chat/completions", team("z"), chat("m-b", 4, "")),
		request(h, vm, "/v1/chat/completions", team("w"), chat("m-b", 4, "")),
	}
	x3 = request(h, vm, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	h.Advance(time.Millisecond)
	x4 = request(h, vm, "/v1/chat/completions", team("x"), chat("m", 4, ""))
	if !held(x3) || !held(x4) || waiting(t, h, "a") != 2 {
		t.Fatalf("x3 held %v, x4 held %v, a waiting %d: want both held in a", held(x3), held(x4), waiting(t, h, "a"))
	}
	return fill, x3, x4
}

// TestWasmRespillWhenTheFallbackFrees: requests held in a because b was
// full when they arrived move to b on a's dispatch tick once b frees room,
// the head of a's queue first and one per free slot (x4 stays held while
// b is full again), routed by x-fairshare-pool: b and marked
// x-fairshare-spilled-from: a, at a borrower's priority as b's unknown
// team, counted in the metric, the status endpoint and the response
// headers as a spill at arrival is; their queue time is the time they
// were held; every release goes to b.
func TestWasmRespillWhenTheFallbackFrees(t *testing.T) {
	h := startHost(t, respillConfig, 1, true)
	fill, x3, x4 := respillFill(t, h, 0)
	h.Advance(100 * time.Millisecond)
	if !held(x3) {
		t.Fatal("x3 left a's queue while b was full")
	}
	respondJSON(fill[3], 1, 1) // w's request ends: b has one slot free
	h.Advance(20 * time.Millisecond)
	if held(x3) {
		t.Fatal("x3 still held in a after a dispatch tick with a free slot in b")
	}
	if p, from := routed(x3); p != "b" || from != "a" {
		t.Errorf("x3 routed to %q spilled from %q, want b from a", p, from)
	}
	if p := priority(t, x3); p < fairshare.BorrowBase {
		t.Errorf("moved x3 priority %d, want a borrower's", p)
	}
	if !held(x4) {
		t.Error("x4 moved too: b had one slot free")
	}
	equal(t, "in flight a, b; waiting a", []int{inFlight(t, h, "a"), inFlight(t, h, "b"), waiting(t, h, "a")}, []int{2, 2, 1})
	equal(t, "b's unknown team", teamStats(t, h, "b")[fairshare.UnknownTeam].Borrowing, 1)
	wantMetrics(t, h, map[string]int64{"fairshare.pool.a.team.x.to_pool.b.spilled_total": 1})
	st := statusBody(t, h)
	equal(t, "status a, b", []string{gjson.Get(st, "pools.0.spilled_to").Raw, gjson.Get(st, "pools.1.spilled_in").Raw}, []string{`{"b":1}`, "1"})
	x3.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	rh := x3.ResponseHeaderMap()
	p, _ := header(rh, "x-fairshare-pool")
	from, _ := header(rh, "x-fairshare-spilled-from")
	equal(t, "x3 response headers", []string{p, from}, []string{"b", "a"})
	x3.ResponseBody([]byte(`{"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`), true)
	x3.Complete()
	// x3's slot in b is free again: x4, now the head, follows.
	h.Advance(20 * time.Millisecond)
	if p, from := routed(x4); held(x4) || p != "b" || from != "a" {
		t.Fatalf("x4 held %v, routed to %q from %q; want moved to b", held(x4), p, from)
	}
	wantMetrics(t, h, map[string]int64{"fairshare.pool.a.team.x.to_pool.b.spilled_total": 2})
	for _, s := range []*host.Stream{fill[0], fill[1], fill[2], x4} {
		respondJSON(s, 3, 2)
	}
	checkIdle(t, h, "a", "b")
	if u := teamStats(t, h, "b")[fairshare.UnknownTeam].Usage; u <= 0 {
		t.Errorf("b's unknown team usage %v: the moved requests' usage was not charged in b", u)
	}
}

// TestWasmSpillArrivalBehindHeld: a request arriving at a full pool does
// not spill ahead of the requests held there. x3 and x4 are held in a (b
// was full when they arrived); b frees one slot; x5 arrives in a before
// any dispatch tick. x3, the head of a's queue, takes b's slot (moved from
// x5's callback when x3 is x5's VM's, by its own VM on the wake-up when it
// is another's) and x5 is held behind x4; the next tick after b frees
// another slot moves x4, then x5 follows, each routed to b from a.
func TestWasmSpillArrivalBehindHeld(t *testing.T) {
	for _, tc := range []struct {
		name        string
		vms, arrive int // VMs of the host; the VM x5 arrives on (x3, x4 are VM 0's)
	}{
		{"same VM", 1, 0},
		{"another VM", 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHost(t, respillConfig, tc.vms, true)
			noHostErrors(t, h) // no continue from a stream's own callback
			fill, x3, x4 := respillFill(t, h, 0)
			respondJSON(fill[3], 1, 1) // w's request ends: b has one slot free
			h.Advance(time.Millisecond)
			x5 := request(h, tc.arrive, "/v1/chat/completions", team("x"), chat("m", 4, ""))
			if p, from := routed(x3); held(x3) || p != "b" || from != "a" {
				t.Fatalf("x3 held %v, routed to %q from %q: want the head of a's queue moved to b at x5's arrival", held(x3), p, from)
			}
			if p, from := routed(x5); !held(x5) || !held(x4) {
				t.Fatalf("x5 held %v (routed to %q from %q), x4 held %v: want both held in a, x5 behind x4", held(x5), p, from, held(x4))
			}
			equal(t, "in flight a, b; waiting a", []int{inFlight(t, h, "a"), inFlight(t, h, "b"), waiting(t, h, "a")}, []int{2, 2, 2})
			respondJSON(fill[2], 1, 1) // z's request ends: a slot free in b again
			h.Advance(20 * time.Millisecond)
			if p, _ := routed(x4); held(x4) || p != "b" || !held(x5) {
				t.Fatalf("x4 held %v, routed to %q; x5 held %v: want x4 moved to b first", held(x4), p, held(x5))
			}
			respondJSON(x3, 1, 1)
			h.Advance(20 * time.Millisecond)
			if p, from := routed(x5); held(x5) || p != "b" || from != "a" {
				t.Fatalf("x5 held %v, routed to %q from %q: want moved to b", held(x5), p, from)
			}
			wantMetrics(t, h, map[string]int64{"fairshare.pool.a.team.x.to_pool.b.spilled_total": 3})
			for _, s := range []*host.Stream{fill[0], fill[1], x4, x5} {
				respondJSON(s, 1, 1)
			}
			checkIdle(t, h, "a", "b")
		})
	}
}

// TestWasmRespillNotIntoAFallbackHoldingItsOwn: b has a slot free but a
// request of its own team is held there (z may not borrow): a's held
// request does not take the slot; once z's held request is gone, it does.
func TestWasmRespillNotIntoAFallbackHoldingItsOwn(t *testing.T) {
	h := startHost(t, respillConfig, 1, true)
	fill, x3, x4 := respillFill(t, h, 0)
	z2 := request(h, 0, "/v1/chat/completions", team("z"), chat("m-b", 4, ""))
	respondJSON(fill[3], 1, 1) // a slot free in b; z2 may not borrow it
	h.Advance(100 * time.Millisecond)
	if !held(z2) || waiting(t, h, "b") != 1 {
		t.Fatalf("z2 held %v, b waiting %d: want z2 held in b", held(z2), waiting(t, h, "b"))
	}
	if !held(x3) || inFlight(t, h, "b") != 1 {
		t.Fatalf("x3 held %v, b in flight %d: a held request moved into a fallback holding one of its own", held(x3), inFlight(t, h, "b"))
	}
	z2.Reset()
	z2.Complete()
	h.Advance(20 * time.Millisecond)
	if p, _ := routed(x3); held(x3) || p != "b" {
		t.Fatalf("x3 held %v, routed to %q, after b's own waiter left", held(x3), p)
	}
	for _, s := range []*host.Stream{fill[0], fill[1], fill[2], x3} {
		respondJSON(s, 1, 1)
	}
	h.Advance(20 * time.Millisecond)
	respondJSON(x4, 1, 1)
	checkIdle(t, h, "a", "b")
}

// TestWasmRespilledEndsOfStream: a request moved from a's queue to b ends
// in b on every end of stream (a reset, a delete without on_done, an
// upstream 503), and one whose client leaves while it is held is never
// moved: nothing is left in flight or waiting in either pool.
func TestWasmRespilledEndsOfStream(t *testing.T) {
	h := startHost(t, respillConfig, 1, true)
	fill, x3, x4 := respillFill(t, h, 0)
	x5 := request(h, 0, "/v1/chat/completions", team("y"), chat("m", 4, ""))
	x4.Reset() // gone while held: cancelled in a, never moved
	x4.Complete()
	respondJSON(fill[3], 1, 1)
	respondJSON(fill[2], 1, 1)
	h.Advance(20 * time.Millisecond)
	for _, s := range []*host.Stream{x3, x5} {
		if p, _ := routed(s); held(s) || p != "b" {
			t.Fatalf("held %v, routed to %q: want moved to b", held(s), p)
		}
	}
	equal(t, "in flight a, b; waiting a", []int{inFlight(t, h, "a"), inFlight(t, h, "b"), waiting(t, h, "a")}, []int{2, 2, 0})
	wantMetrics(t, h, map[string]int64{"fairshare.pool.a.team.x.to_pool.b.spilled_total": 1, "fairshare.pool.a.team.y.to_pool.b.spilled_total": 1})
	x3.Reset()
	x3.Complete()
	equal(t, "b after a reset", inFlight(t, h, "b"), 1)
	x5.DeleteOnly()
	equal(t, "b after a delete without on_done", inFlight(t, h, "b"), 0)
	x6 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, "")) // spilled at arrival
	fill = append(fill, request(h, 0, "/v1/chat/completions", team("w"), chat("m-b", 4, "")))
	x7 := request(h, 0, "/v1/chat/completions", team("x"), chat("m", 4, "")) // held: b full
	respondJSON(x6, 1, 1)
	h.Advance(20 * time.Millisecond)
	if p, _ := routed(x7); held(x7) || p != "b" {
		t.Fatalf("x7 held %v, routed to %q: want moved to b", held(x7), p)
	}
	x7.ResponseHeaders([][2]string{{":status", "503"}, {"content-length", "0"}}, true)
	x7.Complete()
	equal(t, "b after a 503", inFlight(t, h, "b"), 1)
	respondJSON(fill[0], 1, 1)
	respondJSON(fill[1], 1, 1)
	respondJSON(fill[4], 1, 1)
	checkIdle(t, h, "a", "b")
}

// TestWasmRespillHomeCancelFails: every write of a's record fails when a
// held request is moved, so it stays in a's queue after b took it: it is
// forwarded to b all the same, counted once in flight (in b), and the
// stale waiter in a is taken out later (cancelled at the head, or
// dispatched and ended at once): nothing leaks in either pool.
func TestWasmRespillHomeCancelFails(t *testing.T) {
	h, f := startFaultyOpts(t, respillConfig, 1, pluginName+"/fairshare/pool/a/", func(o *host.Options) { o.AllowOnHeadersStopIteration = true })
	fill, x3, x4 := respillFill(t, h, 0)
	respondJSON(fill[3], 1, 1)
	f.set.Store(uint32(hostcalls.StatusCASMismatch))
	h.Advance(20 * time.Millisecond)
	f.set.Store(0)
	if f.sets.Load() == 0 {
		t.Fatal("no write of a's record failed")
	}
	if p, _ := routed(x3); held(x3) || p != "b" {
		t.Fatalf("x3 held %v, routed to %q: want moved to b", held(x3), p)
	}
	equal(t, "in flight a, b; waiting a (x3's stale waiter, x4)", []int{inFlight(t, h, "a"), inFlight(t, h, "b"), waiting(t, h, "a")}, []int{2, 2, 2})
	respondJSON(x3, 1, 1)
	h.Advance(20 * time.Millisecond)
	if p, _ := routed(x4); held(x4) || p != "b" {
		t.Fatalf("x4 held %v, routed to %q: want moved to b past x3's stale waiter", held(x4), p)
	}
	equal(t, "in flight a, b; waiting a", []int{inFlight(t, h, "a"), inFlight(t, h, "b"), waiting(t, h, "a")}, []int{2, 2, 0})
	for _, s := range []*host.Stream{fill[0], fill[1], fill[2], x4} {
		respondJSON(s, 1, 1)
	}
	checkIdle(t, h, "a", "b")
}

// TestWasmRespillConcurrentNeverPastC: four VMs hold nine requests in a
// (C 3) while b (C 6) is full; then b's requests end and, with one record
// write in three failing as a lost compare-and-swap, the VMs' dispatch
// ticks move their held requests into b while four goroutines send one
// request each to b on every VM (every request borrows: its team is no
// pool's, so each pool holds at most C in flight). Nothing ends during
// that phase, so the last count is the largest: b is full and never past
// C, at least the two slots the goroutines cannot take went to moved
// requests, every request is forwarded (counted in exactly one pool) or
// held, and everything drains.
func TestWasmRespillConcurrentNeverPastC(t *testing.T) {
	cfg := `{"max_queue_time":"30s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,"half_life":"0s",
 "hold_headers":"on","hold_headers_probe":"30s",
 "pools":[{"name":"a","capacity":3,"models":["m"],"spill_to":["b"],"teams":{"q":{"share":0.1}}},
          {"name":"b","capacity":6,"models":["m-b"],"teams":{"r":{"share":1}}}]}`
	h, f := startFaultyHost(t, cfg, 4)
	var (
		mu      sync.Mutex
		streams []*host.Stream
		bOwn    []*host.Stream
	)
	for i := 0; i < 6; i++ {
		bOwn = append(bOwn, request(h, 0, "/v1/chat/completions", team("s"), chat("m-b", 4, "")))
	}
	for vm := 0; vm < 4; vm++ {
		for i := 0; i < 3; i++ {
			streams = append(streams, request(h, vm, "/v1/chat/completions", team(fmt.Sprintf("t%d", vm)), chat("m", 4, "")))
			h.Advance(time.Millisecond)
		}
	}
	equal(t, "in flight a, b; waiting a", []int{inFlight(t, h, "a"), inFlight(t, h, "b"), waiting(t, h, "a")}, []int{3, 6, 9})
	f.conflictEvery.Store(3)
	for _, s := range bOwn {
		respondJSON(s, 1, 1)
	}
	var wg sync.WaitGroup
	for vm := 0; vm < 4; vm++ {
		wg.Add(1)
		go func(vm int) {
			defer wg.Done()
			s := request(h, vm, "/v1/chat/completions", team("s"), chat("m-b", 4, ""))
			mu.Lock()
			streams = append(streams, s)
			mu.Unlock()
		}(vm)
	}
	most := 0
	for i := 0; i < 10; i++ {
		h.Advance(20 * time.Millisecond)
		most = max(most, inFlight(t, h, "b"))
	}
	wg.Wait()
	h.Advance(20 * time.Millisecond)
	most = max(most, inFlight(t, h, "b"))
	if most > 6 || inFlight(t, h, "a") > 3 {
		t.Errorf("most in flight in b %d (C 6), a %d (C 3): past C", most, inFlight(t, h, "a"))
	}
	equal(t, "b full", inFlight(t, h, "b"), 6)
	moved := metric(h, "fairshare.pool.a.team._unknown.to_pool.b.spilled_total")
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
	equal(t, "forwarded = a + b, held = waiting", []int{forwarded, heldN},
		[]int{inFlight(t, h, "a") + inFlight(t, h, "b"), waiting(t, h, "a") + waiting(t, h, "b")})
	if moved < 2 || f.sets.Load() == 0 {
		t.Errorf("%d moved from a's queue (want at least 2), %d conflicts injected", moved, f.sets.Load())
	}
	t.Logf("%d moved, %d forwarded, %d held, %d conflicts injected", moved, forwarded, heldN, f.sets.Load())
	f.conflictEvery.Store(0)
	for len(streams) > 0 {
		rest := streams[:0]
		for _, s := range streams {
			if held(s) {
				rest = append(rest, s)
				continue
			}
			respondJSON(s, 1, 1)
		}
		streams = rest
		h.Advance(20 * time.Millisecond)
		if b := inFlight(t, h, "b"); b > 6 {
			t.Fatalf("b has %d in flight while draining, C = 6", b)
		}
	}
	checkIdle(t, h, "a", "b")
}
