package plugin_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/tidwall/gjson"
)

// Shared-data failures, injected with the host's Options.SharedDataFault:
// failure_mode "open" forwards at the lowest borrowing priority and counts
// it, "closed" answers 503; exhausted compare-and-swap retries behave the
// same; nothing the failed requests did leaks a slot once the store works
// again.

// faults is a switchable SharedDataFault: the status every guest get (set)
// of a key under prefix answers, StatusOK for none, and the number of
// faulted calls. crashVM+1 names a VM whose next shared-data call traps.
type faults struct {
	prefix         string
	get, set       atomic.Uint32
	gets, sets     atomic.Int64
	crashVM        atomic.Int32
	crashed        atomic.Bool
	recordSetCalls atomic.Int64 // set calls on pool records, faulted or not
	// conflictEvery > 0 makes every conflictEvery-th set of a pool record
	// fail with a CAS mismatch, as a concurrent writer would.
	conflictEvery atomic.Int64
}

func (f *faults) hook(vm int, op, key string) hostcalls.Status {
	if c := f.crashVM.Load(); c > 0 && vm == int(c-1) {
		f.crashed.Store(true)
		panic(fmt.Sprintf("injected crash of VM %d", vm))
	}
	if !strings.HasPrefix(key, f.prefix) {
		return hostcalls.StatusOK
	}
	switch op {
	case host.SharedDataGet:
		if st := hostcalls.Status(f.get.Load()); st != hostcalls.StatusOK {
			f.gets.Add(1)
			return st
		}
	case host.SharedDataSet:
		if strings.Contains(key, "/fairshare/pool/") {
			n := f.recordSetCalls.Add(1)
			if e := f.conflictEvery.Load(); e > 0 && n%e == 0 {
				f.sets.Add(1)
				return hostcalls.StatusCASMismatch
			}
		}
		if st := hostcalls.Status(f.set.Load()); st != hostcalls.StatusOK {
			f.sets.Add(1)
			return st
		}
	}
	return hostcalls.StatusOK
}

// lift ends every injected failure.
func (f *faults) lift() {
	f.get.Store(uint32(hostcalls.StatusOK))
	f.set.Store(uint32(hostcalls.StatusOK))
}

// startFaulty starts the plugin on vms VMs on a virtual clock with a fault
// hook on the shared-data keys starting with prefix (no fault until one is
// switched on).
func startFaulty(t testing.TB, cfg string, vms int, prefix string) (*host.Host, *faults) {
	t.Helper()
	return startFaultyOpts(t, cfg, vms, prefix, nil)
}

// startFaultyOpts is startFaulty with the host options changed by opt
// (nil: none).
func startFaultyOpts(t testing.TB, cfg string, vms int, prefix string, opt func(*host.Options)) (*host.Host, *faults) {
	t.Helper()
	f := &faults{prefix: prefix}
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	o := host.Options{
		Profile: hostProfile,
		VMs:     vms, PluginName: pluginName, VMID: fmt.Sprintf("%s-%p", t.Name(), t), PluginConfig: []byte(cfg),
		Clock: clock, Seed: 11, SharedDataFault: f.hook,
	}
	if opt != nil {
		opt(&o)
	}
	h, err := compiled(t).Start(context.Background(), o)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	noHostErrors(t, h)
	return h, f
}

// metric returns the value of a metric (0 if never defined).
func metric(h *host.Host, name string) int64 { return h.Metrics()[name].Value }

// wantMetrics checks metric values.
func wantMetrics(t *testing.T, h *host.Host, want map[string]int64) {
	t.Helper()
	m := h.Metrics()
	for name, v := range want {
		if got := m[name].Value; got != v {
			t.Errorf("metric %s = %d, want %d", name, got, v)
		}
	}
}

// lowestBorrowingPriority is the largest priority a granted borrower of
// class c can get (fairshare's priority layout: rank capped at MaxRank).
func lowestBorrowingPriority(c fairshare.Class) int {
	return fairshare.BorrowBase + fairshare.MaxRank*fairshare.RankStep + int(c)
}

