package vllmsim

// Automatic prefix caching, as vLLM V1 does it. The facts followed, by file
// and the commit of vllm-project/vllm it was read at:
//
//   - vllm/v1/core/block_pool.py (c59cb794): a cached block is a full block
//     with a block hash, kept in a hash → blocks map (duplicates allowed,
//     the first one is returned); get_new_blocks pops free blocks from the
//     head of the free queue and evicts (un-hashes) a cached one;
//     touch removes a hit block with ref_cnt 0 from the free queue and
//     increments ref_cnt; free_blocks decrements ref_cnt and appends the
//     blocks that reach 0 to the tail of the free queue, hash kept.
//   - vllm/v1/core/kv_cache_utils.py (bbf906a8): FreeKVCacheBlockQueue, a
//     doubly linked list of free blocks in eviction order (least recently
//     freed first), initially in block-id order with block 0 taken as the
//     null block; a block's hash is hash(parent hash, its tokens), chained
//     over full blocks only.
//   - vllm/v1/core/kv_cache_manager.py (ace980e6): get_computed_blocks caps
//     the hit at num_tokens − 1 (a fully cached prompt recomputes its last
//     block, as hits are block-aligned), records queries = num_tokens and
//     hits for requests never preempted; allocate_slots caches the full
//     blocks up to min(computed + new, num_tokens) when it allocates; free
//     releases a request's blocks in reverse order so that its tail blocks
//     are evicted first.
//   - vllm/v1/core/single_type_kv_cache_manager.py (129ab7c6):
//     get_num_blocks_to_allocate counts the hit blocks with ref_cnt 0 as
//     taken (touching them removes them from the free queue); cache_blocks
//     caches from the request's first uncached full block; free passes the
//     request's blocks to free_blocks reversed.
//   - vllm/v1/core/sched/scheduler.py (b4622cf9): a waiting request looks up
//     its cached prefix before allocate_slots; the hits are its
//     num_computed_tokens, and num_cached_tokens is set when it is first
//     scheduled (if still < 0).
//   - vllm/v1/metrics/stats.py (28ed1fb8): PrefixCacheStats.record adds
//     queries and hits of a request never preempted to requests/queries/
//     hits, of a preempted one to preempted_*; the Prometheus counters
//     vllm:prefix_cache_queries and vllm:prefix_cache_hits (exposed with
//     _total) add queries and hits (vLLM vllm/v1/metrics/loggers.py
//     at 9aaf83ef; the stored loggers.py at a6f0308c is older and still
//     names them vllm:gpu_prefix_cache_*, in blocks).
//
// The code is the project's own.

// HashIDTokens is the number of prompt tokens one entry of Request.HashIDs
// covers: a Mooncake-style trace gives one hash id per 512-token block of
// the prompt (the last one may cover fewer).
const HashIDTokens = 512

// Token identities: the simulator does not tokenize, so each token of a
// sequence is a 64-bit identity, and two sequences share a prefix exactly
// as far as their identities agree. A block's hash chains its parent's hash
// with the identities of its tokens.
const (
	tagHashID  uint64 = 0x68617368_69647300 // Mooncake hash id and offset
	tagTokenID uint64 = 0x746f6b65_6e696400 // a real token id
	tagText    uint64 = 0x74657874_62797400 // four bytes of text
	tagUnique  uint64 = 0x756e6971_75650000 // a token no other sequence has
	rootHash   uint64 = 0x6e6f6e65_68617368 // the parent of the first block
)

// mix folds x into h (a 64-bit finaliser after an xor; deterministic across
// runs and platforms, unlike hash/maphash).
func mix(h, x uint64) uint64 {
	h ^= x
	h *= 0x9e3779b97f4a7c15
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return h
}

// tokenIdent gives the identity of token t (0-based) of a prompt, or false
// if the source does not name that token (it is then the sequence's own).
type tokenIdent func(t int) (uint64, bool)

