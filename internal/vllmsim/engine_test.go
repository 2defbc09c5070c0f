package vllmsim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// harness drives one engine step by step, checking the invariants after
// every schedule and apply.
type harness struct {
	t       *testing.T
	e       *engine
	now     time.Time
	steps   int
	admitAt map[*seq]int // step of first admission
	tokens  map[*seq][]int
	recs    map[*seq]Record

	waitingPreemptions int // preemptions on behalf of a waiting request
}

func newHarness(t *testing.T, cfg EngineConfig) *harness {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, e: newEngine(cfg, 0), now: SimEpoch,
		admitAt: map[*seq]int{}, tokens: map[*seq][]int{}, recs: map[*seq]Record{}}
}

func (h *harness) add(name string, prio int64, prompt, maxOut int) *seq {
	s := &seq{id: name, priority: prio, prompt: prompt, maxOut: maxOut}
	h.e.add(s, h.now)
	h.now = h.now.Add(time.Millisecond) // distinct arrivals
	return s
}

// step runs one schedule() (and the step, if anything was scheduled) and
// reports whether it preempted and whom it admitted.
func (h *harness) step() (preempted bool, admitted []*seq) {
	h.t.Helper()
	e := h.e
	before := map[*seq]bool{}
	for _, s := range e.running {
		before[s] = true
	}
	pre := e.m.preemptions
	preempted = e.scheduleOnce(h.now)
	if !preempted {
		h.waitingPreemptions += int(e.m.preemptions - pre)
	}
	for _, s := range e.running {
		if !before[s] {
			admitted = append(admitted, s)
		}
	}
	h.check("schedule")
	h.steps++
	h.drain()
	if len(e.scheduled) == 0 {
		return preempted, admitted
	}
	h.now = h.now.Add(e.stepTime())
	e.apply(h.now)
	h.check("apply")
	h.drain()
	return preempted, admitted
}

func (h *harness) drain() {
	for _, ev := range h.e.takeEvents(nil) {
		switch ev.kind {
		case evAdmit:
			h.admitAt[ev.s] = h.steps
		case evToken:
			h.tokens[ev.s] = append(h.tokens[ev.s], ev.k)
		case evFinish:
			h.recs[ev.s] = *ev.rec
		}
	}
}

func (h *harness) runUntilIdle(maxSteps int) {
	h.t.Helper()
	for i := 0; h.e.hasWork(); i++ {
		if i == maxSteps {
			h.t.Fatalf("engine still busy after %d steps", maxSteps)
		}
		h.step()
	}
}

// check verifies the engine's invariants.
func (h *harness) check(where string) {
	h.t.Helper()
	e := h.e
	used, budget := 0, 0
	seen := map[*seq]bool{}
	if len(e.running) > e.cfg.MaxNumSeqs {
		h.t.Fatalf("%s: %d running > max_num_seqs %d", where, len(e.running), e.cfg.MaxNumSeqs)
	}
	for _, s := range e.running {
		if seen[s] || s.state != stRunning {
			h.t.Fatalf("%s: running entry %s duplicated or in state %d", where, s.id, s.state)
		}
		seen[s] = true
		used += s.blocks
		if s.blocks < e.blocksFor(s.computed+s.sched) {
			h.t.Fatalf("%s: %s holds %d blocks for %d tokens", where, s.id, s.blocks, s.computed+s.sched)
		}
		budget += s.sched
	}
	for _, s := range e.scheduled {
		if !seen[s] {
			h.t.Fatalf("%s: scheduled %s is not running", where, s.id)
		}
	}
	if budget > e.cfg.MaxBatchedTokens {
		h.t.Fatalf("%s: %d tokens scheduled > budget %d", where, budget, e.cfg.MaxBatchedTokens)
	}
	if used != e.used || used > e.usable {
		h.t.Fatalf("%s: running hold %d blocks, engine counts %d of %d", where, used, e.used, e.usable)
	}
	var w []*seq
	if e.waiting.prio {
		w = e.waiting.h
	} else {
		w = e.waiting.d[e.waiting.head:]
	}
	for _, s := range w {
		if seen[s] || s.state != stWaiting || s.blocks != 0 || s.computed != 0 {
			h.t.Fatalf("%s: waiting %s in state %d with %d blocks, %d computed", where, s.id, s.state, s.blocks, s.computed)
		}
		seen[s] = true
	}
}

