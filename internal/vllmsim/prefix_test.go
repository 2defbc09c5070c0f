package vllmsim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The tests here port vLLM's own prefix-caching tests to the engine:
// tests/v1/core/test_prefix_caching.py (vllm-project/vllm at 717aebb0),
// tests/v1/core/test_scheduler.py (619e4b31) and
// tests/v1/core/test_async_scheduler.py (65d265fe). vLLM's tests call
// get_computed_blocks, allocate_slots and free on a KVCacheManager; here a
// request is added to the waiting queue and one schedule() admits it (that
// is lookup then allocation), and free is an abort. Block ids are vLLM's:
// the pool starts as the free queue 1..NumBlocks−1 (block 0 is the null
// block).

// pcHarness drives one engine with prefix caching, checking the pool's
// invariants after every operation.
type pcHarness struct {
	t   *testing.T
	e   *engine
	now time.Time
}

func newPCHarness(t *testing.T, numBlocks, blockSize int, caching bool) *pcHarness {
	t.Helper()
	cfg := TestConfig()
	cfg.NumBlocks, cfg.BlockSize = numBlocks, blockSize
	cfg.MaxModelLen = min(8192, (numBlocks-1)*blockSize)
	cfg.MaxBatchedTokens = 8192
	cfg.MaxNumSeqs = 64
	cfg.EnablePrefixCaching = caching
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &pcHarness{t: t, e: newEngine(cfg, 0), now: SimEpoch}
}

// add enqueues a request whose prompt is the token ids toks.
func (p *pcHarness) add(name string, toks []int64, maxOut int) *seq {
	s := &seq{id: name, prompt: len(toks), maxOut: maxOut, ident: tokenIDIdent(toks)}
	p.e.add(s, p.now)
	p.now = p.now.Add(time.Millisecond)
	return s
}

// schedule runs one schedule() without running the step (vLLM's tests
// allocate without computing).
func (p *pcHarness) schedule() {
	p.t.Helper()
	p.e.scheduleOnce(p.now)
	p.check()
}

// step runs one schedule() and its step.
func (p *pcHarness) step() {
	p.t.Helper()
	p.e.scheduleOnce(p.now)
	p.check()
	p.finishStep()
}

// finishStep runs the step scheduled, if any.
func (p *pcHarness) finishStep() {
	p.t.Helper()
	if len(p.e.scheduled) > 0 {
		p.now = p.now.Add(p.e.stepTime())
		p.e.apply(p.now)
		p.check()
	}
	p.e.takeEvents(nil)
}

func (p *pcHarness) run(maxSteps int) {
	p.t.Helper()
	for i := 0; p.e.hasWork(); i++ {
		if i == maxSteps {
			p.t.Fatalf("engine still busy after %d steps", maxSteps)
		}
		p.step()
	}
}

// free is manager.free(req): the request is aborted and its blocks freed.
func (p *pcHarness) free(s *seq) {
	p.t.Helper()
	p.e.abort(s, p.now)
	p.e.takeEvents(nil)
	p.check()
}

