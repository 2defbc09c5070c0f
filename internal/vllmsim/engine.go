package vllmsim

import (
	"time"
)

type seqState uint8

const (
	stWaiting seqState = iota
	stRunning
	stFinished
)

// seq is one engine request (vLLM's Request). It belongs to one engine; all
// its fields are guarded by that engine's owner (the Sim's single goroutine
// or the replica mutex of a Server).
type seq struct {
	owner  any // *Handle (Sim) or *call (Server)
	id     string
	choice int

	priority int64
	arrival  time.Time
	order    uint64 // submission order: the last tie-break

	prompt   int
	maxOut   int // output limit
	eosAfter int // 0: none

	generated int // output tokens so far (billed)
	computed  int // num_computed_tokens
	blocks    int // KV blocks held
	sched     int // tokens scheduled in the current step (0: none)
	state     seqState

	// Prefix caching (engine.pool != nil) only.
	ident        tokenIdent // prompt token identities; nil: all its own
	salt         uint64     // makes its own tokens unique
	hashes       []uint64   // block hashes of its full blocks so far
	ids          []int32    // the blocks it holds, in order
	nCached      int        // leading blocks of ids that are hashed
	cachedTokens int        // num_cached_tokens at its first scheduling

	preemptions int
	computedAll int // every token computed, with recompute
	admitted    time.Time
	firstToken  time.Time
	heapIdx     int
}

// total is num_tokens: prompt plus generated tokens. A resumed request
// recomputes all of them.
func (s *seq) total() int { return s.prompt + s.generated }

// before is the waiting-heap order: priority, then arrival, then submission
// order (vLLM compares request ids there; the simulator uses the order of
// submission so that ties are deterministic).
func (s *seq) before(o *seq) bool {
	if s.priority != o.priority {
		return s.priority < o.priority
	}
	if !s.arrival.Equal(o.arrival) {
		return s.arrival.Before(o.arrival)
	}
	return s.order < o.order
}

// worse reports whether s has a larger (priority, arrival) than o, the key
// of vLLM's priority victim selection (ties: neither is worse).
func (s *seq) worse(o *seq) bool {
	if s.priority != o.priority {
		return s.priority > o.priority
	}
	return s.arrival.After(o.arrival)
}

func (s *seq) record(replica int, finished time.Time, reason string) Record {
	return Record{
		ID: s.id, Choice: s.choice, Replica: replica, Priority: s.priority,
		Arrival: s.arrival, Admitted: s.admitted, FirstToken: s.firstToken, Finished: finished,
		Preemptions: s.preemptions, PromptTokens: s.prompt, CompletionTokens: s.generated,
		ComputedTokens: s.computedAll, CachedTokens: s.cachedTokens, FinishReason: reason,
	}
}

type eventKind uint8

const (
	evAdmit eventKind = iota + 1
	evToken
	evFinish
)

// event is something the engine tells its driver: a first admission, a
// token (k-th, with the finish reason if it is the last), or a finish with
// its record.
type event struct {
	kind   eventKind
	s      *seq
	t      time.Time
	k      int
	reason string
	rec    *Record
}

// engine is one vLLM V1 engine core: the scheduler state, the KV block
// accounting, the metrics. It knows no clock: every method takes the time.
// A step is schedule(now) followed, one step duration later, by apply(then).
type engine struct {
	cfg     EngineConfig
	replica int
	sleep   int        // sleep mode level (0: awake; 1, 2), as /metrics exports it (SetSleepLevel)
	usable  int        // NumBlocks − 1 (the null block)
	used    int        // blocks held by requests (ref > 0)
	pool    *blockPool // nil unless EnablePrefixCaching
	hits    []int32    // the last lookup's cached blocks

	waiting   waitQueue
	running   []*seq // admission order
	scheduled []*seq // this step, in scheduling order
	inStep    bool
	nextOrder uint64

	events []event
	m      engineMetrics
}

func newEngine(cfg EngineConfig, replica int) *engine {
	e := &engine{
		cfg: cfg, replica: replica, usable: cfg.NumBlocks - 1,
		waiting: waitQueue{prio: cfg.Policy == Priority},
		m:       newEngineMetrics(),
	}
	if cfg.EnablePrefixCaching {
		e.pool = newBlockPool(cfg.NumBlocks)
	}
	return e
}

