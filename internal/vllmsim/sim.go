package vllmsim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"
)

// SimEpoch is the virtual time at which every Sim starts.
var SimEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Request is one request submitted to a Sim (one API request; N engine
// requests).
type Request struct {
	// ID names the request in its records; empty gets "req-<k>".
	ID string
	// Priority is the request's priority (lower is served first; ignored
	// under FCFS).
	Priority int64
	// PromptTokens is the prompt length, at least 1 and less than
	// MaxModelLen.
	PromptTokens int
	// MaxTokens is the output limit; 0 means MaxModelLen − PromptTokens, and
	// it is capped by that.
	MaxTokens int
	// EOSAfter, if positive, ends each choice after this many tokens with
	// FinishStop (as if the model produced EOS).
	EOSAfter int
	// N is the number of choices (engine requests); 0 means 1. The choices
	// share priority and arrival, as vLLM's n>1 fan-out.
	N int
	// HashIDs, used only with EngineConfig.EnablePrefixCaching, name the
	// prompt's content as a Mooncake-style trace does: one id per
	// HashIDTokens (512) tokens, the last one possibly covering fewer.
	// Token t of the prompt is the (t mod 512)-th token of the block named
	// HashIDs[t/512], so two prompts share exactly the tokens before their
	// first differing id (and before the shorter one's end), and every full
	// engine block (BlockSize tokens) inside the shared tokens is a cache
	// hit, whatever BlockSize is. Tokens past 512·len(HashIDs), and every
	// token of a request without HashIDs, are the request's own.
	HashIDs []uint64
}

// Callbacks receive the events of a submitted request. Any may be nil. They
// run on the Sim's goroutine, inside Run, and may call Submit, At and Abort.
type Callbacks struct {
	// OnAdmit is called when a choice is scheduled for the first time.
	OnAdmit func(choice int, at time.Time)
	// OnFirstToken is called when a choice produces its first token.
	OnFirstToken func(choice int, at time.Time)
	// OnToken is called for every output token of a choice; k counts from 1.
	OnToken func(choice, k int, at time.Time)
	// OnFinish is called once per choice when it finishes or is aborted.
	OnFinish func(rec Record)
}

// Handle is a submitted request.
type Handle struct {
	sim     *Sim
	id      string
	replica int
	seqs    []*seq
	cb      Callbacks
	open    int
}

// ID returns the request's ID.
func (h *Handle) ID() string { return h.id }

// Replica returns the index of the engine serving the request.
func (h *Handle) Replica() int { return h.replica }

// Done reports whether every choice has finished.
func (h *Handle) Done() bool { return h.open == 0 }

// Abort aborts the unfinished choices now (FinishAbort); their blocks are
// freed at once. Call it from the Sim's goroutine (a callback, an At
// function, or between Run calls). Aborting a finished request does nothing.
func (h *Handle) Abort() {
	e := h.sim.engines[h.replica]
	for _, s := range h.seqs {
		e.abort(s, h.sim.Now())
	}
	h.sim.dispatch(e)
}

// Stats are totals of a Sim over its engines since the start.
type Stats struct {
	// Elapsed is the virtual time since SimEpoch.
	Elapsed time.Duration
	// Replicas, MaxNumSeqs and UsableBlocks give the capacity per engine.
	Replicas, MaxNumSeqs, UsableBlocks int
	// Steps counts engine steps.
	Steps int64
	// BusyTime is the time engines spent in steps, summed over engines.
	BusyTime time.Duration
	// SeqSlotSeconds integrates the number of running requests over time.
	SeqSlotSeconds float64
	// KVBlockSeconds integrates the KV blocks in use over time.
	KVBlockSeconds float64
	// Preemptions counts preemptions.
	Preemptions int64
	// Submitted and Finished count engine requests (choices).
	Submitted, Finished int64
	// PromptTokens and CompletionTokens sum the records of finished
	// requests; ComputedTokens also counts recompute.
	PromptTokens, CompletionTokens, ComputedTokens int64
	// PrefixCacheQueries and PrefixCacheHits are vLLM's
	// vllm:prefix_cache_queries and vllm:prefix_cache_hits summed over the
	// engines: tokens looked up in the prefix cache by requests never
	// preempted (at every admission attempt), and how many were found. Zero
	// without EngineConfig.EnablePrefixCaching.
	PrefixCacheQueries, PrefixCacheHits int64
}

// SlotUtilisation is the mean fraction of sequence slots in use.
func (s Stats) SlotUtilisation() float64 {
	d := s.Elapsed.Seconds() * float64(s.Replicas*s.MaxNumSeqs)
	if d == 0 {
		return 0
	}
	return s.SeqSlotSeconds / d
}

// KVUtilisation is the mean fraction of usable KV blocks in use.
func (s Stats) KVUtilisation() float64 {
	d := s.Elapsed.Seconds() * float64(s.Replicas*s.UsableBlocks)
	if d == 0 {
		return 0
	}
	return s.KVBlockSeconds / d
}

// Sim runs replicas of the engine in virtual time: a discrete-event driver
// with one event queue for the engines' steps and the caller's own events
// (At). It is deterministic: the same calls give the same results. A Sim is
// not safe for concurrent use; everything runs on the caller's goroutine
// inside Run / RunUntil.
type Sim struct {
	cfg     EngineConfig
	engines []*engine
	busy    []bool // a step is in flight or a step start is queued
	out     []int  // outstanding engine requests per replica
	now     time.Duration
	q       simQueue
	nseq    uint64
	rng     *rand.Rand
	ids     uint64
	buf     []event
	records []Record
	stats   Stats

	// OnRecord, if set, is called with every record as a choice finishes.
	OnRecord func(Record)
	// KeepRecords, true by default, keeps every record for Records.
	KeepRecords bool
}

// NewSim returns a Sim of replicas engines with configuration cfg, at
// SimEpoch. The seed only feeds Rand. It panics if cfg is invalid or
// replicas < 1.
func NewSim(cfg EngineConfig, replicas int, seed uint64) *Sim {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if replicas < 1 {
		panic(fmt.Sprintf("vllmsim: NewSim: replicas must be at least 1, got %d", replicas))
	}
	s := &Sim{cfg: cfg, busy: make([]bool, replicas), out: make([]int, replicas),
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), KeepRecords: true}
	for i := range replicas {
		s.engines = append(s.engines, newEngine(cfg, i))
	}
	s.stats.Replicas, s.stats.MaxNumSeqs, s.stats.UsableBlocks = replicas, cfg.MaxNumSeqs, cfg.NumBlocks-1
	return s
}