// check verifies the pool: every block is held (ref = holders) or in the
// free queue, used counts the held ones, and the hash map holds exactly the
// hashed blocks.
func (p *pcHarness) check() {
	p.t.Helper()
	e := p.e
	if e.pool == nil {
		return
	}
	holders := make([]int32, e.cfg.NumBlocks)
	for _, s := range e.running {
		if len(s.ids) != s.blocks {
			p.t.Fatalf("%s holds %d ids but counts %d blocks", s.id, len(s.ids), s.blocks)
		}
		for j, id := range s.ids {
			holders[id]++
			if j < s.nCached && (!e.pool.hashed[id] || e.pool.hash[id] != s.hashes[j]) {
				p.t.Fatalf("%s: block %d (id %d) is not cached under its hash", s.id, j, id)
			}
		}
	}
	used, hashed := 0, 0
	for id := 1; id < e.cfg.NumBlocks; id++ {
		if e.pool.ref[id] != holders[id] {
			p.t.Fatalf("block %d: ref %d, held by %d", id, e.pool.ref[id], holders[id])
		}
		if e.pool.inFree[id] != (holders[id] == 0) {
			p.t.Fatalf("block %d: in free queue %v with %d holders", id, e.pool.inFree[id], holders[id])
		}
		if holders[id] > 0 {
			used++
		}
		if e.pool.hashed[id] {
			hashed++
			if !slices.Contains(e.pool.cached[e.pool.hash[id]], int32(id)) {
				p.t.Fatalf("block %d is hashed but not in the cache map", id)
			}
		}
	}
	inMap := 0
	for _, ids := range e.pool.cached {
		inMap += len(ids)
	}
	if used != e.used || inMap != hashed || len(e.pool.freeOrder()) != e.pool.nfree || e.pool.nfree != e.usable-e.used {
		p.t.Fatalf("used %d (engine %d), %d hashed, %d in map, free queue %d (nfree %d)",
			used, e.used, hashed, inMap, len(e.pool.freeOrder()), e.pool.nfree)
	}
}

func (p *pcHarness) freeIDs() []int32 { return p.e.pool.freeOrder() }

func repeat(v int64, n int) []int64 { return slices.Repeat([]int64{v}, n) }

func span(from, to int) []int64 {
	out := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}

func cat(parts ...[]int64) []int64 { return slices.Concat(parts...) }

// common48 is vLLM's common_token_ids: 3 full blocks of 16.
func common48() []int64 { return cat(repeat(0, 16), repeat(1, 16), repeat(2, 16)) }

func i32(v ...int32) []int32 { return v }

