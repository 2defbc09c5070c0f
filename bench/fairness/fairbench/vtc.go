package fairbench

// vtc is the Virtual Token Counter fair queue.
type vtc struct {
	d        Dispatcher
	s        *Scenario
	capacity int
	order    []string
	weight   map[string]float64
	counter  map[string]float64
	queue    map[string]*fifo
	// charged is the output already charged per request (Progress).
	charged  map[int64]int
	lastLeft string
}

// NewVTC returns the VTC baseline (Sheng et al., OSDI'24): a gateway-side
// fair queue on virtual token counters. Each team's counter grows by its
// service divided by its share (input tokens weigh 1, output tokens 2; input
// is charged at dispatch, output as it is generated when the runner reports
// progress, otherwise at completion). While the pool has fewer than C
// requests in flight, the gateway dispatches the oldest request of the
// backlogged team with the smallest counter (ties: configuration order).
// Counter lift: a team that becomes backlogged has its counter raised to the
// smallest counter of the other backlogged teams, or, if none is backlogged,
// to the counter of the team served last, so idle time earns no credit.
// VTC holds requests at the gateway; the engines run fcfs.
func NewVTC() Gateway { return &vtc{} }

func (g *vtc) Name() string         { return "vtc" }
func (g *vtc) EnginePolicy() string { return EngineFCFS }

func (g *vtc) Start(d Dispatcher, s *Scenario, c int) error {
	g.d, g.s, g.capacity = d, s, c
	g.weight = map[string]float64{}
	g.counter = map[string]float64{}
	g.queue = map[string]*fifo{}
	g.charged = map[int64]int{}
	for _, t := range s.Teams {
		g.order = append(g.order, t.Name)
		g.weight[t.Name] = t.Share
		g.queue[t.Name] = &fifo{}
	}
	return nil
}

func (g *vtc) SetCapacity(c int) {
	g.capacity = c
	g.dispatch()
}

func (g *vtc) Arrive(r *Request) {
	q := g.queue[r.Team]
	if q.len() == 0 {
		g.lift(r.Team)
	}
	q.push(r)
	g.dispatch()
}

// lift applies VTC's counter lift to a team that becomes backlogged.
func (g *vtc) lift(team string) {
	floor, found := 0.0, false
	for _, t := range g.order {
		if t == team || g.queue[t].len() == 0 {
			continue
		}
		if !found || g.counter[t] < floor {
			floor, found = g.counter[t], true
		}
	}
	if !found && g.lastLeft != "" {
		floor, found = g.counter[g.lastLeft], true
	}
	if found && g.counter[team] < floor {
		g.counter[team] = floor
	}
}

// Progress charges output tokens as they are generated: generated is the
// request's total number of output tokens so far.
func (g *vtc) Progress(r *Request, generated int) {
	if d := generated - g.charged[r.ID]; d > 0 {
		g.counter[r.Team] += float64(d) * OutputWeight / g.weight[r.Team]
		g.charged[r.ID] = generated
	}
}

func (g *vtc) Finish(r *Request) {
	g.Progress(r, r.Output)
	delete(g.charged, r.ID)
	g.dispatch()
}

func (g *vtc) dispatch() {
	for g.d.InFlight() < g.capacity {
		best := ""
		for _, t := range g.order {
			if g.queue[t].len() == 0 {
				continue
			}
			if best == "" || g.counter[t] < g.counter[best] {
				best = t
			}
		}
		if best == "" {
			return
		}
		r := g.queue[best].pop()
		g.counter[best] += float64(r.Prompt) * InputWeight / g.weight[best]
		g.charged[r.ID] = 0
		g.lastLeft = best
		g.d.Submit(r, 0)
	}
}

func (g *vtc) Tick()  {}
func (g *vtc) Close() {}

// ProgressObserver is implemented by gateways that want to hear of output
// tokens as they are generated (VTC charges them as they come).
type ProgressObserver interface {
	// Progress reports that r has generated this many output tokens so
	// far.
	Progress(r *Request, generated int)
}