// Now returns the current virtual time.
func (s *Sim) Now() time.Time { return SimEpoch.Add(s.now) }

// Rand returns the Sim's random source, seeded by NewSim's seed, for the
// caller's workload.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// Config returns the engine configuration.
func (s *Sim) Config() EngineConfig { return s.cfg }

// At schedules f at virtual time t (now if t is in the past). Events at the
// same time run in the order they were scheduled.
func (s *Sim) At(t time.Time, f func()) { s.push(max(t.Sub(SimEpoch), s.now), -1, f) }

// After schedules f d after now.
func (s *Sim) After(d time.Duration, f func()) { s.push(s.now+max(d, 0), -1, f) }

func (s *Sim) push(at time.Duration, replica int, f func()) {
	s.nseq++
	heap.Push(&s.q, simEvent{at: at, seq: s.nseq, replica: replica, f: f})
}

// Submit sends req to the replica with the fewest outstanding engine
// requests (the lowest index on ties), arriving now. It panics if
// PromptTokens is not in [1, MaxModelLen).
func (s *Sim) Submit(req Request, cb Callbacks) *Handle {
	r := 0
	for i := range s.out {
		if s.out[i] < s.out[r] {
			r = i
		}
	}
	return s.SubmitTo(r, req, cb)
}

// SubmitTo is Submit to replica r (a caller that routes requests itself,
// such as the benchmark's pools). It panics if r is not a replica.
func (s *Sim) SubmitTo(r int, req Request, cb Callbacks) *Handle {
	if r < 0 || r >= len(s.engines) {
		panic(fmt.Sprintf("vllmsim: SubmitTo: replica %d of %d", r, len(s.engines)))
	}
	if req.PromptTokens < 1 || req.PromptTokens >= s.cfg.MaxModelLen {
		panic(fmt.Sprintf("vllmsim: Submit: prompt of %d tokens, want [1, %d)", req.PromptTokens, s.cfg.MaxModelLen))
	}
	n := max(req.N, 1)
	limit := s.cfg.MaxModelLen - req.PromptTokens
	maxOut := limit
	if req.MaxTokens > 0 {
		maxOut = min(req.MaxTokens, limit)
	}
	id := req.ID
	if id == "" {
		s.ids++
		id = fmt.Sprintf("req-%d", s.ids)
	}
	h := &Handle{sim: s, id: id, replica: r, cb: cb, open: n}
	e := s.engines[r]
	now := s.Now()
	for c := range n {
		sq := &seq{owner: h, id: id, choice: c, priority: req.Priority, prompt: req.PromptTokens,
			maxOut: maxOut, eosAfter: req.EOSAfter}
		if len(req.HashIDs) > 0 && s.cfg.EnablePrefixCaching {
			sq.ident = hashIDIdent(req.HashIDs)
		}
		e.add(sq, now)
		h.seqs = append(h.seqs, sq)
	}
	s.out[r] += n
	s.stats.Submitted += int64(n)
	if !s.busy[r] {
		s.busy[r] = true
		s.push(s.now, r, nil)
	}
	return h
}

