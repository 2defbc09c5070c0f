package fairbench

import (
	"math"
	"slices"
	"time"
)

// The llm-d / Gateway API Inference Extension EPP flow control, as two
// baseline columns. Written from the public descriptions of
// llm-d-inference-scheduler's pkg/epp/framework/plugins/flowcontrol
// (fairness/README.md, fairness/roundrobin/README.md,
// saturationdetector/{concurrency,utilization}/README.md, at commit
// 520af47) and llm-d-router's program-aware-fairness plugin (its README,
// and its LAS strategy's source read for the score), written anew here,
// not ported. The flow controller's three tiers:
//
//  1. priority: the highest band with queued requests is served first.
//     The benchmark maps its two classes to two bands (interactive above
//     batch), as an operator would with two InferenceObjectives of
//     different priority; a request's band is its class.
//  2. fairness: a policy picks the flow of that band to dispatch from. A
//     flow is a fairness ID (x-llm-d-inference-fairness-id), here the
//     team. Neither policy knows shares: flows compete as equals.
//  3. ordering: within a flow, FCFS (the default ordering policy).
//
// Requests are dispatched while the saturation detector says the pool is
// not saturated. The benchmark uses the concurrency detector in requests
// mode with the pool's C as its capacity (saturated when C requests are
// in flight), the same bound the VTC and quota gateways use. Uncertain:
// flow control's default detector is the utilization detector (waiting
// queue depth 5 per endpoint, KV cache 0.8, from metrics scraped every
// 50 ms or so), which would let a few requests queue in vLLM and react to
// KV pressure late; the concurrency detector is the one of the README's
// program-aware sample configuration and the one a simulator with exact
// in-flight counts can reproduce without inventing a metrics lag. The
// engines run fcfs (the EPP sets no vLLM priority).
//
// A dispatch happens at once when a request arrives or finishes (the real
// controller's dispatch loop polls; its latency is not modelled).

// EPP fairness policies.
const (
	// EPPRoundRobin is the round-robin-fairness-policy column.
	EPPRoundRobin = "epp-rr"
	// EPPProgramAware is the program-aware-fairness (LAS) column.
	EPPProgramAware = "epp-paf"
)

// Program-aware fairness's LAS parameters as the issue and the plugin's
// README sample configure them.
const (
	// PAFHalfLife is lasHalfLifeSeconds: the wall-clock half-life of a
	// program's attained service.
	PAFHalfLife = 60 * time.Second
	// PAFWeightService is lasWeightService, the weight of the inverted,
	// range-normalised attained service.
	PAFWeightService = 0.8
	// PAFWeightHeadWait is lasWeightHeadWait, the weight of the
	// range-normalised age of the flow's oldest queued request.
	PAFWeightHeadWait = 0.2
)

// eppGateway is the flow controller with one fairness policy.
type eppGateway struct {
	name     string
	d        Dispatcher
	capacity int
	flows    []string            // flow keys, sorted (round-robin's deterministic order)
	queue    [2]map[string]*fifo // per band (class), per flow
	// round-robin: the last flow picked, per band.
	cursor [2]string
	// program-aware: attained service per flow and when its decay was
	// last folded in.
	service map[string]float64
	anchor  map[string]time.Duration
	las     bool
}

// NewEPPRoundRobin returns the EPP flow control with the
// round-robin-fairness-policy: within the highest non-empty band, the
// flows with queued requests take turns, one dispatch each, in sorted
// key order after the flow picked last. Its unit of fairness is
// dispatches, not tokens.
func NewEPPRoundRobin() Gateway { return &eppGateway{name: EPPRoundRobin} }

// NewEPPProgramAware returns the EPP flow control with the
// program-aware-fairness policy, strategy las: each flow's attained
// service is prompt + 2 × completion tokens of its completed requests
// (from the response's usage, charged at completion), decayed with a
// half-life of PAFHalfLife; among the flows of the band with queued
// requests it picks the highest PAFWeightService × (1 − norm(service)) +
// PAFWeightHeadWait × norm(head wait), norm being the range
// normalisation (v − min) / (max − min) over those flows (0.5 when all
// are equal), head wait the age in whole milliseconds of the flow's
// oldest queued request. Uncertain: the plugin's versions differ in when
// service decays (only while a program is idle in earlier ones,
// continuously in the latest, which this follows), and the real policy
// breaks exact ties in map order where this takes the first in sorted
// key order.
func NewEPPProgramAware() Gateway { return &eppGateway{name: EPPProgramAware, las: true} }

