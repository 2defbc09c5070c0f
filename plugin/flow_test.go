package plugin_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/tidwall/gjson"
)

// Flow control through plugin.wasm: borrowers that find no room are held
// at the gateway and dispatched, in the pool's standing order at the
// moment capacity frees, by the VM that holds them.

// flowConfig is a pool of capacity 2 (a and b reserve 1 each, c none) with
// holding on.
const flowConfig = `{"max_queue_time":"10s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,"half_life":"0s",
 "status_token":"sesame",
 "pools":[{"name":"p","capacity":2,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.5}}}]}`

// held reports whether a stream is held: nothing forwarded, no local reply,
// not ended.
func held(s *host.Stream) bool {
	return len(s.ForwardedRequestBody()) == 0 && s.LocalReply() == nil && !s.Ended()
}

// waiting returns the number of requests waiting in pool p.
func waiting(t testing.TB, h *host.Host, p string) int {
	n := 0
	for _, s := range teamStats(t, h, p) {
		n += s.Waiting
	}
	return n
}

func TestWasmFlowHoldsBorrowersAndDispatchesOnRelease(t *testing.T) {
	h, _ := start(t, flowConfig, 2)
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	a2 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if p1, p2 := priority(t, a1), priority(t, a2); p1 != 0 || p2 < fairshare.BorrowBase {
		t.Fatalf("a1 %d, a2 %d: want within share then borrowing (the pool has room)", p1, p2)
	}
	// The pool is full: a's next request borrows and is held.
	a3 := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 4, `,"priority":-7`))
	if !held(a3) || waiting(t, h, "p") != 1 {
		t.Fatalf("a3 not held (forwarded %q, reply %+v); waiting %d", a3.ForwardedRequestBody(), a3.LocalReply(), waiting(t, h, "p"))
	}
	// A within-share request is never held, even on a full pool.
	b1 := request(h, 0, "/v1/chat/completions", team("b"), chat("m", 4, ""))
	if p := priority(t, b1); p != 0 {
		t.Fatalf("b1 priority %d, want 0 (within share, never held)", p)
	}
	h.Advance(time.Second)
	if !held(a3) {
		t.Fatal("a3 dispatched while the pool is full")
	}
	// a2 finishes on VM 0, but b1 (within share) holds the pool full.
	respondJSON(a2, 3, 2)
	h.Advance(20 * time.Millisecond)
	if !held(a3) {
		t.Fatal("a3 dispatched while a1 and b1 fill the pool")
	}
	// b1 finishes on VM 0: VM 0 wakes VM 1 through its shared queue, and
	// a3 goes at once, with the priority decided now.
	respondJSON(b1, 3, 2)
	if held(a3) {
		t.Fatal("a3 still held after capacity freed: VM 1 was not woken")
	}
	if p := priority(t, a3); p < fairshare.BorrowBase {
		t.Errorf("a3 dispatched at %d, want a borrowing priority (a still has a1 within share)", p)
	}
	respondJSON(a3, 3, 2)
	if q, _ := header(a3.ResponseHeaderMap(), "x-fairshare-queue-time"); q == "" || q == "0.000" {
		t.Errorf("x-fairshare-queue-time %q, want the second a3 waited", q)
	} else if f, _ := strconv.ParseFloat(q, 64); f < 1 || f > 1.1 {
		t.Errorf("x-fairshare-queue-time %q, want about 1 s", q)
	}
	respondJSON(a1, 3, 2)
	checkIdle(t, h, "p")
	if n := waiting(t, h, "p"); n != 0 {
		t.Errorf("waiting %d after the run, want 0", n)
	}
	if v := h.Metrics()["fairshare.pool.p.team.a.dispatched_total"].Value; v != 1 {
		t.Errorf("dispatched_total a = %d, want 1", v)
	}
}