// failConfig is testConfig with a failure mode and few CAS retries.
func failConfig(mode string) string {
	return strings.Replace(testConfig, `"tick": "1s"`, `"tick": "1s", "cas_retries": 3, "failure_mode": "`+mode+`"`, 1)
}

// TestWasmFailOpenForwardsAtLowestPriority: failure_mode "open" with every
// shared-data read failing: each request is forwarded (no local reply) at
// the lowest borrowing priority of its class, marked borrowing in the
// response headers, and counted in failures_total and failed_open_total,
// not as a scheduled request.
func TestWasmFailOpenForwardsAtLowestPriority(t *testing.T) {
	h, f := startFaulty(t, failConfig("open"), 2, pluginName+"/")
	f.get.Store(uint32(hostcalls.StatusInternalFailure))

	// The doc's priority layout: rank 9 borrowers get 100 (interactive)
	// and 101 (batch), the largest priorities the pool ever grants.
	if lowestBorrowingPriority(fairshare.Interactive) != 100 || lowestBorrowingPriority(fairshare.Batch) != 101 {
		t.Fatalf("lowest borrowing priorities %d, %d; the fairshare doc says 100 and 101",
			lowestBorrowingPriority(fairshare.Interactive), lowestBorrowingPriority(fairshare.Batch))
	}
	for i, tc := range []struct {
		vm    int
		team  string
		class fairshare.Class
		named string // the team the headers name: "_unknown" for z, whom the pool does not list
	}{{0, "a", fairshare.Interactive, "a"}, {1, "b", fairshare.Batch, "b"}, {0, "z", fairshare.Interactive, "_unknown"}} {
		hdrs := [][2]string{{"x-team", tc.team}}
		if tc.class == fairshare.Batch {
			hdrs = append(hdrs, [2]string{"x-request-class", "batch"})
		}
		s := request(h, tc.vm, "/v1/chat/completions", hdrs, chat("m", 10, ""))
		if lr := s.LocalReply(); lr != nil {
			t.Fatalf("request %d: local reply %d %s under failure_mode open", i, lr.Status, lr.Body)
		}
		want := lowestBorrowingPriority(tc.class)
		if got := priority(t, s); got != want {
			t.Errorf("request %d (%s, %s): forwarded priority %d, want %d", i, tc.team, tc.class, got, want)
		}
		if got := gjson.GetBytes(s.ForwardedRequestBody(), "messages.0.content").Str; got != "hello there" {
			t.Errorf("request %d: forwarded body lost its messages: %s", i, s.ForwardedRequestBody())
		}
		respondJSON(s, 5, 3)
		resp := s.ResponseHeaderMap()
		for k, v := range map[string]string{"x-fairshare-team": tc.named, "x-fairshare-pool": "small",
			"x-fairshare-priority": fmt.Sprint(want), "x-fairshare-borrowing": "true"} {
			if got, _ := header(resp, k); got != v {
				t.Errorf("request %d: response header %s = %q, want %q", i, k, got, v)
			}
		}
	}
	if f.gets.Load() == 0 {
		t.Fatal("no shared-data read was faulted")
	}
	wantMetrics(t, h, map[string]int64{
		"fairshare.pool.small.failures_total":                                                    6, // 3 acquires, 3 charges kept for the tick
		"fairshare.pool.small.failed_open_total":                                                 3,
		"fairshare.pool.small.rejected_unavailable_total":                                        0,
		"fairshare.pool.small.team.a.class.interactive.standing.within.requests_total":           0,
		"fairshare.pool.small.team.a.class.interactive.standing.borrowing.requests_total":        0,
		"fairshare.pool.small.team.b.class.batch.standing.borrowing.requests_total":              0,
		"fairshare.pool.small.team._unknown.class.interactive.standing.borrowing.requests_total": 0,
	})
	// The failed requests held no slot: with the store back nothing is in
	// flight, and the usage they reported (prompt 5 + 2 × completion 3,
	// kept while the store was down) is charged on the next tick.
	f.lift()
	h.Advance(time.Second)
	checkIdle(t, h, "small", "rest")
	want := map[string]float64{"a": 11, "b": 11, fairshare.UnknownTeam: 11} // the core's record (teamStats), not the plugin's outputs
	for team, st := range teamStats(t, h, "small") {
		// Usage decays with the 168h half-life over the second advanced.
		if math.Abs(st.Usage-want[team]) > 1e-3 {
			t.Errorf("team %s usage %v after fail-open requests, want %v (their reported usage)", team, st.Usage, want[team])
		}
	}
}

