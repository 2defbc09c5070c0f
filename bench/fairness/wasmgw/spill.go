package wasmgw

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// Spill scenarios (fairbench.SpillSpec, S8): the configuration has one
// pool per scenario pool, each serving the model "m-<pool>" with its
// teams (shares normalised over the pool), hold_headers "on" (the host
// runs with allow_on_headers_stop_iteration, as envoy.yaml), and, unless
// Options.NoSpill, each pool's spill_to. A request names its team's pool's
// model; the engine replicas that serve it are those of the pool the
// plugin named in the x-fairshare-pool request header it released, as
// envoy.yaml's routes choose the cluster. After every submission the
// gateway reads every pool's record (the plugin's own count) and keeps the
// bounds in fairbench.SpillStats; a spilled request that leaves its
// fallback with more than C in flight, or a pool with more than C
// borrowers, fails the run.

// spillModel is the model a request of pool names.
func spillModel(pool string) string { return "m-" + pool }

// SpillConfig returns the plugin configuration of spill scenario s: Config's
// settings (user_header included) with flow (required) and one pool per
// scenario pool; withSpill writes the pools' spill_to.
func SpillConfig(s *fairbench.Scenario, flow *Flow, cost *fairbench.CostSpec, withSpill bool) ([]byte, error) {
	return spillConfig(s, flow, cost, withSpill, true)
}

// spillConfig is SpillConfig, with user_header only if users
// (Options.NoUsers).
func spillConfig(s *fairbench.Scenario, flow *Flow, cost *fairbench.CostSpec, withSpill, users bool) ([]byte, error) {
	if flow == nil {
		return nil, fmt.Errorf("spill scenario %s needs flow control (hold_headers \"on\")", s.Name)
	}
	e, err := fairbench.EngineConfig(s, fairbench.EnginePriority, fairbench.ModeVLLM)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	configHead(&b, s, cost, users)
	fmt.Fprintf(&b, `"max_queue_time":%q,"dispatch_tick":%q,"hold_headers":"on","hold_headers_probe":"1m",`, flow.MaxQueueTime.String(), flow.tick().String())
	if flow.BatchAging != "" {
		fmt.Fprintf(&b, `"batch_aging":%q,`, flow.BatchAging)
	}
	b.WriteString(`"pools":[`)
	for i, p := range s.Spill.Pools {
		if i > 0 {
			b.WriteString(",")
		}
		c := s.Spill.CapacityOf(i, e.MaxNumSeqs)
		fmt.Fprintf(&b, `{"name":%q,"capacity":%d,`, p.Name, c)
		if flow.KV {
			fmt.Fprintf(&b, `"kv_tokens":%d,`, e.NumBlocks*e.BlockSize*p.Replicas)
		}
		if flow.EnginePriority != "" {
			fmt.Fprintf(&b, `"engine_priority":%q,`, flow.EnginePriority)
		}
		if withSpill && len(p.SpillTo) > 0 {
			to, _ := json.Marshal(p.SpillTo)
			fmt.Fprintf(&b, `"spill_to":%s,`, to)
		}
		fmt.Fprintf(&b, `"models":[%q],"teams":{`, spillModel(p.Name))
		sum := 0.0
		for _, t := range p.Teams {
			sum += s.Share(t)
		}
		for j, name := range p.Teams {
			if j > 0 {
				b.WriteString(",")
			}
			var t fairbench.TeamSpec
			for _, st := range s.Teams {
				if st.Name == name {
					t = st
				}
			}
			n, _ := json.Marshal(name)
			fmt.Fprintf(&b, `%s:{"share":%s`, n, strconv.FormatFloat(t.Share/sum, 'g', -1, 64))
			if t.Weight > 0 {
				fmt.Fprintf(&b, `,"weight":%s`, strconv.FormatFloat(t.Weight, 'g', -1, 64))
			}
			if flow.Lend && t.LendingLimit != nil {
				fmt.Fprintf(&b, `,"lending_limit":%s`, strconv.FormatFloat(*t.LendingLimit, 'g', -1, 64))
			}
			b.WriteString("}")
		}
		b.WriteString("}}")
	}
	b.WriteString("]}")
	return []byte(b.String()), nil
}