func TestWasmFlowDispatchesInGlobalStandingOrder(t *testing.T) {
	// 4 VMs, capacity 4: a and b reserve 1 each, c 2. a's and b's
	// borrowers are held on different VMs; a has used far more, so b's
	// held requests go first whatever their arrival, then a's by arrival.
	cfg := strings.Replace(flowConfig, `"capacity":2,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.5}}`,
		`"capacity":4,"models":["m"],"teams":{"a":{"share":0.25},"b":{"share":0.25},"c":{"share":0.5}}`, 1)
	h, _ := start(t, cfg, 4)
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 400, ""))
	respondJSON(a1, 500, 400) // a's usage: 1300; b's: its penalties only
	a1 = request(h, 0, "/v1/chat/completions", team("a"), chat("m", 1, ""))
	b1 := request(h, 1, "/v1/chat/completions", team("b"), chat("m", 1, ""))
	c1 := request(h, 2, "/v1/chat/completions", team("c"), chat("m", 1, ""))
	c2 := request(h, 3, "/v1/chat/completions", team("c"), chat("m", 1, ""))
	for _, s := range []*host.Stream{a1, b1, c1, c2} {
		if p := priority(t, s); p != 0 {
			t.Fatalf("setup: priority %d, want 0", p)
		}
	}
	type req struct {
		s    *host.Stream
		name string
	}
	var order []req
	for i, tc := range []struct {
		vm   int
		team string
	}{{0, "a"}, {1, "a"}, {2, "b"}, {3, "a"}, {3, "b"}} {
		h.Advance(time.Millisecond) // arrivals in order (ties go by holder id)
		s := request(h, tc.vm, "/v1/chat/completions", team(tc.team), chat("m", 1, ""))
		if !held(s) {
			t.Fatalf("request %d of %s not held", i, tc.team)
		}
		order = append(order, req{s, tc.team + strconv.Itoa(i)})
	}
	if n := waiting(t, h, "p"); n != 5 {
		t.Fatalf("waiting %d, want 5", n)
	}
	// Free one slot at a time (c's first) and see who goes.
	want := []string{"b2", "b4", "a0", "a1", "a3"}
	running := []*host.Stream{c1, c2}
	dispatched := map[*host.Stream]bool{}
	for step, w := range want {
		respondJSON(running[0], 1, 1)
		running = running[1:]
		var got []string
		collect := func() {
			for _, r := range order {
				if !held(r.s) && !dispatched[r.s] {
					dispatched[r.s] = true
					got = append(got, r.name)
					running = append(running, r.s)
				}
			}
		}
		if collect(); len(got) == 0 {
			h.Advance(20 * time.Millisecond) // at most one dispatch tick
			collect()
		}
		if len(got) != 1 || got[0] != w {
			t.Fatalf("step %d: dispatched %v, want [%s]", step, got, w)
		}
	}
	for _, s := range append(running, a1, b1) {
		respondJSON(s, 1, 1)
	}
	checkIdle(t, h, "p")
	if n := waiting(t, h, "p"); n != 0 {
		t.Errorf("waiting %d, want 0", n)
	}
}

// fill sends a's within-share request and a borrower, filling the pool.
func fill(t *testing.T, h *host.Host) []*host.Stream {
	t.Helper()
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	a2 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if priority(t, a1) != 0 || priority(t, a2) < fairshare.BorrowBase {
		t.Fatal("setup: the pool is not full")
	}
	return []*host.Stream{a1, a2}
}

func TestWasmFlowQueueTimeoutIs429(t *testing.T) {
	h, _ := start(t, flowConfig, 2)
	run := fill(t, h)
	s := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if !held(s) {
		t.Fatal("not held")
	}
	h.Advance(9 * time.Second)
	if !held(s) {
		t.Fatal("answered before max_queue_time")
	}
	h.Advance(1100 * time.Millisecond)
	jsonError(t, s, 429)
	if ra, _ := header(s.LocalReply().Headers, "retry-after"); ra == "" {
		t.Error("429 without retry-after")
	} else if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > 10 {
		t.Errorf("retry-after %q, want whole seconds in [1, 10]", ra)
	}
	s.Complete()
	if n := waiting(t, h, "p"); n != 0 {
		t.Errorf("waiting %d after the timeout, want 0", n)
	}
	if v := h.Metrics()["fairshare.pool.p.team.a.queue_timeouts_total"].Value; v != 1 {
		t.Errorf("queue_timeouts_total = %d, want 1", v)
	}
	for _, r := range run {
		respondJSON(r, 1, 1)
	}
	checkIdle(t, h, "p")
}