// TestWasmFailClosedAnswers503: failure_mode "closed" with every
// shared-data read failing: the request is answered 503 with an
// OpenAI-style JSON error, not forwarded, and counted.
func TestWasmFailClosedAnswers503(t *testing.T) {
	h, f := startFaulty(t, failConfig("closed"), 2, pluginName+"/")
	f.get.Store(uint32(hostcalls.StatusInternalFailure))
	for vm := 0; vm < 2; vm++ {
		s := request(h, vm, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
		jsonError(t, s, 503)
		if lr := s.LocalReply(); lr != nil {
			if typ := gjson.GetBytes(lr.Body, "error.type").Str; typ != "service_unavailable" {
				t.Errorf("503 error type %q, want service_unavailable", typ)
			}
		}
		if b := s.ForwardedRequestBody(); len(b) != 0 {
			t.Errorf("VM %d: request forwarded under failure_mode closed: %s", vm, b)
		}
		s.Complete()
	}
	wantMetrics(t, h, map[string]int64{
		"fairshare.pool.small.failures_total":             2,
		"fairshare.pool.small.rejected_unavailable_total": 2,
		"fairshare.pool.small.failed_open_total":          0,
	})
	f.lift()
	checkIdle(t, h, "small")
	// The store is back: the next request is scheduled within share.
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if got := priority(t, s); got != 0 {
		t.Errorf("priority after the store recovered = %d, want 0", got)
	}
	respondJSON(s, 5, 3)
	checkIdle(t, h, "small")
}

// TestWasmExhaustedCASRetries: every write of a pool record loses its
// compare-and-swap: the plugin retries cas_retries times (counted in
// cas_retries_total), then counts a failure and applies failure_mode.
func TestWasmExhaustedCASRetries(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			h, f := startFaulty(t, failConfig(mode), 1, pluginName+"/fairshare/pool/")
			before := f.recordSetCalls.Load()
			retriesBefore := metric(h, "fairshare.pool.small.cas_retries_total")
			f.set.Store(uint32(hostcalls.StatusCASMismatch))
			s := request(h, 0, "/v1/completions", [][2]string{{"x-team", "b"}}, `{"model":"m","prompt":"hello"}`)
			if n := f.recordSetCalls.Load() - before; n != 3+1 {
				t.Errorf("record writes tried %d, want cas_retries + 1 = 4", n)
			}
			if d := metric(h, "fairshare.pool.small.cas_retries_total") - retriesBefore; d != 3 {
				t.Errorf("cas_retries_total grew by %d, want 3", d)
			}
			if v := metric(h, "fairshare.pool.small.failures_total"); v != 1 {
				t.Errorf("failures_total = %d, want 1", v)
			}
			if mode == "closed" {
				jsonError(t, s, 503)
				wantMetrics(t, h, map[string]int64{"fairshare.pool.small.rejected_unavailable_total": 1, "fairshare.pool.small.failed_open_total": 0})
				s.Complete()
			} else {
				if lr := s.LocalReply(); lr != nil {
					t.Fatalf("local reply %d under failure_mode open", lr.Status)
				}
				if got := priority(t, s); got != lowestBorrowingPriority(fairshare.Interactive) {
					t.Errorf("priority %d, want %d", got, lowestBorrowingPriority(fairshare.Interactive))
				}
				wantMetrics(t, h, map[string]int64{"fairshare.pool.small.failed_open_total": 1, "fairshare.pool.small.rejected_unavailable_total": 0})
				respondJSON(s, 2, 2)
			}
			f.lift()
			checkIdle(t, h, "small")
		})
	}
}