// hashIDIdent is the identity of a prompt given as Mooncake hash ids: token
// t is the (t mod 512)-th token of the block named ids[t/512]. Tokens past
// 512·len(ids) get ok false (they are the sequence's own).
func hashIDIdent(ids []uint64) tokenIdent {
	return func(t int) (uint64, bool) {
		k := t / HashIDTokens
		if k >= len(ids) {
			return 0, false
		}
		return mix(mix(tagHashID, ids[k]), uint64(t%HashIDTokens)), true
	}
}

// tokenIDIdent is the identity of a prompt of token ids.
func tokenIDIdent(ids []int64) tokenIdent {
	return func(t int) (uint64, bool) {
		if t >= len(ids) {
			return 0, false
		}
		return mix(tagTokenID, uint64(ids[t])), true
	}
}

// textIdent is the identity of a text prompt under the mock's tokenizer of
// ceil(bytes/4) tokens: token t is bytes [4t, 4t+4) of text.
func textIdent(text []byte) tokenIdent {
	return func(t int) (uint64, bool) {
		lo := 4 * t
		if lo >= len(text) {
			return 0, false
		}
		hi := min(lo+4, len(text))
		var w uint64
		for _, c := range text[lo:hi] {
			w = w<<8 | uint64(c)
		}
		return mix(tagText, w<<8|uint64(hi-lo)), true
	}
}

// blockPool is the KV block pool of an engine with prefix caching: vLLM's
// BlockPool and FreeKVCacheBlockQueue. Block 0 is the null block and never
// free; every other block is either held (ref > 0) or in the free queue.
type blockPool struct {
	ref    []int32
	hash   []uint64
	hashed []bool
	prev   []int32 // free queue links, −1 at the ends
	next   []int32
	inFree []bool
	head   int32
	tail   int32
	nfree  int
	cached map[uint64][]int32 // block hash → blocks, in insertion order
}

func newBlockPool(numBlocks int) *blockPool {
	p := &blockPool{
		ref: make([]int32, numBlocks), hash: make([]uint64, numBlocks), hashed: make([]bool, numBlocks),
		prev: make([]int32, numBlocks), next: make([]int32, numBlocks), inFree: make([]bool, numBlocks),
		head: -1, tail: -1, cached: map[uint64][]int32{},
	}
	for id := 1; id < numBlocks; id++ {
		p.pushBack(int32(id))
	}
	return p
}

// pushBack appends a freed block at the tail: it is evicted last.
func (p *blockPool) pushBack(id int32) {
	p.prev[id], p.next[id] = p.tail, -1
	if p.tail >= 0 {
		p.next[p.tail] = id
	} else {
		p.head = id
	}
	p.tail = id
	p.inFree[id] = true
	p.nfree++
}

// remove takes a block out of the free queue (a hit on a free cached block).
func (p *blockPool) remove(id int32) {
	if pr := p.prev[id]; pr >= 0 {
		p.next[pr] = p.next[id]
	} else {
		p.head = p.next[id]
	}
	if nx := p.next[id]; nx >= 0 {
		p.prev[nx] = p.prev[id]
	} else {
		p.tail = p.prev[id]
	}
	p.prev[id], p.next[id] = -1, -1
	p.inFree[id] = false
	p.nfree--
}

// popFront takes the least recently freed block and evicts its hash. The
// caller has checked that a block is free.
func (p *blockPool) popFront() int32 {
	id := p.head
	p.remove(id)
	p.evict(id)
	return id
}

// evict removes id's hash from the cache, if it has one.
func (p *blockPool) evict(id int32) {
	if !p.hashed[id] {
		return
	}
	h := p.hash[id]
	ids := p.cached[h]
	for i, b := range ids {
		if b == id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(p.cached, h)
	} else {
		p.cached[h] = ids
	}
	p.hashed[id] = false
	p.hash[id] = 0
}

// setHash caches a full block under h (no de-duplication, as vLLM).
func (p *blockPool) setHash(id int32, h uint64) {
	p.hash[id] = h
	p.hashed[id] = true
	p.cached[h] = append(p.cached[h], id)
}