func TestWasmFlowQueueFullIs429(t *testing.T) {
	h, _ := start(t, strings.Replace(flowConfig, `"max_queue_time"`, `"queue_limit":1,"max_queue_time"`, 1), 1)
	run := fill(t, h)
	q := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if !held(q) {
		t.Fatal("first borrower not held")
	}
	full := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	jsonError(t, full, 429)
	if ra, _ := header(full.LocalReply().Headers, "retry-after"); ra == "" {
		t.Error("429 without retry-after")
	}
	full.Complete()
	for _, r := range run {
		respondJSON(r, 1, 1)
	}
	h.Advance(20 * time.Millisecond)
	respondJSON(q, 1, 1)
	checkIdle(t, h, "p")
	if v := h.Metrics()["fairshare.pool.p.rejected_queue_full_total"].Value; v != 1 {
		t.Errorf("rejected_queue_full_total = %d, want 1", v)
	}
}

func TestWasmFlowClientAbortWhileHeld(t *testing.T) {
	h, _ := start(t, flowConfig, 2)
	run := fill(t, h)
	gone := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	next := request(h, 1, "/v1/chat/completions", team("b"), chat("m", 4, ""))
	if p := priority(t, next); p != 0 {
		t.Fatalf("b within share got %d", p)
	}
	later := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if !held(gone) || !held(later) {
		t.Fatal("borrowers not held")
	}
	gone.Reset()
	gone.Complete()
	if n := waiting(t, h, "p"); n != 1 {
		t.Fatalf("waiting %d after the abort, want 1", n)
	}
	respondJSON(run[1], 1, 1)
	respondJSON(next, 1, 1)
	h.Advance(20 * time.Millisecond)
	if held(later) {
		t.Fatal("the request behind the aborted one was not dispatched")
	}
	for _, s := range []*host.Stream{run[0], later} {
		respondJSON(s, 1, 1)
	}
	checkIdle(t, h, "p")
	if n := waiting(t, h, "p"); n != 0 {
		t.Errorf("waiting %d, want 0", n)
	}
}

func TestWasmFlowReconfigureKeepsHeld(t *testing.T) {
	h, _ := start(t, flowConfig, 2)
	run := fill(t, h)
	s := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if !held(s) {
		t.Fatal("not held")
	}
	if err := h.Reconfigure([]byte(strings.Replace(flowConfig, `"default_max_tokens":16`, `"default_max_tokens":32`, 1))); err != nil {
		t.Fatal(err)
	}
	h.Advance(100 * time.Millisecond)
	if !held(s) || waiting(t, h, "p") != 1 {
		t.Fatal("the held request was lost or dispatched without room by the reconfiguration")
	}
	respondJSON(run[1], 1, 1)
	h.Advance(20 * time.Millisecond)
	if held(s) {
		t.Fatal("the held request was not dispatched after the reconfiguration")
	}
	respondJSON(s, 1, 1)
	respondJSON(run[0], 1, 1)
	checkIdle(t, h, "p")
}