func (e *engine) blocksFor(tokens int) int {
	return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}

func (e *engine) free() int { return e.usable - e.used }

// hasWork reports whether a step would have anything to do.
func (e *engine) hasWork() bool { return len(e.running) > 0 || e.waiting.len() > 0 }

// add enqueues a new request at time now (its arrival).
func (e *engine) add(s *seq, now time.Time) {
	s.arrival = now
	s.order = e.nextOrder
	s.salt = s.order
	e.nextOrder++
	s.state = stWaiting
	s.heapIdx = -1
	e.waiting.push(s)
}

// schedule runs one schedule() at now and returns the step duration, or
// false if nothing was scheduled (the engine is idle).
func (e *engine) schedule(now time.Time) (time.Duration, bool) {
	for try := 0; try < 2; try++ {
		preempted := e.scheduleOnce(now)
		if len(e.scheduled) > 0 {
			e.inStep = true
			return e.stepTime(), true
		}
		if !preempted {
			break
		}
		// Everything that ran was preempted: vLLM's next schedule() call
		// admits from the waiting queue.
	}
	return 0, false
}

func (e *engine) scheduleOnce(now time.Time) (preempted bool) {
	budget := e.cfg.MaxBatchedTokens
	e.scheduled = e.scheduled[:0]

	// RUNNING requests first, in admission order.
	i := 0
running:
	for i < len(e.running) && budget > 0 {
		r := e.running[i]
		n := min(r.total()-r.computed, budget)
		need := e.blocksFor(r.computed+n) - r.blocks
		for need > e.free() {
			var v *seq
			if e.cfg.Policy == Priority {
				vi := e.worstRunning()
				v = e.running[vi]
				e.removeRunning(vi)
				if vi < i { // already scheduled this step: refund
					budget += v.sched
					e.unschedule(v)
					i--
				}
			} else {
				v = e.running[len(e.running)-1]
				e.running = e.running[:len(e.running)-1]
			}
			e.preempt(v)
			preempted = true
			if v == r {
				break running
			}
		}
		e.allocate(r, need, r.computed+n)
		r.sched = n
		budget -= n
		e.scheduled = append(e.scheduled, r)
		i++
	}

	// WAITING requests, only if nothing was preempted in this step.
	if preempted {
		return true
	}
	for e.waiting.len() > 0 && budget > 0 {
		h := e.waiting.peek()
		if len(e.running) >= e.cfg.MaxNumSeqs && !e.preemptForWaiting(h, &budget) {
			break
		}
		total := h.total()
		evictable := e.lookupHits(h)
		if e.pool != nil && h.preemptions == 0 {
			e.m.prefixQueries += int64(total)
			e.m.prefixHits += int64(len(e.hits) * e.cfg.BlockSize)
		}
		// The whole sequence must fit after the cache hits; hit blocks that
		// are free leave the free queue when touched.
		if e.blocksFor(total)-len(e.hits)+evictable > e.free() {
			break // strict head-of-line blocking
		}
		e.waiting.pop()
		if len(e.hits) > 0 {
			e.touchHits(h)
			h.computed = len(e.hits) * e.cfg.BlockSize
		}
		n := min(total-h.computed, budget)
		need := e.blocksFor(h.computed+n) - h.blocks
		e.allocate(h, need, h.computed+n)
		h.sched = n
		h.state = stRunning
		budget -= n
		e.running = append(e.running, h)
		e.scheduled = append(e.scheduled, h)
		if h.admitted.IsZero() {
			h.cachedTokens = h.computed
			h.admitted = now
			e.m.queue.observe(now.Sub(h.arrival).Seconds())
			e.events = append(e.events, event{kind: evAdmit, s: h, t: now})
		}
	}
	return false
}

// preemptForWaiting implements the WaitingPreempt modes: with the running
// set full, preempt its worst request for the waiting head h if h is
// strictly better and would then fit. It reports whether a slot was freed.
func (e *engine) preemptForWaiting(h *seq, budget *int) bool {
	if e.cfg.WaitingPreempt == WaitingPreemptOff || e.cfg.Policy != Priority || len(e.running) == 0 {
		return false
	}
	vi := e.worstRunning()
	v := e.running[vi]
	better := v.worse(h)
	if e.cfg.WaitingPreempt == WaitingPreempt54530 {
		better = h.priority < v.priority
	}
	if !better {
		return false
	}
	evictable := e.lookupHits(h)
	if e.blocksFor(h.total())-len(e.hits)+evictable > e.free()+e.releasable(v) {
		return false
	}
	e.removeRunning(vi)
	if v.sched > 0 {
		*budget += v.sched
		e.unschedule(v)
	}
	e.preempt(v)
	return true
}