// lookup returns the first block cached under h.
func (p *blockPool) lookup(h uint64) (int32, bool) {
	ids := p.cached[h]
	if len(ids) == 0 {
		return 0, false
	}
	return ids[0], true
}

// freeOrder returns the free queue from head (next evicted) to tail.
func (p *blockPool) freeOrder() []int32 {
	out := make([]int32, 0, p.nfree)
	for id := p.head; id >= 0; id = p.next[id] {
		out = append(out, id)
	}
	return out
}

// ensureHashes extends s.hashes to the first n full blocks of its known
// tokens (prompt, then generated), as vLLM's request.block_hashes.
func (e *engine) ensureHashes(s *seq, n int) {
	bs := e.cfg.BlockSize
	for j := len(s.hashes); j < n; j++ {
		h := rootHash
		if j > 0 {
			h = s.hashes[j-1]
		}
		for t := j * bs; t < (j+1)*bs; t++ {
			h = mix(h, e.tokenIdentity(s, t))
		}
		s.hashes = append(s.hashes, h)
	}
}

// tokenIdentity is the identity of token t of s: from its prompt source if
// it has one, else (and for generated tokens) unique to s.
func (e *engine) tokenIdentity(s *seq, t int) uint64 {
	if t < s.prompt && s.ident != nil {
		if id, ok := s.ident(t); ok {
			return id
		}
	}
	return mix(mix(tagUnique, s.salt), uint64(t))
}

// lookupHits finds s's longest cached prefix, capped at num_tokens − 1, into
// e.hits; it returns how many of the hit blocks are free (ref 0): touching
// them takes them from the free queue.
func (e *engine) lookupHits(s *seq) (evictable int) {
	e.hits = e.hits[:0]
	if e.pool == nil {
		return 0
	}
	max := (s.total() - 1) / e.cfg.BlockSize
	e.ensureHashes(s, max)
	for j := 0; j < max; j++ {
		id, ok := e.pool.lookup(s.hashes[j])
		if !ok {
			break
		}
		e.hits = append(e.hits, id)
		if e.pool.ref[id] == 0 {
			evictable++
		}
	}
	return evictable
}

// touchHits gives s the blocks of e.hits (vLLM's touch).
func (e *engine) touchHits(s *seq) {
	for _, id := range e.hits {
		if e.pool.ref[id] == 0 {
			e.pool.remove(id)
			e.used++
		}
		e.pool.ref[id]++
		s.ids = append(s.ids, id)
	}
	s.blocks += len(e.hits)
	s.nCached = len(e.hits)
}

// allocate gives s need new blocks and caches its full blocks up to
// cacheTo tokens (capped at its known tokens).
func (e *engine) allocate(s *seq, need, cacheTo int) {
	e.used += need
	s.blocks += need
	if e.pool == nil {
		return
	}
	for range need {
		id := e.pool.popFront()
		e.pool.ref[id] = 1
		s.ids = append(s.ids, id)
	}
	full := min(cacheTo, s.total()) / e.cfg.BlockSize
	if full <= s.nCached {
		return
	}
	e.ensureHashes(s, full)
	for j := s.nCached; j < full; j++ {
		e.pool.setHash(s.ids[j], s.hashes[j])
	}
	s.nCached = full
}

// release frees s's blocks, tail first, so that its last blocks are evicted
// before its first ones.
func (e *engine) release(s *seq) {
	if e.pool == nil {
		e.used -= s.blocks
		s.blocks = 0
		return
	}
	for i := len(s.ids) - 1; i >= 0; i-- {
		id := s.ids[i]
		e.pool.ref[id]--
		if e.pool.ref[id] == 0 {
			e.pool.pushBack(id)
			e.used--
		}
	}
	s.ids = s.ids[:0]
	s.blocks = 0
	s.nCached = 0
}

// releasable counts the blocks that preempting v would free.
func (e *engine) releasable(v *seq) int {
	if e.pool == nil {
		return v.blocks
	}
	n := 0
	for _, id := range v.ids {
		if e.pool.ref[id] == 1 {
			n++
		}
	}
	return n
}