// tightConfig has room for exactly blocks KV blocks.
func tightConfig(policy Policy, blocks int) EngineConfig {
	c := TestConfig()
	c.Policy = policy
	c.NumBlocks = blocks + 1
	c.MaxModelLen = min(512, blocks*c.BlockSize)
	c.MaxBatchedTokens = 1024
	return c
}

// TestPriorityNeverPreemptsOnArrival: a high-priority arrival waits for a
// slot (max_num_seqs) or for KV blocks; it does not preempt.
func TestPriorityNeverPreemptsOnArrival(t *testing.T) {
	t.Run("max_num_seqs", func(t *testing.T) {
		h := newHarness(t, TestConfig()) // 4 seqs
		var low []*seq
		for i := range 4 {
			low = append(low, h.add(fmt.Sprint("low", i), 10, 20, 30+i))
		}
		h.step()
		high := h.add("high", -100, 20, 5)
		later := h.add("low-later", 10, 20, 5)
		h.runUntilIdle(1000)
		if p := h.e.m.preemptions; p != 0 {
			t.Fatalf("preemptions = %d, want 0", p)
		}
		firstFree := h.recs[low[0]].Finished
		if got := h.recs[high].Admitted; got.Before(firstFree) {
			t.Errorf("high admitted at %v, before the first slot freed at %v", got, firstFree)
		}
		if !h.recs[high].Admitted.Before(h.recs[later].Admitted) {
			t.Errorf("high admitted at %v, not before the later low request (%v)", h.recs[high].Admitted, h.recs[later].Admitted)
		}
	})
	t.Run("kv", func(t *testing.T) {
		h := newHarness(t, tightConfig(Priority, 63))
		// Two requests of 390+10 tokens hold 25 blocks each and never grow.
		a := h.add("a", 10, 390, 10)
		h.add("b", 10, 390, 10)
		h.step()
		high := h.add("high", -100, 300, 5) // 19 blocks > 13 free
		h.runUntilIdle(1000)
		if p := h.e.m.preemptions; p != 0 {
			t.Fatalf("preemptions = %d, want 0", p)
		}
		if got, free := h.recs[high].Admitted, h.recs[a].Finished; got.Before(free) {
			t.Errorf("high admitted at %v, before blocks freed at %v", got, free)
		}
	})
}

// TestHeadOfLineBlocking: the waiting head that does not fit blocks smaller
// requests behind it, under both policies.
func TestHeadOfLineBlocking(t *testing.T) {
	for _, pol := range []Policy{Priority, FCFS} {
		t.Run(string(pol), func(t *testing.T) {
			h := newHarness(t, tightConfig(pol, 63))
			a := h.add("a", 5, 390, 10) // 25 blocks
			h.add("b", 5, 390, 10)      // 25 blocks
			h.step()
			big := h.add("big", 0, 300, 5) // 19 blocks: does not fit in 13
			small := h.add("small", 1, 16, 5)
			for range 5 {
				h.step()
				if small.state != stWaiting {
					t.Fatalf("small admitted ahead of the blocked head (state %d)", small.state)
				}
			}
			h.runUntilIdle(1000)
			if !h.recs[small].Admitted.After(h.recs[big].Admitted) && !h.recs[small].Admitted.Equal(h.recs[big].Admitted) {
				t.Errorf("small admitted at %v, before big at %v", h.recs[small].Admitted, h.recs[big].Admitted)
			}
			if h.recs[big].Admitted.Before(h.recs[a].Finished) {
				t.Errorf("big admitted before blocks were freed")
			}
		})
	}
}