func TestWasmFlowTrappedVMLeaksNothing(t *testing.T) {
	cfg := strings.Replace(flowConfig, `"tick":"1s"`, `"tick":"1s","holder_timeout":"3s","request_timeout":"20s"`, 1)
	h, f := startFaulty(t, cfg, 3, pluginName+"/")
	run := fill(t, h)
	doomed := request(h, 2, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	survivor := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if !held(doomed) || !held(survivor) {
		t.Fatal("borrowers not held")
	}
	f.crashVM.Store(2 + 1)
	crash := request(h, 2, "/v1/chat/completions", team("b"), chat("m", 4, ""))
	if !f.crashed.Load() || h.VMs()[2].Failed() == nil {
		t.Fatal("VM 2 did not trap")
	}
	crash.Complete()
	f.crashVM.Store(0)
	// The dead VM's waiting request leaves the queue with its holder.
	h.Advance(4 * time.Second)
	if n := waiting(t, h, "p"); n != 1 {
		t.Fatalf("waiting %d once VM 2 is presumed dead, want 1 (the survivor)", n)
	}
	respondJSON(run[1], 1, 1)
	h.Advance(20 * time.Millisecond)
	if held(survivor) {
		t.Fatal("the survivor was not dispatched")
	}
	respondJSON(survivor, 1, 1)
	respondJSON(run[0], 1, 1)
	checkIdle(t, h, "p")
}

func TestWasmFlowCASConflictsKeepOrderAndLeakNothing(t *testing.T) {
	h, f := startFaulty(t, flowConfig, 4, pluginName+"/")
	f.conflictEvery.Store(3) // one record write in three conflicts
	run := fill(t, h)
	var heldOnes []*host.Stream
	for vm := 0; vm < 4; vm++ {
		h.Advance(time.Millisecond) // arrivals in order (ties go by holder id)
		s := request(h, vm, "/v1/chat/completions", team("a"), chat("m", 4, ""))
		if !held(s) {
			t.Fatalf("borrower on VM %d not held", vm)
		}
		heldOnes = append(heldOnes, s)
	}
	// They go one at a time, in arrival order, as slots free.
	all := append(run, heldOnes...)
	for i := range heldOnes {
		respondJSON(all[i], 1, 1)
		h.Advance(20 * time.Millisecond)
		for j, o := range heldOnes {
			if want := j <= i; !held(o) != want {
				t.Fatalf("after %d releases: held request %d dispatched %v, want %v", i+1, j, !held(o), want)
			}
		}
	}
	for _, s := range all[len(heldOnes):] {
		respondJSON(s, 1, 1)
	}
	checkIdle(t, h, "p")
	if w := waiting(t, h, "p"); w != 0 {
		t.Errorf("waiting %d, want 0", w)
	}
	if f.sets.Load() == 0 {
		t.Error("no conflict was injected")
	}
}

func TestWasmFlowLendingLimitKeepsRoomForTheOwner(t *testing.T) {
	// b lends none of its reservation: while b is idle, a's borrower waits
	// although a slot is free, and b's request finds it.
	cfg := strings.Replace(flowConfig, `"b":{"share":0.5}`, `"b":{"share":0.5,"lending_limit":0}`, 1)
	h, _ := start(t, cfg, 1)
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	a2 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if priority(t, a1) != 0 || !held(a2) {
		t.Fatal("a's borrower was not held by b's lending limit")
	}
	b1 := request(h, 0, "/v1/chat/completions", team("b"), chat("m", 4, ""))
	if p := priority(t, b1); p != 0 {
		t.Fatalf("b1 %d, want 0", p)
	}
	for _, s := range []*host.Stream{a1, b1} {
		respondJSON(s, 1, 1)
	}
	h.Advance(20 * time.Millisecond)
	if held(a2) {
		// a1 freed a's own slot: a2 is now within share.
		t.Fatal("a2 not dispatched once a's own slot freed")
	}
	if p := priority(t, a2); p != 0 {
		t.Errorf("a2 dispatched at %d, want 0: a is back within its share at dispatch", p)
	}
	respondJSON(a2, 1, 1)
	checkIdle(t, h, "p")
}

func TestWasmFlowKVTokensBind(t *testing.T) {
	// 8 sequences but 1000 KV tokens (a and b reserve 500 each): a's first
	// request of ~600 tokens runs within share (a team with nothing within
	// share in flight always may run one, whatever its demand); a second
	// one borrows and finds no KV room: it is held although sequence slots
	// are free.
	cfg := strings.Replace(flowConfig, `"capacity":2`, `"capacity":8,"kv_tokens":1000`, 1)
	h, _ := start(t, cfg, 1)
	big := chat("m", 600, "")
	s1 := request(h, 0, "/v1/chat/completions", team("a"), big)
	if p := priority(t, s1); p != 0 {
		t.Errorf("a's first 600-token request got %d, want 0 (within share)", p)
	}
	s2 := request(h, 0, "/v1/chat/completions", team("a"), big)
	if !held(s2) {
		t.Fatalf("second 600-token request not held with 1000 KV tokens (forwarded %q)", s2.ForwardedRequestBody())
	}
	st := gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a")`)
	if st.Get("waiting").Int() != 1 || st.Get("in_flight_tokens").Int() < 600 {
		t.Errorf("status of a: %s", st.Raw)
	}
	respondJSON(s1, 10, 10)
	h.Advance(20 * time.Millisecond)
	if held(s2) {
		t.Fatal("s2 not dispatched once the KV tokens freed")
	}
	respondJSON(s2, 10, 10)
	checkIdle(t, h, "p")
	// a's requests have used 10 completion tokens of their 600: its KV
	// demand is now its prompt plus its usual completion, so two of them
	// fit the cache at once (the first borrows nothing: it fits a's 500).
	s3 := request(h, 0, "/v1/chat/completions", team("a"), big)
	s4 := request(h, 0, "/v1/chat/completions", team("a"), big)
	if p := priority(t, s3); p != 0 {
		t.Errorf("s3 priority %d, want 0: its demand is the learnt completion, not max_tokens", p)
	}
	if held(s4) {
		t.Error("s4 held: the KV demand still counts max_tokens")
	}
	respondJSON(s3, 10, 10)
	respondJSON(s4, 10, 10)
	checkIdle(t, h, "p")
}

// statusBody fetches the status endpoint.
func statusBody(t *testing.T, h *host.Host) string {
	t.Helper()
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/fairshare/status"}, {"authorization", "Bearer sesame"}}, true)
	lr := s.LocalReply()
	if lr == nil || lr.Status != 200 {
		t.Fatalf("status: %+v", lr)
	}
	s.Complete()
	return string(lr.Body)
}

func TestWasmFlowHeldDemandFollowsTheLearntCompletion(t *testing.T) {
	// 1000 KV tokens, a and b 500 each. a's big request arrives before any
	// of a's completions is known, so its demand is its max_tokens (600):
	// it cannot be within share next to a1 and a2, and the pool has no
	// room for it as a borrower. Once one of a's requests is seen to finish
	// short, the held request's demand is lowered and it goes within
	// share (a1 still in flight, so not by the rule for a team with
	// nothing within share).
	cfg := strings.Replace(flowConfig, `"capacity":2`, `"capacity":8,"kv_tokens":1000`, 1)
	h, _ := start(t, cfg, 1)
	b1 := request(h, 0, "/v1/chat/completions", team("b"), chat("m", 480, ""))
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	a2 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if priority(t, b1) != 0 || priority(t, a1) != 0 || priority(t, a2) != 0 {
		t.Fatal("setup: b1, a1, a2 not within share")
	}
	big := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 600, ""))
	if !held(big) {
		t.Fatalf("a's 600-token request not held (forwarded %q)", big.ForwardedRequestBody())
	}
	h.Advance(time.Second)
	if !held(big) {
		t.Fatal("dispatched before anything changed")
	}
	respondJSON(a2, 5, 3) // a's answers are short
	h.Advance(20 * time.Millisecond)
	if held(big) {
		t.Fatalf("the held request's demand did not follow a's learnt completion (waiting %d)", waiting(t, h, "p"))
	}
	if p := priority(t, big); p != 0 {
		t.Errorf("dispatched at %d, want 0 (within share with its lowered demand)", p)
	}
	for _, s := range []*host.Stream{big, a1, b1} {
		respondJSON(s, 5, 3)
	}
	checkIdle(t, h, "p")
}

