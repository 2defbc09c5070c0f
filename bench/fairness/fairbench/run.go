package fairbench

import (
	"container/heap"
	"fmt"
	"strconv"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
)

// SamplePeriod is how often a run samples the engines (utilisation) and the
// teams' service (the service gap), in virtual time.
const SamplePeriod = 50 * time.Millisecond

// quantum is the lockstep step of a run whose replicas change over time:
// each replica is then its own vllmsim.Sim, advanced together, and the
// gateway hears of completions at the end of the quantum (at most this
// late). With a fixed set of replicas one Sim runs them all and nothing is
// late.
const quantum = time.Millisecond

// RunOptions tune one run.
type RunOptions struct {
	// Mode is the engine behaviour: ModeVLLM or Mode45561.
	Mode string
	// Seed seeds the workload (0: the scenario's seed).
	Seed uint64
	// Requests, when set, is called once the run is over with every
	// request of the run in arrival order (times set; -1 for what never
	// happened) and the run's end: for measures the Result does not keep
	// (a spill scenario's TTFTs of a window, spill.go).
	Requests func(reqs []*Request, end time.Duration)
	// Drain is how long the run goes on after the scenario's duration so
	// that requests in flight can finish (0: half the duration). Requests
	// still unfinished after it enter the latency percentiles censored.
	Drain time.Duration
}