// victimSetup admits A (prio 5), B (prio 9), C (prio 1) in that order, each
// filling exactly 4 of 12 blocks, so that the first decode needs a block.
func victimSetup(t *testing.T, pol Policy) (*harness, [3]*seq) {
	h := newHarness(t, tightConfig(pol, 12))
	a := h.add("A", 5, 64, 20)
	b := h.add("B", 9, 64, 20)
	c := h.add("C", 1, 64, 20)
	if pre, adm := h.step(); pre || len(adm) != 3 {
		t.Fatalf("first step: preempted %v, admitted %d, want false, 3", pre, len(adm))
	}
	return h, [3]*seq{a, b, c}
}

func TestVictim(t *testing.T) {
	tests := []struct {
		policy Policy
		victim int
	}{
		{Priority, 1}, // max (priority, arrival): B, priority 9
		{FCFS, 2},     // the last admitted: C
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			h, s := victimSetup(t, tt.policy)
			pre, adm := h.step()
			if !pre || len(adm) != 0 {
				t.Fatalf("second step: preempted %v, admitted %d, want true, 0", pre, len(adm))
			}
			for i, q := range s {
				want := 0
				if i == tt.victim {
					want = 1
				}
				if q.preemptions != want {
					t.Errorf("%s preemptions = %d, want %d", q.id, q.preemptions, want)
				}
			}
		})
	}
}

// TestPriorityVictimTies: equal priorities, the victim is the latest
// arrival; equal (priority, arrival), the first in admission order.
func TestPriorityVictimTies(t *testing.T) {
	h := newHarness(t, tightConfig(Priority, 12))
	a := h.add("A", 3, 64, 20)
	b := h.add("B", 3, 64, 20)
	c := h.add("C", 3, 64, 20)
	c.arrival = b.arrival // tie on (priority, arrival): B is first in running order
	h.step()
	h.step()
	if a.preemptions != 0 || b.preemptions != 1 || c.preemptions != 0 {
		t.Errorf("preemptions A,B,C = %d,%d,%d, want 0,1,0", a.preemptions, b.preemptions, c.preemptions)
	}
}

// TestNoAdmissionInPreemptingStep: in the step that preempts, nothing is
// admitted even though blocks were freed; the waiting head is admitted in
// the next step.
func TestNoAdmissionInPreemptingStep(t *testing.T) {
	h, s := victimSetup(t, Priority)
	w := h.add("W", -1, 10, 5) // fits in the blocks freed by the victim
	pre, adm := h.step()
	if !pre || len(adm) != 0 {
		t.Fatalf("preempting step: preempted %v, admitted %v", pre, adm)
	}
	if s[1].state != stWaiting || w.state != stWaiting {
		t.Fatalf("victim state %d, W state %d, want both waiting", s[1].state, w.state)
	}
	pre, adm = h.step()
	if pre || len(adm) != 1 || adm[0] != w {
		t.Fatalf("next step: preempted %v, admitted %v, want W", pre, adm)
	}
}