// TestPrefixCachingManager ports the KVCacheManager tests of
// tests/v1/core/test_prefix_caching.py.
func TestPrefixCachingManager(t *testing.T) {
	tests := []struct {
		name string // the vLLM test it ports
		run  func(t *testing.T)
	}{
		{"test_prefill", func(t *testing.T) {
			p := newPCHarness(t, 11, 16, true)
			// Fully cache miss: 3 full blocks and 7 tokens.
			req0 := p.add("0", cat(common48(), repeat(3, 7)), 17)
			p.schedule()
			if !slices.Equal(req0.ids, i32(1, 2, 3, 4)) || req0.computed != 0 {
				t.Fatalf("req0 blocks %v, computed %d; want [1 2 3 4], 0", req0.ids, req0.computed)
			}
			// Full blocks are hashed through the chain; the partial one is not.
			parent := rootHash
			for j, id := range req0.ids[:3] {
				h := parent
				for range 16 {
					h = mix(h, mix(tagTokenID, uint64(j)))
				}
				if !p.e.pool.hashed[id] || p.e.pool.hash[id] != h || p.e.pool.ref[id] != 1 {
					t.Fatalf("block %d: hashed %v, hash %x (want %x), ref %d", id, p.e.pool.hashed[id], p.e.pool.hash[id], h, p.e.pool.ref[id])
				}
				parent = h
			}
			if p.e.pool.hashed[4] || p.e.pool.ref[4] != 1 {
				t.Fatalf("partial block 4 hashed %v, ref %d", p.e.pool.hashed[4], p.e.pool.ref[4])
			}
			// Cache hit in the common prefix while the blocks are in use.
			req1 := p.add("1", cat(common48(), repeat(3, 5)), 17)
			p.schedule()
			if !slices.Equal(req1.ids, i32(1, 2, 3, 5)) || req1.cachedTokens != 48 || req1.sched != 53-48 {
				t.Fatalf("req1 blocks %v, cached %d, scheduled %d; want [1 2 3 5], 48, 5", req1.ids, req1.cachedTokens, req1.sched)
			}
			for _, id := range i32(1, 2, 3) {
				if p.e.pool.ref[id] != 2 {
					t.Fatalf("block %d ref %d, want 2", id, p.e.pool.ref[id])
				}
			}
			if p.e.free() != 5 {
				t.Fatalf("%d free blocks, want 5", p.e.free())
			}
			p.free(req0)
			p.free(req1)
			// [unallocated (6..10)] [unique req0 (4)] [unique req1 (5)] [common (3, 2, 1)]
			if got := p.freeIDs(); !slices.Equal(got, i32(6, 7, 8, 9, 10, 4, 5, 3, 2, 1)) {
				t.Fatalf("free queue %v", got)
			}
			// Cache hit in the common prefix when the blocks are already free.
			req2 := p.add("2", cat(common48(), repeat(3, 6)), 17)
			p.schedule()
			if !slices.Equal(req2.ids, i32(1, 2, 3, 6)) || req2.cachedTokens != 48 {
				t.Fatalf("req2 blocks %v, cached %d", req2.ids, req2.cachedTokens)
			}
			if p.e.free() != 6 {
				t.Fatalf("%d free blocks, want 6", p.e.free())
			}
			p.free(req2)
			// Cache miss and eviction: the allocation order is the eviction order.
			req3 := p.add("3", repeat(99, 160), 17)
			p.schedule()
			if !slices.Equal(req3.ids, i32(7, 8, 9, 10, 4, 5, 6, 3, 2, 1)) || req3.cachedTokens != 0 {
				t.Fatalf("req3 blocks %v, cached %d", req3.ids, req3.cachedTokens)
			}
			if p.e.free() != 0 || len(p.freeIDs()) != 0 {
				t.Fatalf("%d free blocks, want 0", p.e.free())
			}
		}},
		{"test_decode", func(t *testing.T) {
			p := newPCHarness(t, 11, 16, true)
			req0 := p.add("0", cat(common48(), repeat(3, 7)), 100)
			p.step() // prefill 55, sample token 1
			if !slices.Equal(req0.ids, i32(1, 2, 3, 4)) {
				t.Fatalf("blocks %v", req0.ids)
			}
			// Decode without a new block while block 4 fills.
			for req0.total() < 64 {
				p.step()
				if len(req0.ids) != 4 || p.e.pool.hashed[4] {
					t.Fatalf("at %d tokens: blocks %v, block 4 hashed %v", req0.total(), req0.ids, p.e.pool.hashed[4])
				}
			}
			// The step that computes token 64 fills block 4 with generated
			// tokens: it is cached; the next token takes a new, unhashed block.
			p.step()
			p.step()
			if len(req0.ids) != 5 || !p.e.pool.hashed[req0.ids[3]] || p.e.pool.hashed[req0.ids[4]] {
				t.Fatalf("blocks %v: block 4 hashed %v, block 5 hashed %v", req0.ids, p.e.pool.hashed[req0.ids[3]], p.e.pool.hashed[req0.ids[4]])
			}
		}},
		{"test_evict", func(t *testing.T) {
			p := newPCHarness(t, 11, 16, true)
			last := 5*16 + 7
			req0 := p.add("0", span(0, last), 17)
			p.schedule()
			req1 := p.add("1", span(last, last+3*16), 17)
			p.schedule()
			if len(req0.ids) != 6 || len(req1.ids) != 3 || p.e.free() != 1 {
				t.Fatalf("req0 %v, req1 %v, %d free", req0.ids, req1.ids, p.e.free())
			}
			p.free(req0)
			p.free(req1)
			if got := p.freeIDs(); !slices.Equal(got, i32(10, 6, 5, 4, 3, 2, 1, 9, 8, 7)) {
				t.Fatalf("free queue %v", got)
			}
			// Touch the first 2 blocks.
			req2 := p.add("2", span(0, 2*16+3), 17)
			p.schedule()
			if !slices.Equal(req2.ids, i32(1, 2, 10)) || req2.cachedTokens != 32 || p.e.free() != 7 {
				t.Fatalf("req2 blocks %v, cached %d, %d free", req2.ids, req2.cachedTokens, p.e.free())
			}
		}},
		{"test_hash_block_correct_reuse", func(t *testing.T) {
			p := newPCHarness(t, 2, 16, true)
			req := p.add("0", span(0, 16), 17)
			p.schedule()
			if !slices.Equal(req.ids, i32(1)) || !p.e.pool.hashed[1] {
				t.Fatalf("blocks %v, hashed %v", req.ids, p.e.pool.hashed[1])
			}
			p.free(req)
			// A partial block reusing a cached one loses the old hash.
			req = p.add("1", span(0, 15), 17)
			p.schedule()
			if !slices.Equal(req.ids, i32(1)) || p.e.pool.hashed[1] || len(p.e.pool.cached) != 0 {
				t.Fatalf("blocks %v, hashed %v, %d cached hashes", req.ids, p.e.pool.hashed[1], len(p.e.pool.cached))
			}
		}},
		{"test_computed_blocks_not_evicted", func(t *testing.T) {
			p := newPCHarness(t, 3, 16, true)
			req0 := p.add("0", span(0, 16), 17)
			p.schedule()
			req1 := p.add("1", span(16, 32), 17)
			p.schedule()
			if !slices.Equal(req0.ids, i32(1)) || !slices.Equal(req1.ids, i32(2)) {
				t.Fatalf("req0 %v, req1 %v", req0.ids, req1.ids)
			}
			p.free(req0)
			p.free(req1)
			// A hit on the first block evicts the second cached block, not it.
			req2 := p.add("2", span(0, 32), 17)
			p.schedule()
			if !slices.Equal(req2.ids, i32(1, 2)) || req2.cachedTokens != 16 {
				t.Fatalf("req2 blocks %v, cached %d", req2.ids, req2.cachedTokens)
			}
		}},
		{"test_basic_prefix_caching_disabled", func(t *testing.T) {
			p := newPCHarness(t, 5, 4, false)
			req1 := p.add("1", span(0, 10), 17)
			p.schedule()
			if req1.blocks != 3 {
				t.Fatalf("req1 holds %d blocks, want 3", req1.blocks)
			}
			p.free(req1)
			// No caching: the shared prefix is computed again.
			req2 := p.add("2", span(0, 16), 17)
			p.schedule()
			if req2.blocks != 4 || req2.cachedTokens != 0 || req2.sched != 16 {
				t.Fatalf("req2 holds %d blocks, cached %d, scheduled %d", req2.blocks, req2.cachedTokens, req2.sched)
			}
			// No blocks left for a new request.
			req3 := p.add("3", span(0, 4), 17)
			p.schedule()
			if req3.state != stWaiting || req3.blocks != 0 {
				t.Fatalf("req3 in state %d with %d blocks", req3.state, req3.blocks)
			}
		}},
		{"test_cache_blocks", func(t *testing.T) {
			// cache_full_blocks caches 2 full blocks from the start, then
			// the next one: here a 14-token prompt prefilled in chunks of 8.
			p := newPCHarness(t, 5, 4, true)
			p.e.cfg.MaxBatchedTokens = 8
			req := p.add("0", span(0, 14), 17)
			p.step()
			if len(p.e.pool.cached) != 2 || req.nCached != 2 {
				t.Fatalf("after 8 tokens %d cached hashes, %d cached blocks; want 2", len(p.e.pool.cached), req.nCached)
			}
			p.step()
			if len(p.e.pool.cached) != 3 || req.nCached != 3 || !p.e.pool.hashed[req.ids[0]] {
				t.Fatalf("after 14 tokens %d cached hashes, %d cached blocks; want 3", len(p.e.pool.cached), req.nCached)
			}
		}},
		{"test_prefill_not_enough_free_blocks_with_computed_blocks", func(t *testing.T) {
			p := newPCHarness(t, 11, 16, true)
			req0 := p.add("0", common48(), 17)
			p.schedule()
			part0 := slices.Clone(req0.ids)
			req1 := p.add("1", cat(common48(), common48()), 17)
			p.schedule()
			if !slices.Equal(req1.ids[:3], part0) || req1.cachedTokens != 48 {
				t.Fatalf("req1 blocks %v, cached %d", req1.ids, req1.cachedTokens)
			}
			part1 := slices.Clone(req1.ids)
			p.free(req1)
			refs := func(where string) {
				t.Helper()
				for i, id := range part1 {
					want := int32(0)
					if i < 3 { // still held by req0
						want = 1
					}
					if p.e.pool.ref[id] != want {
						t.Fatalf("%s: block %d ref %d, want %d", where, id, p.e.pool.ref[id], want)
					}
				}
			}
			refs("after freeing req1")
			req2 := p.add("2", repeat(7, 32), 17)
			p.schedule()
			if p.e.free() != 5 {
				t.Fatalf("%d free blocks, want 5", p.e.free())
			}
			// req3 hits all six blocks of req1 but cannot be allocated: three
			// hits are free and would leave the free queue, and three more
			// blocks are needed. Nothing is touched.
			req3 := p.add("3", cat(common48(), common48(), common48()), 17)
			queries := p.e.m.prefixQueries
			p.schedule()
			if len(p.e.hits) != 6 || !slices.Equal(p.e.hits, part1) || req3.state != stWaiting || req3.blocks != 0 {
				t.Fatalf("req3: hits %v, state %d, %d blocks", p.e.hits, req3.state, req3.blocks)
			}
			if p.e.m.prefixQueries-queries != 144 {
				t.Fatalf("lookup recorded %d queried tokens, want 144", p.e.m.prefixQueries-queries)
			}
			refs("after req3's failed allocation")
			_ = req2
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}

// TestPrefixCachingScheduler ports the scheduler tests about prefix caching
// of tests/v1/core/test_scheduler.py and test_async_scheduler.py (which run
// the same scheduler with asynchronous steps, not simulated).
func TestPrefixCachingScheduler(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		// test_scheduler.py: test_schedule[True-5] without prompt logprobs:
		// ten requests with distinct prompts are all scheduled in full.
		{"test_schedule", func(t *testing.T) {
			p := newPCHarness(t, 1000, 16, true)
			var reqs []*seq
			for i := range 10 {
				reqs = append(reqs, p.add(fmt.Sprint(i), repeat(int64(i), 10), 16))
			}
			p.schedule()
			if p.e.waiting.len() != 0 || !slices.Equal(p.e.running, reqs) {
				t.Fatalf("%d waiting, running %v", p.e.waiting.len(), ids(p.e.running))
			}
			for _, r := range reqs {
				if r.sched != 10 {
					t.Fatalf("%s scheduled %d tokens, want 10", r.id, r.sched)
				}
			}
		}},
		// test_async_scheduler.py: test_prefix_caching_for_prefill_dedup.
		{"test_prefix_caching_for_prefill_dedup", func(t *testing.T) {
			p := newPCHarness(t, 1000, 16, true)
			p.e.cfg.MaxBatchedTokens = 1000
			prompt := repeat(5, 100)
			req0 := p.add("0", prompt, 3)
			req1 := p.add("1", prompt, 3)
			p.schedule()
			// Blocks cached when allocated serve the second request in the
			// same step: all blocks but the last are shared.
			if req0.sched != 100 || req1.sched != 100%16 || req0.cachedTokens != 0 || req1.cachedTokens != 96 {
				t.Fatalf("scheduled %d and %d, cached %d and %d", req0.sched, req1.sched, req0.cachedTokens, req1.cachedTokens)
			}
			p.finishStep()
			for i := 2; i < 5; i++ {
				r := p.add(fmt.Sprint(i), prompt, 3)
				p.step()
				if r.cachedTokens != 96 || r.computedAll != 100%16 {
					t.Fatalf("%s: cached %d, computed %d", r.id, r.cachedTokens, r.computedAll)
				}
			}
			p.run(100)
		}},
		// test_async_scheduler.py: test_prefix_caching_for_multi_turn: the
		// next turn's prompt is the previous prompt plus its output.
		{"test_prefix_caching_for_multi_turn", func(t *testing.T) {
			p := newPCHarness(t, 1000, 16, true)
			p.e.cfg.MaxBatchedTokens = 1000
			var first []*seq
			for i := range 5 {
				first = append(first, p.add(fmt.Sprint(i), repeat(int64(i), 100), 200))
			}
			p.run(1000)
			var next []*seq
			for i, prev := range first {
				s := &seq{id: fmt.Sprint("next-", i), prompt: 300, maxOut: 200}
				s.ident = func(t int) (uint64, bool) { return p.e.tokenIdentity(prev, t), true }
				p.e.add(s, p.now)
				next = append(next, s)
			}
			p.schedule()
			for _, s := range next {
				if s.cachedTokens != 300/16*16 || s.sched != 300%16 {
					t.Fatalf("%s: cached %d, scheduled %d; want 288, 12", s.id, s.cachedTokens, s.sched)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}

// TestPrefixCacheHitCap: a fully cached prompt still computes its last
// block (hits stop at num_tokens − 1, block-aligned), and a prompt of one
// block never hits.
func TestPrefixCacheHitCap(t *testing.T) {
	for _, tt := range []struct {
		prompt, wantCached int
	}{
		{16, 0}, {17, 16}, {32, 16}, {33, 32}, {48, 32}, {55, 48},
	} {
		t.Run(fmt.Sprint(tt.prompt), func(t *testing.T) {
			p := newPCHarness(t, 100, 16, true)
			a := p.add("a", span(0, tt.prompt), 1)
			p.run(100)
			b := p.add("b", span(0, tt.prompt), 1)
			p.schedule()
			if a.cachedTokens != 0 || b.cachedTokens != tt.wantCached || b.sched != tt.prompt-tt.wantCached {
				t.Fatalf("cached %d then %d, scheduled %d; want 0, %d, %d", a.cachedTokens, b.cachedTokens, b.sched, tt.wantCached, tt.prompt-tt.wantCached)
			}
		})
	}
}

// TestPrefixCachePreemptedResumeHits: a preempted request frees its blocks
// tail first and they keep their hashes, so the blocks evicted meanwhile are
// its last ones and its resume finds its first blocks in the cache; the
// resume is not counted in the prefix-cache metrics (PrefixCacheStats.record
// files it under preempted requests).
func TestPrefixCachePreemptedResumeHits(t *testing.T) {
	p := newPCHarness(t, 9, 16, true) // 8 usable blocks
	low := p.add("low", span(0, 60), 20)
	p.step()
	p.step()
	hi := &seq{id: "hi", priority: -1, prompt: 60, maxOut: 10, ident: tokenIDIdent(span(1000, 1060))}
	p.e.add(hi, p.now)
	for low.preemptions == 0 && p.e.hasWork() {
		p.step()
	}
	if low.preemptions == 0 {
		t.Fatal("low was never preempted")
	}
	queries := p.e.m.prefixQueries
	for low.state == stWaiting {
		p.e.scheduleOnce(p.now)
		p.check()
		if low.state == stWaiting {
			p.finishStep()
		}
	}
	// hi took one more block: the first one low freed, its last block, so
	// low's first three blocks are hit.
	if !slices.Equal(low.ids[:3], i32(1, 2, 3)) || low.sched != low.total()-48 {
		t.Fatalf("low resumed with blocks %v, scheduling %d of %d tokens; want its blocks 1-3 hit", low.ids, low.sched, low.total())
	}
	if p.e.m.prefixQueries != queries {
		t.Errorf("the resume added %d queried tokens, want 0", p.e.m.prefixQueries-queries)
	}
	p.finishStep()
	p.run(1000)
	if low.generated != 20 || hi.generated != 10 || low.cachedTokens != 0 {
		t.Errorf("generated %d and %d, want 20 and 10; low cached %d at its first scheduling", low.generated, hi.generated, low.cachedTokens)
	}
}

// TestPrefixCacheRandomInvariants runs random workloads with shared
// prefixes, preemption and aborts on a tight engine, checking the pool after
// every operation and that every request finishes with its tokens.
func TestPrefixCacheRandomInvariants(t *testing.T) {
	for _, pol := range []Policy{Priority, FCFS} {
		t.Run(string(pol), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(pol))))
			p := newPCHarness(t, 71, 16, true)
			p.e.cfg.Policy = pol
			p.e.waiting.prio = pol == Priority
			p.e.cfg.MaxNumSeqs = 4
			p.e.cfg.MaxBatchedTokens = 256
			prefixes := [][]int64{span(0, 200), span(500, 600), span(900, 940)}
			var all []*seq
			aborted := map[*seq]bool{}
			for i := range 3000 {
				if i < 2000 && rng.IntN(5) == 0 {
					pre := prefixes[rng.IntN(len(prefixes))]
					toks := cat(pre[:rng.IntN(len(pre))+1], span(10000*(i+1), 10000*(i+1)+rng.IntN(100)))
					s := &seq{id: fmt.Sprint(i), priority: int64(rng.IntN(4)), prompt: len(toks),
						maxOut: 1 + rng.IntN(300), ident: tokenIDIdent(toks)}
					p.e.add(s, p.now)
					all = append(all, s)
				}
				if i%97 == 0 && len(all) > 0 {
					s := all[rng.IntN(len(all))]
					aborted[s] = aborted[s] || s.state != stFinished
					p.free(s)
				}
				p.step()
			}
			p.run(100000)
			for _, s := range all {
				if s.state != stFinished || !aborted[s] && s.generated != s.maxOut {
					t.Fatalf("%s in state %d with %d of %d tokens", s.id, s.state, s.generated, s.maxOut)
				}
			}
			if p.e.m.prefixHits == 0 || p.e.m.preemptions == 0 {
				t.Errorf("%d hit tokens, %d preemptions: the workload is too light", p.e.m.prefixHits, p.e.m.preemptions)
			}
			if p.e.used != 0 || p.e.pool.nfree != p.e.usable {
				t.Errorf("%d blocks used when idle", p.e.used)
			}
		})
	}
}

// TestSimHashIDs: Mooncake hash ids (512 tokens each) map onto engine
// blocks of any size: the full blocks inside the tokens two prompts share
// hit, a block straddling the first differing id does not, and without
// EnablePrefixCaching the ids change nothing.
func TestSimHashIDs(t *testing.T) {
	tests := []struct {
		name       string
		blockSize  int
		first      []uint64
		second     []uint64
		prompt     int // of the second request (the first has 1500 tokens)
		wantCached int
	}{
		{"one shared id, blocks of 16", 16, []uint64{1, 2, 3}, []uint64{1, 9, 9}, 1500, 512},
		{"two shared ids, blocks of 16", 16, []uint64{1, 2, 3}, []uint64{1, 2, 9}, 1500, 1024},
		{"blocks of 48 do not divide 512", 48, []uint64{1, 2, 3}, []uint64{1, 9, 9}, 1500, 480},
		{"blocks of 1024 span two ids", 1024, []uint64{1, 2, 3}, []uint64{1, 2, 9}, 1500, 1024},
		{"blocks of 1024, one shared id", 1024, []uint64{1, 2, 3}, []uint64{1, 9, 9}, 1500, 0},
		{"shorter prompt, same ids", 16, []uint64{1, 2, 3}, []uint64{1, 2}, 700, 688},
		{"prompt past its ids is its own", 16, []uint64{1}, []uint64{1}, 1500, 512},
		{"no shared id", 16, []uint64{1, 2, 3}, []uint64{4, 5, 6}, 1500, 0},
		{"no ids", 16, nil, nil, 1500, 0},
	}
	for _, tt := range tests {
		for _, caching := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/caching=%v", tt.name, caching), func(t *testing.T) {
				cfg := DemoConfig()
				cfg.BlockSize = tt.blockSize
				cfg.NumBlocks = 16384/tt.blockSize + 1
				cfg.EnablePrefixCaching = caching
				sim := NewSim(cfg, 1, 1)
				var recs []Record
				cb := Callbacks{OnFinish: func(r Record) { recs = append(recs, r) }}
				sim.Submit(Request{PromptTokens: 1500, MaxTokens: 2, HashIDs: tt.first}, cb)
				sim.Run()
				sim.Submit(Request{PromptTokens: tt.prompt, MaxTokens: 2, HashIDs: tt.second}, cb)
				sim.Run()
				want := tt.wantCached
				if !caching {
					want = 0
				}
				if recs[0].CachedTokens != 0 || recs[1].CachedTokens != want || recs[1].ComputedTokens != tt.prompt-want+1 {
					t.Fatalf("cached %d then %d (computed %d); want 0 then %d", recs[0].CachedTokens, recs[1].CachedTokens, recs[1].ComputedTokens, want)
				}
				st := sim.Stats()
				if caching && (st.PrefixCacheQueries != int64(1500+tt.prompt) || st.PrefixCacheHits != int64(want)) ||
					!caching && (st.PrefixCacheQueries != 0 || st.PrefixCacheHits != 0) {
					t.Fatalf("stats: %d queries, %d hits", st.PrefixCacheQueries, st.PrefixCacheHits)
				}
			})
		}
	}
}