// EngineConfig returns the vllmsim configuration of one replica of s under
// the given engine policy and mode.
func EngineConfig(s *Scenario, policy, mode string) (vllmsim.EngineConfig, error) {
	var c vllmsim.EngineConfig
	switch s.Engine.Preset {
	case "test":
		c = vllmsim.TestConfig()
	case "", "demo":
		c = vllmsim.DemoConfig()
	case "h100-8b", "default":
		c = vllmsim.DefaultConfig()
	default:
		return c, fmt.Errorf("scenario %s: engine.preset: unknown preset %q (test, demo, h100-8b)", s.Name, s.Engine.Preset)
	}
	e := s.Engine
	if e.MaxNumSeqs > 0 {
		c.MaxNumSeqs = e.MaxNumSeqs
	}
	if e.MaxBatchedTokens > 0 {
		c.MaxBatchedTokens = e.MaxBatchedTokens
	}
	if e.NumBlocks > 0 {
		c.NumBlocks = e.NumBlocks
	}
	if e.BlockSize > 0 {
		c.BlockSize = e.BlockSize
	}
	if e.MaxModelLen > 0 {
		c.MaxModelLen = e.MaxModelLen
	}
	c.EnablePrefixCaching = e.PrefixCaching
	if max := (c.NumBlocks - 1) * c.BlockSize; c.MaxModelLen > max {
		c.MaxModelLen = max
	}
	c.Policy = vllmsim.Policy(policy)
	if mode == Mode45561 {
		c.WaitingPreempt = vllmsim.WaitingPreempt45561
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	return c, nil
}

// capacityAt returns the pool's C for a number of replicas: the explicit
// value if set, else replicas × max_num_seqs.
func (s *Scenario) capacityAt(replicas, explicit, maxNumSeqs int) int {
	if explicit > 0 {
		return explicit
	}
	return replicas * maxNumSeqs
}

// event is one of the run's own events.
type event struct {
	at  time.Duration
	seq uint64
	f   func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// replica is one engine replica of the pool.
type replica struct {
	sim    *vllmsim.Sim
	idx    int // replica index inside sim
	active bool
	out    int
}

// runner drives one run.
type runner struct {
	s    *Scenario
	gw   Gateway
	cfg  vllmsim.EngineConfig
	seed uint64

	lockstep bool
	sims     []*vllmsim.Sim
	reps     []*replica

	q        eventQueue
	nseq     uint64
	now      time.Duration
	inflight int
	open     int
	nextID   int64
	reqs     []*Request
	col      *collector
	progress ProgressObserver
	deferred []func()
	capacity []CapacitySample // the gateway's C by sample (elastic.go)
	users    map[[2]int]*closedUser
}

// Noter is a gateway with remarks on its run (faults it met and went
// on from), kept in Result.Notes.
type Noter interface {
	// Notes returns the remarks, called once the run is over.
	Notes() []string
}

// Run runs scenario s with gateway gw in virtual time and returns its
// measures. The same scenario, gateway, options and seed give the same
// result.
func Run(s *Scenario, gw Gateway, opt RunOptions) (*Result, error) {
	cfg, err := EngineConfig(s, gw.EnginePolicy(), opt.Mode)
	if err != nil {
		return nil, err
	}
	seed := opt.Seed
	if seed == 0 {
		seed = s.Seed
	}
	r := &runner{s: s, gw: gw, cfg: cfg, seed: seed, col: newCollector(s)}
	r.progress, _ = gw.(ProgressObserver)
	r.lockstep = len(s.CapacityChanges) > 0
	if s.Spill != nil && r.lockstep {
		return nil, fmt.Errorf("run %s: spill scenarios have no capacity_changes", s.Name)
	}
	n := s.Replicas()
	if r.lockstep {
		for i := 0; i < n; i++ {
			r.addSim()
		}
	} else {
		sim := vllmsim.NewSim(cfg, n, seed)
		sim.KeepRecords = false
		r.sims = append(r.sims, sim)
		for i := 0; i < n; i++ {
			r.reps = append(r.reps, &replica{sim: sim, idx: i, active: true})
		}
	}
	capacity := s.capacityAt(n, s.Capacity, cfg.MaxNumSeqs)
	if err := gw.Start(r, s, capacity); err != nil {
		return nil, fmt.Errorf("run %s/%s: %w", s.Name, gw.Name(), err)
	}
	defer gw.Close()

	// Workload.
	for _, q := range OpenLoopArrivals(s, seed) {
		q := q
		r.at(q.Arrival, func() { r.arrive(q) })
	}
	r.users = map[[2]int]*closedUser{}
	for _, u := range closedUsers(s, seed) {
		u := u
		r.users[[2]int{u.stream, u.user}] = u
		start := Sec(u.w.Start)
		r.at(start, func() { r.closedNext(u) })
	}
	for _, c := range s.CapacityChanges {
		c := c
		r.at(Sec(c.At), func() { r.changeCapacity(c) })
	}
	end := Sec(s.Duration)
	drain := opt.Drain
	if drain <= 0 {
		drain = end / 2
	}
	hard := end + drain
	var tick, sample func()
	tick = func() {
		r.gw.Tick()
		if r.now < end || r.open > 0 {
			r.after(TickPeriod, tick)
		}
	}
	sample = func() {
		r.sample()
		if r.now < end {
			r.after(SamplePeriod, sample)
		}
	}
	r.at(TickPeriod, tick)
	r.at(0, sample)

	if !r.lockstep {
		// One Sim: the run's events share its queue.
		r.sims[0].RunUntil(vllmsim.SimEpoch.Add(hard))
	} else {
		for len(r.q) > 0 {
			t := r.q[0].at
			if t > hard {
				break
			}
			r.advance(t)
			for len(r.q) > 0 && r.q[0].at <= r.now {
				ev := heap.Pop(&r.q).(event)
				r.now = max(r.now, ev.at)
				ev.f()
			}
			if r.now >= end && r.open == 0 {
				break
			}
		}
	}
	if e, ok := gw.(interface{ Err() error }); ok && e.Err() != nil {
		return nil, fmt.Errorf("run %s/%s: %w", s.Name, gw.Name(), e.Err())
	}
	stop := r.now
	if r.open > 0 {
		if r.lockstep {
			r.advance(hard)
		}
		stop = hard
	}
	res := r.col.result(r.reqs, stop)
	if opt.Requests != nil {
		opt.Requests(r.reqs, stop)
	}
	res.Capacity, res.Ledger = r.capacity, r.ledger()
	res.Policy = gw.Name()
	res.Mode = opt.Mode
	if n, ok := gw.(Noter); ok {
		res.Notes = n.Notes()
	}
	if sr, ok := gw.(SpillReporter); ok {
		res.Spill = sr.SpillStats()
	}
	return res, nil
}

func (r *runner) addSim() {
	sim := vllmsim.NewSim(r.cfg, 1, r.seed+uint64(len(r.sims)))
	sim.KeepRecords = false
	sim.RunUntil(vllmsim.SimEpoch.Add(r.now))
	r.sims = append(r.sims, sim)
	r.reps = append(r.reps, &replica{sim: sim, idx: 0, active: true})
}

func (r *runner) at(t time.Duration, f func()) {
	if !r.lockstep {
		r.sims[0].At(vllmsim.SimEpoch.Add(t), func() {
			r.now = max(r.now, r.sims[0].Now().Sub(vllmsim.SimEpoch))
			f()
		})
		return
	}
	r.nseq++
	heap.Push(&r.q, event{at: t, seq: r.nseq, f: f})
}

func (r *runner) after(d time.Duration, f func()) { r.at(r.now+d, f) }

// After implements Dispatcher.
func (r *runner) After(d time.Duration, f func()) { r.after(max(d, 0), f) }

// advance runs the engines of a lockstep run up to t.
func (r *runner) advance(t time.Duration) {
	for r.now < t {
		next := min(r.now+quantum, t)
		for _, sim := range r.sims {
			sim.RunUntil(vllmsim.SimEpoch.Add(next))
		}
		r.now = next
		for len(r.deferred) > 0 {
			d := r.deferred
			r.deferred = nil
			for _, f := range d {
				f()
			}
		}
	}
}

// Now implements Dispatcher.
func (r *runner) Now() time.Duration { return r.now }

// InFlight implements Dispatcher.
func (r *runner) InFlight() int { return r.inflight }

func (r *runner) arrive(q *Request) {
	r.nextID++
	q.ID = r.nextID
	q.Submitted, q.FirstToken, q.Finished = -1, -1, -1
	maxLen := r.cfg.MaxModelLen
	if q.Prompt > maxLen-2 {
		q.Prompt = maxLen - 2
	}
	if q.Prompt+q.Output > maxLen {
		q.Output = maxLen - q.Prompt
	}
	if q.MaxTokens > maxLen-q.Prompt {
		// vLLM answers 400 to prompt + max_tokens > max_model_len: the
		// client asks for what fits.
		q.MaxTokens = maxLen - q.Prompt
	}
	r.reqs = append(r.reqs, q)
	r.open++
	r.col.arrive(q)
	r.gw.Arrive(q)
}

func (r *runner) closedNext(u *closedUser) {
	q := u.next(r.now)
	if q == nil {
		return
	}
	r.arrive(q)
}

// Submit implements Dispatcher.
func (r *runner) Submit(q *Request, priority int) {
	var rep *replica
	if r.lockstep {
		for _, p := range r.reps {
			if p.active && (rep == nil || p.out < rep.out) {
				rep = p
			}
		}
	}
	if r.s.Spill != nil {
		rep = r.poolReplica(q)
	}
	q.Submitted = r.now
	q.Priority = priority
	r.inflight++
	r.col.maxInFlight = max(r.col.maxInFlight, r.inflight)
	if q.Borrowing {
		r.col.borrowing++
		r.col.maxBorrowing = max(r.col.maxBorrowing, r.col.borrowing)
	}
	vr := vllmsim.Request{ID: strconv.FormatInt(q.ID, 10), Priority: int64(priority), PromptTokens: q.Prompt,
		MaxTokens: q.MaxTokens, EOSAfter: q.Output, HashIDs: q.HashIDs}
	cb := vllmsim.Callbacks{
		OnAdmit: func(_ int, _ time.Time) { r.col.admit(q) },
		OnToken: func(_ int, k int, at time.Time) {
			t := at.Sub(vllmsim.SimEpoch)
			if k == 1 {
				q.FirstToken = t
			}
			r.col.token(q, k, t)
			if r.progress != nil {
				r.progress.Progress(q, k)
			}
		},
		OnFinish: func(rec vllmsim.Record) {
			q.Finished = rec.Finished.Sub(vllmsim.SimEpoch)
			if !rec.Admitted.IsZero() {
				r.col.occupy(q, rec.Admitted.Sub(vllmsim.SimEpoch), q.Finished)
			}
			q.Preemptions = rec.Preemptions
			q.CachedTokens = rec.CachedTokens
			q.Output = rec.CompletionTokens
			rep.out--
			r.inflight--
			if q.Borrowing {
				r.col.borrowing--
			}
			if r.lockstep {
				r.deferred = append(r.deferred, func() { r.finish(q) })
			} else {
				r.now = q.Finished
				r.finish(q)
			}
		},
	}
	if r.lockstep {
		rep.sim.Submit(vr, cb)
		for i, p := range r.reps {
			if p == rep {
				q.Replica = i
			}
		}
	} else if rep != nil {
		r.sims[0].SubmitTo(rep.idx, vr, cb)
		q.Replica = rep.idx
	} else {
		h := r.sims[0].Submit(vr, cb)
		q.Replica = h.Replica()
		rep = r.reps[h.Replica()]
	}
	rep.out++
}

// finish tells the gateway of a completion and schedules a closed-loop
// user's next request.
func (r *runner) finish(q *Request) {
	r.open--
	r.gw.Finish(q)
	if q.Client >= 0 {
		u := r.users[[2]int{q.Stream, q.Client}]
		think := Sec(u.w.ThinkTime)
		r.at(q.Finished+think, func() { r.closedNext(u) })
	}
}

func (r *runner) changeCapacity(c CapacityChange) {
	for len(r.reps) < c.Replicas {
		r.addSim()
	}
	for i, p := range r.reps {
		p.active = i < c.Replicas
	}
	r.gw.SetCapacity(r.s.capacityAt(c.Replicas, c.Capacity, r.cfg.MaxNumSeqs))
}

func (r *runner) sample() {
	var kv, slots float64
	n := 0
	for _, p := range r.reps {
		if !p.active && p.sim.Running(p.idx) == 0 {
			continue
		}
		n++
		kv += float64(p.sim.KVBlocksUsed(p.idx)) / float64(r.cfg.NumBlocks-1)
		slots += float64(p.sim.Running(p.idx)) / float64(r.cfg.MaxNumSeqs)
	}
	if n > 0 {
		kv /= float64(n)
		slots /= float64(n)
	}
	r.col.sample(r.now, kv, slots)
	r.sampleCapacity(&r.capacity)
}