// TestPreemptedKeepsPriorityAndRecomputes: the victim keeps its priority
// and arrival, goes back ahead of newer requests of equal priority, and
// resumes by recomputing prompt and generated tokens; usage counts each
// output token once.
func TestPreemptedKeepsPriorityAndRecomputes(t *testing.T) {
	h, s := victimSetup(t, Priority)
	b := s[1]
	prio, arrival := b.priority, b.arrival
	newer := h.add("newer", 9, 16, 5) // same priority as B, later arrival
	h.step()                          // preempts B
	if b.preemptions != 1 {
		t.Fatalf("B not preempted")
	}
	generatedAtPreemption := b.generated
	h.runUntilIdle(2000)
	rb := h.recs[b]
	if rb.Priority != prio || !rb.Arrival.Equal(arrival) {
		t.Errorf("B record priority %d arrival %v, want %d %v", rb.Priority, rb.Arrival, prio, arrival)
	}
	if rb.CompletionTokens != 20 || !slices.Equal(h.tokens[b], seqInts(1, 20)) {
		t.Errorf("B completion tokens %d, token indexes %v, want 20 tokens 1..20", rb.CompletionTokens, h.tokens[b])
	}
	// Without preemption: 64 prompt + 19 decode tokens computed. The
	// resume recomputes the 64 + generatedAtPreemption − 1 tokens computed
	// before (the last generated token was not computed yet).
	want := 64 + 19 + 64 + generatedAtPreemption - 1
	if rb.Preemptions != 1 || rb.ComputedTokens != want {
		t.Errorf("B preemptions %d computed %d, want 1 and %d", rb.Preemptions, rb.ComputedTokens, want)
	}
	if !h.recs[newer].Admitted.After(rb.Finished) && h.recs[newer].Admitted.Before(rb.Admitted) {
		t.Errorf("newer request admitted before the preempted one resumed")
	}
	if !firstResumeBefore(h, b, newer) {
		t.Errorf("the preempted request did not resume ahead of the newer equal-priority request")
	}
}

// firstResumeBefore reports whether b got its token after preemption before
// newer got its first token.
func firstResumeBefore(h *harness, b, newer *seq) bool {
	return h.recs[b].Finished.Before(h.recs[newer].FirstToken) || h.recs[newer].FirstToken.After(h.recs[b].FirstToken)
}