func (g *eppGateway) Name() string         { return g.name }
func (g *eppGateway) EnginePolicy() string { return EngineFCFS }

func (g *eppGateway) Start(d Dispatcher, s *Scenario, c int) error {
	g.d, g.capacity = d, c
	g.flows = s.TeamNames()
	slices.Sort(g.flows)
	for b := range g.queue {
		g.queue[b] = map[string]*fifo{}
		for _, f := range g.flows {
			g.queue[b][f] = &fifo{}
		}
	}
	g.service = map[string]float64{}
	g.anchor = map[string]time.Duration{}
	return nil
}

func (g *eppGateway) SetCapacity(c int) {
	g.capacity = c
	g.dispatch()
}

func (g *eppGateway) Arrive(r *Request) {
	g.queue[r.Class][r.Team].push(r)
	g.dispatch()
}

func (g *eppGateway) Finish(r *Request) {
	if g.las {
		g.decay(r.Team)
		g.service[r.Team] += float64(r.Prompt)*InputWeight + float64(r.Output)*OutputWeight
	}
	g.dispatch()
}

// decay folds the decay of flow f's service up to now in.
func (g *eppGateway) decay(f string) {
	now := g.d.Now()
	if dt := now - g.anchor[f]; dt > 0 {
		g.service[f] *= math.Exp2(-dt.Seconds() / PAFHalfLife.Seconds())
	}
	g.anchor[f] = now
}

func (g *eppGateway) dispatch() {
	for g.d.InFlight() < g.capacity {
		band := -1
		for b := range g.queue {
			for _, f := range g.flows {
				if g.queue[b][f].len() > 0 {
					band = b
					break
				}
			}
			if band >= 0 {
				break
			}
		}
		if band < 0 {
			return
		}
		var f string
		if g.las {
			f = g.pickLAS(band)
		} else {
			f = g.pickRR(band)
		}
		r := g.queue[band][f].pop()
		g.d.Submit(r, 0)
	}
}

// pickRR returns the first flow with queued requests after the band's
// cursor, in sorted key order, and moves the cursor to it.
func (g *eppGateway) pickRR(band int) string {
	start := 0
	if i := slices.Index(g.flows, g.cursor[band]); i >= 0 {
		start = i + 1
	}
	for k := range g.flows {
		f := g.flows[(start+k)%len(g.flows)]
		if g.queue[band][f].len() > 0 {
			g.cursor[band] = f
			return f
		}
	}
	return ""
}

// pickLAS returns the flow of the band with the best LAS score.
func (g *eppGateway) pickLAS(band int) string {
	type entry struct {
		flow          string
		service, wait float64
	}
	var es []entry
	now := g.d.Now()
	for _, f := range g.flows {
		q := g.queue[band][f]
		if q.len() == 0 {
			continue
		}
		g.decay(f)
		head := q.q[q.head]
		wait := float64((now - head.Arrival).Milliseconds())
		es = append(es, entry{f, g.service[f], wait})
	}
	minS, maxS, minW, maxW := es[0].service, es[0].service, es[0].wait, es[0].wait
	for _, e := range es[1:] {
		minS, maxS = min(minS, e.service), max(maxS, e.service)
		minW, maxW = min(minW, e.wait), max(maxW, e.wait)
	}
	norm := func(v, lo, hi float64) float64 {
		if hi == lo {
			return 0.5
		}
		return (v - lo) / (hi - lo)
	}
	best, bestScore := "", math.Inf(-1)
	for _, e := range es {
		score := PAFWeightService*(1-norm(e.service, minS, maxS)) + PAFWeightHeadWait*norm(e.wait, minW, maxW)
		if score > bestScore {
			best, bestScore = e.flow, score
		}
	}
	return best
}

func (g *eppGateway) Tick()  {}
func (g *eppGateway) Close() {}