// worstRunning returns the index of max(running, key=(priority, arrival)),
// the first one in admission order on ties (Python's max).
func (e *engine) worstRunning() int {
	w := 0
	for j := 1; j < len(e.running); j++ {
		if e.running[j].worse(e.running[w]) {
			w = j
		}
	}
	return w
}

func (e *engine) removeRunning(i int) {
	copy(e.running[i:], e.running[i+1:])
	e.running[len(e.running)-1] = nil
	e.running = e.running[:len(e.running)-1]
}

func (e *engine) unschedule(v *seq) {
	for j, s := range e.scheduled {
		if s == v {
			e.scheduled = append(e.scheduled[:j], e.scheduled[j+1:]...)
			break
		}
	}
	v.sched = 0
}

// preempt frees v's blocks and puts it back in the waiting queue with its
// priority and arrival; it resumes by recomputing prompt and output.
func (e *engine) preempt(v *seq) {
	e.release(v)
	v.computed = 0
	v.sched = 0
	v.state = stWaiting
	v.preemptions++
	e.m.preemptions++
	e.waiting.prepend(v)
}

// stepTime applies the step model to the scheduled requests.
func (e *engine) stepTime() time.Duration {
	prefill, decodes, ctx := 0, 0, 0
	for _, s := range e.scheduled {
		if s.generated > 0 && s.computed == s.total()-1 {
			decodes++
			ctx += s.computed + 1
		} else {
			prefill += s.sched
		}
	}
	return e.cfg.Step.Duration(prefill, decodes, ctx)
}

// apply ends the step at now: scheduled tokens are computed, requests whose
// known tokens are all computed sample one token, finished ones free their
// blocks.
func (e *engine) apply(now time.Time) {
	finished := false
	for _, s := range e.scheduled {
		if s.state != stRunning { // aborted during the step
			continue
		}
		s.computed += s.sched
		s.computedAll += s.sched
		s.sched = 0
		if s.computed < s.total() {
			continue // chunked prefill in progress
		}
		s.generated++
		e.m.generationTokens++
		if s.generated == 1 {
			s.firstToken = now
			e.m.promptTokens += int64(s.prompt)
			e.m.ttft.observe(now.Sub(s.arrival).Seconds())
		}
		reason := ""
		if s.eosAfter > 0 && s.generated >= s.eosAfter {
			reason = FinishStop
		} else if s.generated >= s.maxOut {
			reason = FinishLength
		}
		e.events = append(e.events, event{kind: evToken, s: s, t: now, k: s.generated, reason: reason})
		if reason != "" {
			e.finish(s, now, reason)
			finished = true
		}
	}
	e.scheduled = e.scheduled[:0]
	e.inStep = false
	if finished {
		kept := e.running[:0]
		for _, s := range e.running {
			if s.state == stRunning {
				kept = append(kept, s)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
}

func (e *engine) finish(s *seq, now time.Time, reason string) {
	e.release(s)
	s.state = stFinished
	e.m.finished(reason, now.Sub(s.arrival).Seconds())
	rec := s.record(e.replica, now, reason)
	e.events = append(e.events, event{kind: evFinish, s: s, t: now, reason: reason, rec: &rec})
}

// abort finishes s with FinishAbort wherever it is. A request scheduled in
// the current step is skipped when the step ends.
func (e *engine) abort(s *seq, now time.Time) {
	switch s.state {
	case stFinished:
		return
	case stWaiting:
		e.waiting.remove(s)
	case stRunning:
		for i, r := range e.running {
			if r == s {
				e.removeRunning(i)
				break
			}
		}
	}
	e.finish(s, now, FinishAbort)
}

// takeEvents appends the pending events to buf and clears them.
func (e *engine) takeEvents(buf []event) []event {
	buf = append(buf, e.events...)
	clear(e.events)
	e.events = e.events[:0]
	return buf
}