// TestWasmFailureLeaksNothing: requests granted before a failure, failed
// open during it, and released during it (the release is kept and
// retried on the next tick): once the store works again the next requests
// are scheduled normally, a failed-open request ending releases nothing
// (it never held a slot), and when every stream has ended nothing is in
// flight and the charged usage is exactly the usage the granted requests
// reported.
func TestWasmFailureLeaksNothing(t *testing.T) {
	// No decay, so that usage is exactly the sum of what was charged.
	cfg := strings.Replace(failConfig("open"), `"tick"`, `"half_life": "0s", "tick"`, 1)
	h, f := startFaulty(t, cfg, 2, pluginName+"/")

	// Before the failure: a holds its two reserved slots (VM 0 and 1).
	g1 := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	g2 := request(h, 1, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p1, p2 := priority(t, g1), priority(t, g2); p1 != 0 || p2 != 0 {
		t.Fatalf("setup: priorities %d, %d, want 0 (within share)", p1, p2)
	}

	// The store fails: reads and writes.
	f.get.Store(uint32(hostcalls.StatusInternalFailure))
	f.set.Store(uint32(hostcalls.StatusInternalFailure))
	open1 := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	open2 := request(h, 1, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 10, ""))
	for _, s := range []*host.Stream{open1, open2} {
		if got := priority(t, s); got != lowestBorrowingPriority(fairshare.Interactive) {
			t.Errorf("failed-open priority %d, want %d", got, lowestBorrowingPriority(fairshare.Interactive))
		}
	}
	respondJSON(g1, 10, 4)   // its release fails: kept for the next tick
	respondJSON(open2, 7, 7) // failed open: nothing to release
	h.Advance(time.Second)   // the retry on the tick fails too
	if v := metric(h, "fairshare.pool.small.failures_total"); v < 4 {
		t.Errorf("failures_total = %d, want at least 4 (2 acquires, 1 release, its retry)", v)
	}

	// The store is back.
	f.lift()
	if st := teamStats(t, h, "small")["a"]; st.InFlight != 2 {
		t.Fatalf("a in flight %d before the retried release, want 2 (g1's release is pending)", st.InFlight)
	}
	h.Advance(time.Second) // the tick retries g1's release
	st := teamStats(t, h, "small")
	if st["a"].InFlight != 1 || st["b"].InFlight != 0 {
		t.Errorf("after the retried release: a in flight %d, b %d; want 1 (g2) and 0", st["a"].InFlight, st["b"].InFlight)
	}
	// A failed-open request ending now must not release g2's slot.
	respondJSON(open1, 3, 3)
	if st := teamStats(t, h, "small")["a"]; st.InFlight != 1 {
		t.Errorf("a in flight %d after a failed-open request ended, want 1: it released a slot it never held", st.InFlight)
	}
	// The next requests are scheduled normally: a is within its share
	// again (g2 and this one), b too.
	n1 := request(h, 1, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	n2 := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 10, ""))
	if p1, p2 := priority(t, n1), priority(t, n2); p1 != 0 || p2 != 0 {
		t.Errorf("priorities after recovery a %d b %d, want 0 and 0 (within share)", p1, p2)
	}
	if st := teamStats(t, h, "small"); st["a"].InFlight != 2 || st["b"].InFlight != 1 {
		t.Errorf("in flight after recovery a %d b %d, want 2 and 1", st["a"].InFlight, st["b"].InFlight)
	}
	respondJSON(g2, 2, 1)
	respondJSON(n1, 6, 2)
	respondJSON(n2, 4, 4)
	h.Advance(time.Second)
	checkIdle(t, h, "small", "rest")
	// Charged: every request's reported usage (prompt + 2 × completion),
	// the failed-open ones included: they held no grant, but what they
	// consumed is charged to their team.
	st = teamStats(t, h, "small")
	wantA := float64(10+2*4) + float64(2+2*1) + float64(6+2*2) + float64(3+2*3)
	wantB := float64(4+2*4) + float64(7+2*7)
	if math.Abs(st["a"].Usage-wantA) > 1e-6 || math.Abs(st["b"].Usage-wantB) > 1e-6 {
		t.Errorf("usage a %v b %v, want %v and %v", st["a"].Usage, st["b"].Usage, wantA, wantB)
	}
	if v := metric(h, "fairshare.pool.small.in_flight"); v != 0 {
		t.Errorf("in_flight gauge = %d, want 0", v)
	}
}