func TestWasmFlowNewVMsTakeTheLearntCompletions(t *testing.T) {
	// As TestWasmFlowKVTokensBind: once a's usual completion (10 tokens)
	// is known, two of a's 600-token requests fit the 1000 KV tokens. A
	// configuration swap starts new VMs; they must take what the old VM
	// learnt from the shared means rather than count max_tokens again.
	cfg := strings.Replace(flowConfig, `"capacity":2`, `"capacity":8,"kv_tokens":1000`, 1)
	h, _ := start(t, cfg, 1)
	big := chat("m", 600, "")
	s1 := request(h, 0, "/v1/chat/completions", team("a"), big)
	respondJSON(s1, 10, 10)
	h.Advance(time.Second) // the heartbeat tick shares the means
	if err := h.Reconfigure([]byte(cfg)); err != nil {
		t.Fatal(err)
	}
	s2 := request(h, 0, "/v1/chat/completions", team("a"), big) // on the new VM
	s3 := request(h, 0, "/v1/chat/completions", team("a"), big)
	if p := priority(t, s2); p != 0 {
		t.Errorf("s2 priority %d, want 0", p)
	}
	if held(s3) {
		t.Error("s3 held: the new VM counts max_tokens, not the completion the old VM learnt")
	}
	respondJSON(s2, 10, 10)
	respondJSON(s3, 10, 10)
	checkIdle(t, h, "p")
}

