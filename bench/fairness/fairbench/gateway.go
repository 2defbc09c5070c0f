package fairbench

import (
	"math"
	"time"
)

// Engine scheduling policies (vLLM's --scheduling-policy).
const (
	EngineFCFS     = "fcfs"
	EnginePriority = "priority"
)

// Dispatcher is what a gateway sees of the pool: the clock and a way to
// submit a request to an engine.
type Dispatcher interface {
	// Now returns the virtual time.
	Now() time.Duration
	// Submit sends r to an engine replica with the given vLLM priority.
	// The gateway's Finish is called when r completes.
	Submit(r *Request, priority int)
	// InFlight returns the number of submitted, unfinished requests.
	InFlight() int
	// After runs f on the simulation's thread d of virtual time from now
	// (a gateway's own timers, e.g. the plugin's dispatch tick).
	After(d time.Duration, f func())
}

// Gateway decides when each request goes to the engines and with which
// priority. A run calls Start once, then Arrive for every request in arrival
// order and Finish for every completion, SetCapacity on capacity changes and
// Tick periodically, all from the simulation's single thread.
type Gateway interface {
	// Name is the column name of the policy in the tables.
	Name() string
	// EnginePolicy is the engines' scheduling policy under this gateway
	// (EngineFCFS or EnginePriority).
	EnginePolicy() string
	// Start prepares the gateway for a run of s with the pool capacity C.
	Start(d Dispatcher, s *Scenario, capacity int) error
	// Arrive is called when r reaches the gateway; the gateway submits it
	// now or later.
	Arrive(r *Request)
	// Finish is called when r has completed (r.Finished is set).
	Finish(r *Request)
	// SetCapacity tells the gateway the pool's new C.
	SetCapacity(capacity int)
	// Tick is called every TickPeriod of virtual time.
	Tick()
	// Close releases the gateway's resources.
	Close()
}

// TickPeriod is the period of Gateway.Tick in virtual time.
const TickPeriod = 100 * time.Millisecond

// NewGateway is a constructor of a gateway policy, so that every run gets a
// fresh one.
type NewGateway func() Gateway

// passThrough submits every request on arrival with priority prio(r).
type passThrough struct {
	name   string
	policy string
	prio   func(*Request) int
	d      Dispatcher
}

// NewFCFS returns the FCFS baseline: no plugin, every request goes straight
// to vLLM's fcfs scheduler.
func NewFCFS() Gateway {
	return &passThrough{name: "fcfs", policy: EngineFCFS, prio: func(*Request) int { return 0 }}
}

// NewClassPriority returns the class-only baseline: vLLM's priority
// scheduler with priority 0 for interactive and 1 for batch requests, no
// notion of teams.
func NewClassPriority() Gateway {
	return &passThrough{name: "class", policy: EnginePriority, prio: func(r *Request) int { return int(r.Class) }}
}

func (g *passThrough) Name() string         { return g.name }
func (g *passThrough) EnginePolicy() string { return g.policy }
func (g *passThrough) Start(d Dispatcher, _ *Scenario, _ int) error {
	g.d = d
	return nil
}
func (g *passThrough) Arrive(r *Request) { g.d.Submit(r, g.prio(r)) }
func (g *passThrough) Finish(*Request)   {}
func (g *passThrough) SetCapacity(int)   {}
func (g *passThrough) Tick()             {}
func (g *passThrough) Close()            {}

// fifo is a FIFO queue of requests.
type fifo struct {
	q    []*Request
	head int
}

func (f *fifo) push(r *Request) { f.q = append(f.q, r) }
func (f *fifo) len() int        { return len(f.q) - f.head }
func (f *fifo) pop() *Request {
	r := f.q[f.head]
	f.q[f.head] = nil
	f.head++
	if f.head > 1024 && f.head*2 > len(f.q) {
		f.q = append([]*Request(nil), f.q[f.head:]...)
		f.head = 0
	}
	return r
}

// quota holds each team at a fixed concurrency ceiling.
type quota struct {
	d        Dispatcher
	s        *Scenario
	limit    map[string]int
	inflight map[string]int
	queue    map[string]*fifo
}

// NewQuota returns the static-quota baseline: a gateway that lets each team
// have at most ceil(share × C) requests in flight and holds the rest in a
// FIFO per team, as a concurrency limiter does. It is not work-conserving:
// capacity a team does not use stays idle. The engines run fcfs.
func NewQuota() Gateway { return &quota{} }

func (g *quota) Name() string         { return "quota" }
func (g *quota) EnginePolicy() string { return EngineFCFS }
func (g *quota) Start(d Dispatcher, s *Scenario, c int) error {
	g.d, g.s = d, s
	g.inflight = map[string]int{}
	g.queue = map[string]*fifo{}
	for _, t := range s.Teams {
		g.queue[t.Name] = &fifo{}
	}
	g.SetCapacity(c)
	return nil
}

func (g *quota) SetCapacity(c int) {
	g.limit = map[string]int{}
	for _, t := range g.s.Teams {
		l := int(math.Ceil(t.Share*float64(c) - 1e-9))
		if l < 1 {
			l = 1
		}
		g.limit[t.Name] = l
	}
	for _, t := range g.s.Teams {
		g.drain(t.Name)
	}
}

func (g *quota) Arrive(r *Request) {
	g.queue[r.Team].push(r)
	g.drain(r.Team)
}

func (g *quota) Finish(r *Request) {
	g.inflight[r.Team]--
	g.drain(r.Team)
}

func (g *quota) drain(team string) {
	q := g.queue[team]
	for q.len() > 0 && g.inflight[team] < g.limit[team] {
		g.inflight[team]++
		g.d.Submit(q.pop(), 0)
	}
}

func (g *quota) Tick()  {}
func (g *quota) Close() {}