// Run processes events until none is left (all requests finished and no
// caller event pending).
func (s *Sim) Run() {
	for len(s.q) > 0 {
		s.runOne()
	}
}

// RunUntil processes the events up to and including t, then sets the time
// to t (if t is later than now).
func (s *Sim) RunUntil(t time.Time) {
	end := t.Sub(SimEpoch)
	for len(s.q) > 0 && s.q[0].at <= end {
		s.runOne()
	}
	s.now = max(s.now, end)
}

// RunFor is RunUntil(Now() + d).
func (s *Sim) RunFor(d time.Duration) { s.RunUntil(s.Now().Add(d)) }

// Pending reports the number of queued events (steps and caller events).
func (s *Sim) Pending() int { return len(s.q) }

func (s *Sim) runOne() {
	ev := heap.Pop(&s.q).(simEvent)
	s.now = ev.at
	if ev.replica < 0 {
		ev.f()
		return
	}
	e := s.engines[ev.replica]
	if e.inStep { // end of a step
		e.apply(s.Now())
		s.dispatch(e)
	}
	s.step(ev.replica)
}

// step starts the next step of replica r, or marks it idle.
func (s *Sim) step(r int) {
	e := s.engines[r]
	dt, ok := e.schedule(s.Now())
	s.dispatch(e)
	if !ok {
		s.busy[r] = false
		return
	}
	s.stats.Steps++
	s.stats.BusyTime += dt
	s.stats.SeqSlotSeconds += float64(len(e.running)) * dt.Seconds()
	s.stats.KVBlockSeconds += float64(e.used) * dt.Seconds()
	s.push(s.now+dt, r, nil)
}

// dispatch delivers the engine's pending events to the handles.
func (s *Sim) dispatch(e *engine) {
	s.buf = e.takeEvents(s.buf[:0])
	for i := range s.buf {
		ev := &s.buf[i]
		h := ev.s.owner.(*Handle)
		switch ev.kind {
		case evAdmit:
			if h.cb.OnAdmit != nil {
				h.cb.OnAdmit(ev.s.choice, ev.t)
			}
		case evToken:
			if ev.k == 1 && h.cb.OnFirstToken != nil {
				h.cb.OnFirstToken(ev.s.choice, ev.t)
			}
			if h.cb.OnToken != nil {
				h.cb.OnToken(ev.s.choice, ev.k, ev.t)
			}
		case evFinish:
			rec := *ev.rec
			h.open--
			s.out[h.replica]--
			s.stats.Finished++
			s.stats.PromptTokens += int64(rec.PromptTokens)
			s.stats.CompletionTokens += int64(rec.CompletionTokens)
			s.stats.ComputedTokens += int64(rec.ComputedTokens)
			if s.KeepRecords {
				s.records = append(s.records, rec)
			}
			if s.OnRecord != nil {
				s.OnRecord(rec)
			}
			if h.cb.OnFinish != nil {
				h.cb.OnFinish(rec)
			}
		}
	}
}

// Records returns the records of the finished engine requests in the order
// they finished. The slice is the Sim's own; do not modify it.
func (s *Sim) Records() []Record { return s.records }

// Stats returns the totals so far.
func (s *Sim) Stats() Stats {
	st := s.stats
	st.Elapsed = s.now
	st.Preemptions = 0
	for _, e := range s.engines {
		st.Preemptions += e.m.preemptions
		st.PrefixCacheQueries += e.m.prefixQueries
		st.PrefixCacheHits += e.m.prefixHits
	}
	return st
}

// Running and Waiting return the number of running and waiting requests of
// replica r.
func (s *Sim) Running(r int) int { return len(s.engines[r].running) }

// Waiting returns the number of waiting requests of replica r.
func (s *Sim) Waiting(r int) int { return s.engines[r].waiting.len() }

// KVBlocksUsed returns the KV blocks in use on replica r.
func (s *Sim) KVBlocksUsed(r int) int { return s.engines[r].used }

type simEvent struct {
	at      time.Duration
	seq     uint64
	replica int // ≥ 0: a step boundary of that replica; −1: f
	f       func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	old[len(old)-1] = simEvent{}
	*q = old[:len(old)-1]
	return ev
}