func TestWasmBorrowedTokensShowAsBorrowing(t *testing.T) {
	// a reserves 4 sequences and 500 of the pool's 1000 KV tokens. With
	// one small request of a in flight, a 600-token request of a fits a
	// sequence of a's but not a's tokens; the pool has them free, so it
	// goes at once on borrowed tokens, at a borrower's priority, and the
	// operator sees it as borrowing (header and standing label).
	cfg := strings.Replace(flowConfig, `"capacity":2`, `"capacity":8,"kv_tokens":1000`, 1)
	h, _ := start(t, cfg, 1)
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if p := priority(t, a1); p != 0 {
		t.Fatalf("setup: a's small request at priority %d, want 0", p)
	}
	big := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 600, ""))
	if held(big) {
		t.Fatal("a's 600-token request held, want it to go on the pool's free tokens")
	}
	if p := priority(t, big); p < 10 {
		t.Errorf("a's request on borrowed tokens at priority %d, want a borrower's (10 or more)", p)
	}
	respondJSON(big, 5, 3)
	if v, _ := header(big.ResponseHeaderMap(), "x-fairshare-borrowing"); v != "true" {
		t.Errorf("x-fairshare-borrowing = %q, want true for a request on borrowed tokens", v)
	}
	respondJSON(a1, 5, 3)
	if v, _ := header(a1.ResponseHeaderMap(), "x-fairshare-borrowing"); v != "false" {
		t.Errorf("x-fairshare-borrowing = %q for a within-share request, want false", v)
	}
	checkIdle(t, h, "p")
}

func TestWasmFlowThroughputBinds(t *testing.T) {
	// 8 sequences but a throughput of 100 cost units a second, in buckets
	// of 1 s: a and b each reserve 50 units/s, a bucket of 50. a's first
	// request (a short prompt + 2 × 100 max_tokens, no completion learnt
	// yet) runs within share (an empty debt always lets one through); the
	// team then owes more than its bucket holds, so its next request, on
	// another VM, borrows although sequences are free, while b's runs
	// within share. The response's usage settles a's debt to what the
	// request cost, the rest is paid down at a's rate, and a's next
	// request is within share again.
	cfg := strings.Replace(flowConfig, `"capacity":2`, `"capacity":8,"throughput":100,"throughput_burst":"1s"`, 1)
	h, _ := start(t, cfg, 2)
	s1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 100, ""))
	if p := priority(t, s1); p != 0 {
		t.Fatalf("a's first request got priority %d, want 0 (within share)", p)
	}
	a := gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a")`)
	if a.Get("reserved_work").Int() != 50 || a.Get("work_burst").Float() != 50 || a.Get("work_debt").Float() < 200 {
		t.Fatalf("status of a after one request: %s; want reserved_work 50, work_burst 50, work_debt >= 200", a.Raw)
	}
	if x := gjson.Get(statusBody(t, h), "pools.0.throughput").Int(); x != 100 {
		t.Errorf("status throughput = %d, want 100", x)
	}
	s2 := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 100, ""))
	if p := priority(t, s2); p < 10 {
		t.Errorf("a's second request (VM 1) got priority %d, want a borrower's (>= 10): its team's work bucket is empty", p)
	}
	s3 := request(h, 1, "/v1/chat/completions", team("b"), chat("m", 100, ""))
	if p := priority(t, s3); p != 0 {
		t.Errorf("b's request got priority %d, want 0: a's debt is a's", p)
	}
	respondJSON(s1, 5, 5) // cost 5 + 2·5 = 15: the debt settles to it
	a = gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a")`)
	if d := a.Get("work_debt").Float(); d < 14 || d > 15 {
		t.Errorf("a's work_debt after its request reported 15 units = %v, want 15 (less what was paid down)", d)
	}
	h.Advance(time.Second) // 50 units paid down: nothing owed
	s4 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 100, ""))
	if p := priority(t, s4); p != 0 {
		t.Errorf("a's request after its debt was paid got priority %d, want 0", p)
	}
	respondJSON(s2, 5, 5)
	respondJSON(s3, 5, 5)
	respondJSON(s4, 5, 5)
	checkIdle(t, h, "p")
}