// TestPrefixCachingWithoutSharing: requests that share nothing run the same
// with caching on as off, as long as nothing is preempted (a resume may hit
// its own blocks); under preemption caching only saves recompute.
func TestPrefixCachingWithoutSharing(t *testing.T) {
	run := func(cfg EngineConfig, caching bool) ([]Record, Stats) {
		cfg.EnablePrefixCaching = caching
		sim := NewSim(cfg, 2, 3)
		rng := sim.Rand()
		for i := range 300 {
			at := SimEpoch.Add(time.Duration(i) * 40 * time.Millisecond)
			prompt, out := 1+rng.IntN(1500), 1+rng.IntN(300)
			sim.At(at, func() { sim.Submit(Request{PromptTokens: prompt, MaxTokens: out}, Callbacks{}) })
		}
		sim.Run()
		return sim.Records(), sim.Stats()
	}
	for _, tt := range []struct {
		name      string
		numBlocks int
		preempts  bool
	}{{"roomy", 2049, false}, {"tight", 201, true}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DemoConfig()
			cfg.NumBlocks = tt.numBlocks
			cfg.MaxModelLen = 2000
			off, stOff := run(cfg, false)
			on, stOn := run(cfg, true)
			if (stOff.Preemptions > 0) != tt.preempts {
				t.Fatalf("%d preemptions: the workload does not test what it says", stOff.Preemptions)
			}
			if stOff.Preemptions == 0 {
				if !slices.Equal(off, on) || stOn.PrefixCacheHits != 0 {
					t.Fatalf("records differ without preemption (%d hit tokens)", stOn.PrefixCacheHits)
				}
				return
			}
			if stOn.ComputedTokens >= stOff.ComputedTokens || stOn.PrefixCacheHits != 0 {
				t.Fatalf("%d preemptions: computed %d with caching, %d without; %d hits counted", stOff.Preemptions, stOn.ComputedTokens, stOff.ComputedTokens, stOn.PrefixCacheHits)
			}
		})
	}
}
