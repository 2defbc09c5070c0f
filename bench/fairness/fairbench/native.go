package fairbench

import (
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// Epoch is the wall-clock time that virtual time 0 of a run maps to, for
// the plugin and the fairshare core (both take time.Time).
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultHalfLife is the usage half-life of a scenario without half_life_s:
// the plugin's default (168 h), i.e. no decay within a run.
const DefaultHalfLife = 168 * time.Hour

// halfLife returns the plugin's usage half-life for s.
func (s *Scenario) halfLife() time.Duration {
	if s.HalfLife > 0 {
		return Sec(s.HalfLife)
	}
	return DefaultHalfLife
}

// DefaultMaxTokens is the plugin's completion estimate of a request
// without max_tokens (its default_max_tokens).
const DefaultMaxTokens = 512

// Estimate returns the plugin's cost estimate of a request at admission,
// in cost units: prompt tokens weigh 1 and the max_tokens the client sent
// 2 (the plugin's default cost weights; DefaultMaxTokens if none). The real
// output length is not known at admission.
func Estimate(r *Request) float64 {
	out := r.MaxTokens
	if out <= 0 {
		out = DefaultMaxTokens
	}
	return ServiceUnits(r.Prompt, out)
}

// AblationNoEntryPenalty is the native plugin policy with the entry
// penalty off: a request's cost is charged only when it completes.
const AblationNoEntryPenalty = "no-entry-penalty"

// Variant is an extra column of the ablation tables: a gateway and what it
// is.
type Variant struct {
	// New constructs the gateway.
	New NewGateway
	// Note says what the variant changes, for the report.
	Note string
	// Skip, if set, reports scenarios where the variant would be the
	// plugin column again (not run there; "—" in the tables).
	Skip func(*Scenario) bool
}

// NoLendingLimits reports whether no team of s has a lending limit.
func NoLendingLimits(s *Scenario) bool {
	for _, t := range s.Teams {
		if t.LendingLimit != nil {
			return false
		}
	}
	return true
}

// AblationVariant returns the named native ablation as a Variant (New is
// nil if the name is unknown).
func AblationVariant(name string) Variant {
	return Variant{New: NewAblation(name), Note: AblationNote(name)}
}

// AblationNote returns what a named native ablation is, for the report.
func AblationNote(name string) string {
	switch name {
	case AblationNoEntryPenalty:
		return "the plugin's algorithm run natively on package fairshare without the entry penalty"
	case AblationNativeFlow:
		return "the core's flow control run natively on package fairshare (what plugin.wasm with flow control decides, on one VM): borrowers held at the gateway, kv_tokens, the scenario's lending limits; KV demand = prompt + the team's running mean of completions (capped by max_tokens), re-estimated while held as plugin.wasm does; the plugin's default batch_aging"
	case AblationNativeFlowMaxTokens:
		return "`native-flow` with KV demand = prompt + max_tokens (the client's cap) instead of the team's mean completion"
	case AblationNativeFlowNoKV:
		return "`native-flow` without kv_tokens"
	case AblationNativeFlowNoLend:
		return "`native-flow` without lending limits (run only where the scenario has some)"
	}
	return ""
}

// NewAblation returns the constructor of a named ablation (see
// Scenario.Ablations), or nil if the name is unknown.
func NewAblation(name string) NewGateway {
	switch name {
	case AblationNoEntryPenalty:
		return func() Gateway { return &native{name: "plugin-no-penalty", noPenalty: true} }
	case AblationNativeFlow:
		return newNativeFlow(name, true, true, false)
	case AblationNativeFlowNoKV:
		return newNativeFlow(name, false, true, false)
	case AblationNativeFlowNoLend:
		return newNativeFlow(name, true, false, false)
	case AblationNativeFlowMaxTokens:
		return newNativeFlow(name, true, true, true)
	}
	return nil
}

// native runs the fairshare core in the benchmark's process.
type native struct {
	name      string
	noPenalty bool
	d         Dispatcher
	s         *Scenario
	pool      *fairshare.Pool
	cfg       fairshare.Config
	grants    map[int64]fairshare.Grant
}

// NewNativePlugin returns the plugin policy computed natively with package
// fairshare (the algorithm of plugin.wasm without Wasm, Envoy or shared
// data): one pool of capacity C with the scenario's teams, entry penalty on,
// the scenario's half-life; each request is acquired on arrival with its
// estimate (Estimate), submitted at once with the grant's priority, and
// released on completion with its consumption in + 2·out. The engines run
// vLLM's priority policy.
func NewNativePlugin() Gateway { return &native{name: "plugin-native"} }

func (g *native) Name() string         { return g.name }
func (g *native) EnginePolicy() string { return EnginePriority }

func (g *native) Start(d Dispatcher, s *Scenario, c int) error {
	g.d, g.s = d, s
	g.grants = map[int64]fairshare.Grant{}
	g.cfg = fairshare.Config{Capacity: c, HalfLife: s.halfLife(), EntryPenalty: !g.noPenalty}
	for _, t := range s.Teams {
		g.cfg.Teams = append(g.cfg.Teams, fairshare.TeamConfig{Name: t.Name, Share: t.Share, Weight: t.Weight})
	}
	g.pool = fairshare.NewPool("bench", g.cfg, g.now())
	return nil
}

func (g *native) now() time.Time { return Epoch.Add(g.d.Now()) }

func (g *native) Arrive(r *Request) {
	gr := g.pool.Acquire(g.now(), 1, r.Team, fairshare.Class(r.Class), Estimate(r))
	g.grants[r.ID] = gr
	r.Borrowing = gr.Borrowing
	g.d.Submit(r, gr.Priority)
}

func (g *native) Finish(r *Request) {
	gr, ok := g.grants[r.ID]
	if !ok {
		return
	}
	delete(g.grants, r.ID)
	g.pool.Release(g.now(), &gr, r.Service())
}

func (g *native) SetCapacity(c int) {
	g.cfg.Capacity = c
	g.pool.Reconfigure(g.now(), g.cfg)
}

func (g *native) Tick()  { g.pool.Heartbeat(g.now(), 1) }
func (g *native) Close() {}
