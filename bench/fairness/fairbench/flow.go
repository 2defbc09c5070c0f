package fairbench

import (
	"fmt"
	"math"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// Native flow-control ablations: the flow control of the fairshare core
// (Pool.Arrive, Dispatch; KV tokens as a second resource; lending limits)
// run in the benchmark's process with one holder, as plugin.wasm runs it
// across its VMs. A borrower that does not fit is held at the gateway and
// dispatched, at the priority decided then, as soon as a completion frees
// room for it.
const (
	// AblationNativeFlow: holding on, kv_tokens, the scenario's lending
	// limits.
	AblationNativeFlow = "native-flow"
	// AblationNativeFlowNoKV: as AblationNativeFlow without kv_tokens.
	AblationNativeFlowNoKV = "native-flow-nokv"
	// AblationNativeFlowNoLend: as AblationNativeFlow without lending
	// limits.
	AblationNativeFlowNoLend = "native-flow-nolend"
	// AblationNativeFlowMaxTokens: as AblationNativeFlow with the KV
	// demand taken as prompt + max_tokens instead of prompt + the team's
	// mean completion.
	AblationNativeFlowMaxTokens = "native-flow-maxtok"
)

// meanWeight is the weight of a new observation in a team's running mean
// of completion tokens (an exponentially weighted mean over about the
// last 16 completions).
const meanWeight = 1.0 / 16

// NativeQueueTime is MaxQueueTime of the native flow ablations: long
// enough that nothing times out in the benchmark.
const NativeQueueTime = 600 * time.Second

// NativeBatchAging is BatchAging of the native flow ablations: the
// plugin's default batch_aging (plugin.DefaultBatchAging), so that they
// decide as plugin.wasm does.
const NativeBatchAging = 2 * time.Second

// nativeFlow is the native flow-control gateway.
type nativeFlow struct {
	native
	kv, lend, maxTok bool
	held             map[uint64]*Request
	// mean is each team's running mean of completion tokens, and seen
	// whether it has had an observation.
	mean map[string]float64
	seen map[string]bool
}

func newNativeFlow(name string, kv, lend, maxTok bool) NewGateway {
	return func() Gateway {
		return &nativeFlow{native: native{name: name}, kv: kv, lend: lend, maxTok: maxTok}
	}
}

// tokens returns r's KV demand: its prompt plus the expected completion,
// the team's running mean of completions (the client's max_tokens before
// the team's first completion, and never above it), or max_tokens itself
// with maxTok.
func (g *nativeFlow) tokens(r *Request) int64 {
	t := Tokens(r)
	if g.maxTok || !g.seen[r.Team] {
		return t
	}
	return min(t, int64(r.Prompt)+int64(math.Ceil(g.mean[r.Team])))
}

// work is a request's work demand as plugin.wasm estimates it: its
// prompt at InputWeight and the completion of its KV demand (tokens) at
// OutputWeight (the plugin's workOf under the default cost weights).
func (g *nativeFlow) work(r *Request) float64 {
	return float64(r.Prompt)*InputWeight + float64(g.tokens(r)-int64(r.Prompt))*OutputWeight
}

// KVTokens returns the pool's KV capacity in tokens for capacity c:
// num_gpu_blocks × block_size of one engine of s, times c / max_num_seqs
// replicas (the plugin's kv_tokens in the benchmark).
func KVTokens(s *Scenario, c int) (int64, error) {
	e, err := EngineConfig(s, EnginePriority, ModeVLLM)
	if err != nil {
		return 0, err
	}
	return int64(e.NumBlocks) * int64(e.BlockSize) * int64(c) / int64(e.MaxNumSeqs), nil
}

// Tokens returns a request's KV-token demand as a gateway knows it: its
// prompt plus the max_tokens the client sent (DefaultMaxTokens if none).
func Tokens(r *Request) int64 {
	out := r.MaxTokens
	if out <= 0 {
		out = DefaultMaxTokens
	}
	return int64(r.Prompt + out)
}

func (g *nativeFlow) config(c int) (fairshare.Config, error) {
	cfg := g.cfg
	cfg.Capacity = c
	cfg.QueueLimit = 1 << 16
	cfg.MaxQueueTime = NativeQueueTime
	cfg.BatchAging = NativeBatchAging
	cfg.KVTokens = 0
	// The scenario's plugin_throughput, as the plugin column declares it.
	cfg.Throughput = g.s.PluginThroughput
	cfg.ThroughputBurst = time.Duration(g.s.PluginThroughputBurst * float64(time.Second))
	if g.kv {
		kv, err := KVTokens(g.s, c)
		if err != nil {
			return cfg, err
		}
		cfg.KVTokens = kv
	}
	cfg.Teams = nil
	for _, t := range g.s.Teams {
		tc := fairshare.TeamConfig{Name: t.Name, Share: t.Share, Weight: t.Weight}
		if g.lend && t.LendingLimit != nil {
			tc.LendingLimit = fairshare.Limit(*t.LendingLimit)
		}
		cfg.Teams = append(cfg.Teams, tc)
	}
	return cfg, nil
}

func (g *nativeFlow) Start(d Dispatcher, s *Scenario, c int) error {
	if err := g.native.Start(d, s, c); err != nil {
		return err
	}
	g.held = map[uint64]*Request{}
	g.mean, g.seen = map[string]float64{}, map[string]bool{}
	cfg, err := g.config(c)
	if err != nil {
		return err
	}
	g.cfg = cfg
	g.pool = fairshare.NewPool("bench", cfg, g.now())
	return nil
}

func (g *nativeFlow) Arrive(r *Request) {
	gr, _, out := g.pool.Arrive(g.now(), fairshare.Request{Holder: 1, ID: uint64(r.ID), Team: r.Team,
		Class: fairshare.Class(r.Class), Tokens: g.tokens(r), Estimate: Estimate(r), Work: g.work(r)})
	switch out {
	case fairshare.Granted:
		g.submit(r, gr)
	case fairshare.Queued:
		g.held[uint64(r.ID)] = r
	default:
		panic(fmt.Sprintf("fairbench: %s: request %d refused: %v", g.name, r.ID, out))
	}
}

func (g *nativeFlow) submit(r *Request, gr fairshare.Grant) {
	g.grants[r.ID] = gr
	r.Borrowing = gr.Borrowing
	g.d.Submit(r, gr.Priority)
}

// dispatch sends the held requests that may go now, best standing first.
func (g *nativeFlow) dispatch() {
	for {
		gr, w, st := g.pool.Dispatch(g.now(), 1)
		if st != fairshare.Dispatched {
			return
		}
		r := g.held[w.ID]
		delete(g.held, w.ID)
		g.submit(r, gr)
	}
}

func (g *nativeFlow) Finish(r *Request) {
	if g.seen[r.Team] {
		g.mean[r.Team] += meanWeight * (float64(r.Output) - g.mean[r.Team])
	} else {
		g.mean[r.Team], g.seen[r.Team] = float64(r.Output), true
	}
	g.native.Finish(r)
	// As plugin.wasm does: the held requests of the team are re-estimated
	// with what has been learnt (a demand is only ever lowered).
	for id, h := range g.held {
		if h.Team == r.Team {
			g.pool.Reestimate(g.now(), 1, id, g.tokens(h))
			g.pool.ReestimateWork(g.now(), 1, id, g.work(h))
		}
	}
	g.dispatch()
}

func (g *nativeFlow) SetCapacity(c int) {
	cfg, err := g.config(c)
	if err != nil {
		panic(err)
	}
	g.cfg = cfg
	g.pool.Reconfigure(g.now(), cfg)
	g.dispatch()
}

func (g *nativeFlow) Tick() {
	g.native.Tick()
	g.dispatch()
}