func seqInts(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestWaitingPreempt(t *testing.T) {
	setup := func(t *testing.T, mode WaitingPreempt) (*harness, *seq, *seq, *seq) {
		cfg := TestConfig()
		cfg.MaxNumSeqs = 2
		cfg.WaitingPreempt = mode
		h := newHarness(t, cfg)
		a := h.add("A", 5, 20, 200)
		b := h.add("B", 5, 20, 200)
		h.step()
		h.step()
		hi := h.add("HI", 0, 20, 5)
		return h, a, b, hi
	}
	t.Run("off", func(t *testing.T) {
		h, _, _, hi := setup(t, WaitingPreemptOff)
		for range 20 {
			h.step()
		}
		if hi.state != stWaiting || h.e.m.preemptions != 0 {
			t.Errorf("HI state %d, preemptions %d; want waiting, 0", hi.state, h.e.m.preemptions)
		}
	})
	for _, mode := range []WaitingPreempt{WaitingPreempt45561, WaitingPreempt54530} {
		t.Run(string(mode), func(t *testing.T) {
			h, a, b, hi := setup(t, mode)
			pre, adm := h.step()
			if pre || len(adm) != 1 || adm[0] != hi || h.waitingPreemptions != 1 {
				t.Fatalf("step: admitted %v, want HI", ids(adm))
			}
			if a.preemptions != 0 || b.preemptions != 1 || b.state != stWaiting {
				t.Errorf("preemptions A %d, B %d (state %d); want B, the later arrival, preempted", a.preemptions, b.preemptions, b.state)
			}
			// An equal-priority request never preempts.
			same := h.add("same", 5, 20, 5)
			for range 3 {
				h.step()
			}
			if same.state != stWaiting || a.preemptions != 0 {
				t.Errorf("equal priority request: state %d, A preemptions %d", same.state, a.preemptions)
			}
		})
	}
	// A waiting request of equal priority but earlier arrival (a preempted
	// one) preempts under #45561, not under #54530.
	for _, tt := range []struct {
		mode WaitingPreempt
		want int
	}{{WaitingPreempt45561, 1}, {WaitingPreempt54530, 0}} {
		t.Run("earlier-arrival/"+string(tt.mode), func(t *testing.T) {
			cfg := TestConfig()
			cfg.MaxNumSeqs = 1
			cfg.WaitingPreempt = tt.mode
			h := newHarness(t, cfg)
			r := h.add("running", 5, 20, 50)
			h.step()
			w := h.add("resumed", 5, 20, 50)
			w.arrival = SimEpoch.Add(-time.Second)
			h.step()
			if r.preemptions != tt.want {
				t.Errorf("running preemptions = %d, want %d", r.preemptions, tt.want)
			}
		})
	}
	t.Run("fcfs-ignores", func(t *testing.T) {
		cfg := TestConfig()
		cfg.Policy = FCFS
		cfg.MaxNumSeqs = 1
		cfg.WaitingPreempt = WaitingPreempt45561
		h := newHarness(t, cfg)
		h.add("running", 5, 20, 50)
		h.step()
		h.add("hi", 0, 20, 5)
		h.step()
		if h.e.m.preemptions != 0 {
			t.Errorf("preemptions = %d under fcfs, want 0", h.e.m.preemptions)
		}
	})
}

// TestRandomInvariants runs random workloads on tight engines, checking the
// invariants, that a preempting step admits nothing, and that every request
// finishes with its tokens counted once.
func TestRandomInvariants(t *testing.T) {
	for _, pol := range []Policy{Priority, FCFS} {
		for _, wp := range []WaitingPreempt{WaitingPreemptOff, WaitingPreempt45561} {
			t.Run(fmt.Sprintf("%s/%s", pol, cmp.Or(string(wp), "off")), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, uint64(len(pol))))
				cfg := tightConfig(pol, 70)
				cfg.MaxNumSeqs = 4
				cfg.MaxBatchedTokens = 256
				cfg.WaitingPreempt = wp
				h := newHarness(t, cfg)
				var all []*seq
				preemptingSteps := 0
				for i := range 3000 {
					if i < 2000 && rng.IntN(10) == 0 {
						all = append(all, h.add(fmt.Sprint(i), int64(rng.IntN(4)), 1+rng.IntN(300), 1+rng.IntN(150)))
					}
					if i%97 == 0 && len(all) > 0 {
						h.e.abort(all[rng.IntN(len(all))], h.now)
						h.check("abort")
						h.drain()
					}
					pre, adm := h.step()
					if pre {
						preemptingSteps++
						if len(adm) != 0 {
							t.Fatalf("step %d preempted and admitted %d", i, len(adm))
						}
					}
				}
				h.runUntilIdle(100000)
				if preemptingSteps == 0 {
					t.Errorf("no preemption happened; the workload is too light")
				}
				if (h.waitingPreemptions > 0) != (wp != WaitingPreemptOff && pol == Priority) {
					t.Errorf("%d preemptions for waiting requests", h.waitingPreemptions)
				}
				for _, s := range all {
					r, ok := h.recs[s]
					if !ok {
						t.Fatalf("%s never finished", s.id)
					}
					if r.FinishReason != FinishAbort && (r.CompletionTokens != s.maxOut || !slices.Equal(h.tokens[s], seqInts(1, s.maxOut))) {
						t.Fatalf("%s: %d tokens (%v), want %d", s.id, r.CompletionTokens, h.tokens[s], s.maxOut)
					}
				}
				if h.e.used != 0 {
					t.Errorf("%d blocks still used when idle", h.e.used)
				}
			})
		}
	}
}

func TestChunkedPrefill(t *testing.T) {
	h := newHarness(t, TestConfig()) // budget 256
	s := h.add("long", 0, 500, 3)
	h.step()
	if s.computed != 256 || s.generated != 0 {
		t.Fatalf("after one step: computed %d generated %d, want 256 0", s.computed, s.generated)
	}
	h.step()
	if s.computed != 500 || s.generated != 1 {
		t.Fatalf("after two steps: computed %d generated %d, want 500 1", s.computed, s.generated)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []EngineConfig{DefaultConfig(), TestConfig(), DemoConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("preset invalid: %v", err)
		}
	}
	bad := TestConfig()
	bad.MaxModelLen = 4096
	bad.Policy = "lifo"
	if err := bad.Validate(); err == nil {
		t.Errorf("Validate accepted %+v", bad)
	}
}

func ids(ss []*seq) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.id)
	}
	return out
}