// spillState is a spill run's bounds (nil outside spill scenarios).
type spillState struct {
	stats fairbench.SpillStats
	caps  []int
}

// startSpill prepares the bounds of a spill run.
func (g *Gateway) startSpill() error {
	e, err := fairbench.EngineConfig(g.s, fairbench.EnginePriority, fairbench.ModeVLLM)
	if err != nil {
		return err
	}
	st := &spillState{}
	for i, p := range g.s.Spill.Pools {
		c := g.s.Spill.CapacityOf(i, e.MaxNumSeqs)
		st.caps = append(st.caps, c)
		st.stats.Pools = append(st.stats.Pools, fairbench.SpillPoolStats{Name: p.Name, Capacity: c, MaxAfterSpill: -1})
	}
	g.spill = st
	return nil
}

// spillRouted reads the pool the plugin routed r to from the request
// headers it released (x-fairshare-pool, x-fairshare-spilled-from).
func (g *Gateway) spillRouted(r *fairbench.Request, s *host.Stream) {
	r.Pool, r.SpilledFrom = "", ""
	for _, kv := range s.RequestHeaderMap() {
		switch kv[0] {
		case "x-fairshare-pool":
			r.Pool = kv[1]
		case "x-fairshare-spilled-from":
			r.SpilledFrom = kv[1]
		}
	}
	if g.s.Spill.Index(r.Pool) < 0 {
		g.fail(fmt.Errorf("wasmgw: request %d (team %s): released with x-fairshare-pool %q, no pool of the scenario", r.ID, r.Team, r.Pool))
	}
}

// spillCheck runs after the submission of r: every pool's record, as the
// plugin counts it, against the bounds.
func (g *Gateway) spillCheck(r *fairbench.Request) {
	st := g.spill
	to := g.s.Spill.Index(r.Pool)
	for i, p := range g.s.Spill.Pools {
		v, _, ok := g.h.SharedData("fairshare/fairshare/pool/" + p.Name + "/v" + strconv.Itoa(fairshare.RecordVersion))
		if !ok {
			continue
		}
		var pool fairshare.Pool
		if err := pool.UnmarshalBinary(v); err != nil {
			g.fail(fmt.Errorf("wasmgw: decode pool %s: %w", p.Name, err))
			return
		}
		n, borrowing := 0, 0
		for _, t := range pool.Snapshot(fairbench.Epoch.Add(g.d.Now())) {
			n += t.InFlight + t.Phantoms
			borrowing += t.Borrowing
		}
		ps := &st.stats.Pools[i]
		ps.MaxInFlight = max(ps.MaxInFlight, n)
		ps.MaxBorrowing = max(ps.MaxBorrowing, borrowing)
		if borrowing > st.caps[i] {
			g.fail(fmt.Errorf("wasmgw: after request %d: pool %s has %d borrowers in flight, C = %d", r.ID, p.Name, borrowing, st.caps[i]))
		}
		if r.SpilledFrom != "" && i == to {
			ps.MaxAfterSpill = max(ps.MaxAfterSpill, n)
			if n > st.caps[i] {
				g.fail(fmt.Errorf("wasmgw: request %d spilled from %s into %s, which then has %d in flight, C = %d", r.ID, r.SpilledFrom, p.Name, n, st.caps[i]))
			}
		}
	}
	if r.SpilledFrom != "" {
		st.stats.Pools[to].SpilledIn++
		if from := g.s.Spill.Index(r.SpilledFrom); from >= 0 {
			st.stats.Pools[from].SpilledOut++
		}
		if r.Arrival >= fairbench.Sec(g.s.Spill.SaturatedAt) {
			st.stats.Crossings++
		}
	}
}

// SpillStats implements fairbench.SpillReporter (nil outside spill
// scenarios).
func (g *Gateway) SpillStats() *fairbench.SpillStats {
	if g.spill == nil {
		return nil
	}
	st := g.spill.stats
	return &st
}
