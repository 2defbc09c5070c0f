package fairbench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/trace"
)

// Scenario is one benchmark scenario, read from a JSON file. Times are in
// seconds of virtual time from the start of the run.
type Scenario struct {
	// Name is the short name used for result files ("s1-flood").
	Name string `json:"name"`
	// Title is a one-line description for the tables.
	Title string `json:"title"`
	// Description says what the scenario shows (markdown).
	Description string `json:"description,omitempty"`
	// Seed seeds every random stream of the scenario; the -seed flag
	// overrides it.
	Seed uint64 `json:"seed"`
	// Duration is the length of the run in seconds, warm-up included.
	Duration float64 `json:"duration_s"`
	// Warmup is the part of the run, in seconds from the start, that is
	// not measured: the usage it builds is the history of the measured
	// part (S3). 0: everything is measured.
	Warmup float64 `json:"warmup_s,omitempty"`
	// Engine holds the knobs of every engine replica of the pool.
	Engine EngineSpec `json:"engine"`
	// Capacity is the pool's sustainable concurrency C at the start (the
	// plugin's pools[0].capacity, the quota and VTC gateways' C).
	// 0: replicas × max_num_seqs.
	Capacity int `json:"capacity,omitempty"`
	// HalfLife is the decay half-life of the plugin's usage in seconds.
	HalfLife float64 `json:"half_life_s,omitempty"`
	// Teams are the teams of the pool with their shares (summing to 1).
	Teams []TeamSpec `json:"teams"`
	// Workloads are the request generators.
	Workloads []WorkloadSpec `json:"workloads"`
	// CapacityChanges change the pool over time (S6).
	CapacityChanges []CapacityChange `json:"capacity_changes,omitempty"`
	// Alone names a team whose workloads are also run alone under FCFS,
	// for the "ratio to running alone" columns. Empty: no alone run.
	Alone string `json:"alone,omitempty"`
	// AloneUsers names users (workloads' "user") whose workloads are
	// also run alone under FCFS, together, each user's team the one its
	// workloads name: the users tables' "ratio to alone" column and the
	// users_light_p99_vs_alone target. The run replays the same requests
	// as the scenario does for these workloads. Empty: no such run.
	AloneUsers []string `json:"alone_users,omitempty"`
	// Ablations lists variants of the native plugin policy also run for
	// this scenario, each reported in its own table next to the plugin
	// column: AblationNoEntryPenalty, AblationNativeFlow,
	// AblationNativeFlowNoKV, AblationNativeFlowNoLend,
	// AblationNativeFlowMaxTokens.
	Ablations []string `json:"ablations,omitempty"`
	// Saturated lists the teams expected to be backlogged for the whole
	// measured part: the throughput-share and Jain columns compare them
	// against their shares normalised among them. Empty: all teams.
	Saturated []string `json:"saturated,omitempty"`
	// GatewayReplicas, if set, also runs the plugin as len(GatewayReplicas)
	// proxies sharing the pool through etcd (the cluster block), each
	// getting this weight's part of the requests (70/20/10: [7, 2, 1]),
	// in a column of its own compared with the single proxy's.
	GatewayReplicas []int `json:"gateway_replicas,omitempty"`
	// GatewayFleets, if set (with GatewayReplicas), also runs the plugin
	// as each of these numbers of proxies, split unevenly (FleetSplit),
	// in a column of its own (plugin-<n>x), compared with the single
	// proxy's under the same replica targets.
	GatewayFleets []int `json:"gateway_fleets,omitempty"`
	// Targets are the scenario's acceptance targets (FlowTargets,
	// ReplicaTargets); none if absent.
	Targets Targets `json:"targets,omitempty"`
	// PluginCost, if set, is the plugin column's cost block (the plugin's
	// "cost" configuration); the ablation column plugin-cost1 then runs
	// the plugin with the default weights for comparison. Nil: the
	// plugin's defaults (prompt 1, cached prompt 1, completion 2).
	PluginCost *CostSpec `json:"plugin_cost,omitempty"`
	// PluginThroughput, if > 0, is the plugin column's throughput: the
	// pool's work capacity in the plugin's cost units per second, which
	// every team reserves its share of (the plugin's "throughput"); the
	// ablation column plugin-seats then runs the plugin without it
	// (reservations in sequences and KV tokens only). An operator declares
	// what the engines serve under load; the scenarios declare about what
	// FCFS serves in the same run. 0: no work resource.
	PluginThroughput int64 `json:"plugin_throughput,omitempty"`
	// PluginThroughputBurst is the plugin column's throughput_burst in
	// seconds (0: the plugin's default).
	PluginThroughputBurst float64 `json:"plugin_throughput_burst_s,omitempty"`
	// Spill, if set, splits the teams and engine replicas into pools, one
	// of which spills to another (S8, spill.go): only the plugin columns
	// run (with and without spill_to), and the report is WriteSpill's.
	Spill *SpillSpec `json:"spill,omitempty"`

	// CapacityFromEngines, if true, never tells the plugin columns the
	// pool's new capacity at a capacity change: they read it from the
	// engines' /metrics (capacity_from; elastic.go). The other gateways
	// are told, as without it.
	CapacityFromEngines bool `json:"capacity_from_engines,omitempty"`

	// dir is the directory of the scenario file: trace files resolve
	// against it.
	dir string
}

// CostSpec is the plugin's cost block: the weight of each token kind in a
// team's usage. Zero fields take the plugin's defaults.
type CostSpec struct {
	// PromptToken weighs an uncached prompt token (cost.prompt_token).
	PromptToken float64 `json:"prompt_token,omitempty"`
	// CachedPromptToken weighs a prompt token vLLM reports as served
	// from its prefix cache (cost.cached_prompt_token).
	CachedPromptToken float64 `json:"cached_prompt_token,omitempty"`
	// CompletionToken weighs a generated token (cost.completion_token).
	CompletionToken float64 `json:"completion_token,omitempty"`
}

// Weights returns the three weights with the plugin's defaults (1, 1, 2)
// for the unset ones; a nil c gives the defaults.
func (c *CostSpec) Weights() (prompt, cached, completion float64) {
	prompt, cached, completion = 1, 1, 2
	if c == nil {
		return
	}
	if c.PromptToken > 0 {
		prompt = c.PromptToken
	}
	if c.CachedPromptToken > 0 {
		cached = c.CachedPromptToken
	}
	if c.CompletionToken > 0 {
		completion = c.CompletionToken
	}
	return
}

// EngineSpec are the knobs of one vLLM engine replica. Zero values take the
// simulator's defaults for the named preset.
type EngineSpec struct {
	// Preset names the simulator preset ("test", "small", "h100-8b").
	Preset string `json:"preset,omitempty"`
	// Replicas is the number of engines behind the pool (default 1).
	Replicas int `json:"replicas,omitempty"`
	// MaxNumSeqs is vLLM's max_num_seqs per replica.
	MaxNumSeqs int `json:"max_num_seqs,omitempty"`
	// MaxBatchedTokens is vLLM's max_num_batched_tokens per replica.
	MaxBatchedTokens int `json:"max_num_batched_tokens,omitempty"`
	// NumBlocks is the number of KV blocks per replica.
	NumBlocks int `json:"num_gpu_blocks,omitempty"`
	// BlockSize is the number of tokens per KV block.
	BlockSize int `json:"block_size,omitempty"`
	// MaxModelLen is vLLM's max_model_len (0: the preset's, at most what
	// the KV blocks hold).
	MaxModelLen int `json:"max_model_len,omitempty"`
	// PrefixCaching is vLLM's --enable-prefix-caching: the engines reuse
	// the KV blocks of equal prompt prefixes (the prefix block ids of a
	// trace workload say which prompts share what).
	PrefixCaching bool `json:"prefix_caching,omitempty"`
	// PromptTokensDetails is vLLM's --enable-prompt-tokens-details: the
	// responses' usage reports prompt_tokens_details.cached_tokens, which
	// the plugin charges at cost.cached_prompt_token. Without it the
	// usage says nothing of the cache and every prompt token is charged
	// at cost.prompt_token.
	PromptTokensDetails bool `json:"prompt_tokens_details,omitempty"`
}

// TeamSpec is one team of the pool.
type TeamSpec struct {
	// Name is the team's x-team header value.
	Name string `json:"name"`
	// Share is the team's part of the pool, in (0, 1].
	Share float64 `json:"share"`
	// Weight multiplies the team's standing among borrowers (0 means 1).
	Weight float64 `json:"weight,omitempty"`
	// LendingLimit, if set, is the fraction of the team's reservation it
	// lends while idle (the plugin's lending_limit, written only when the
	// plugin column runs with flow control; nil: lends all).
	LendingLimit *float64 `json:"lending_limit,omitempty"`
}

// Generator kinds of a WorkloadSpec.
const (
	// KindPoisson is an open-loop Poisson process of Rate requests/s.
	KindPoisson = "poisson"
	// KindClosed is a closed loop of Concurrency users, each sending its
	// next request ThinkTime seconds after the previous one finished.
	KindClosed = "closed"
	// KindBurst sends Count requests at Start.
	KindBurst = "burst"
	// KindTrace replays the window of a trace file that Trace selects
	// (see tracewl.go).
	KindTrace = "trace"
)

// WorkloadSpec is one request generator of a team.
type WorkloadSpec struct {
	// Team is the team that sends the requests.
	Team string `json:"team"`
	// Kind is KindPoisson, KindClosed or KindBurst.
	Kind string `json:"kind"`
	// Rate is the mean arrival rate in requests/s (KindPoisson).
	Rate float64 `json:"rate,omitempty"`
	// Concurrency is the number of users of a closed loop (KindClosed).
	Concurrency int `json:"concurrency,omitempty"`
	// ThinkTime is the pause of a closed-loop user between a response and
	// its next request, in seconds (KindClosed).
	ThinkTime float64 `json:"think_s,omitempty"`
	// Count is the number of requests of a burst (KindBurst).
	Count int `json:"count,omitempty"`
	// Start and Stop bound the generator in seconds; Stop 0 means the end
	// of the run.
	Start float64 `json:"start_s,omitempty"`
	Stop  float64 `json:"stop_s,omitempty"`
	// Prompt and Output are the length distributions in tokens.
	Prompt LengthDist `json:"prompt"`
	Output LengthDist `json:"output"`
	// MaxTokens is the max_tokens every request of the generator carries,
	// as a client sets a cap (512 for a chat front end, 4096 for a batch
	// job); the real output is drawn from Output and cut at this cap. It
	// is lowered to max_model_len − prompt for requests that would not
	// fit, as a client would. 0: the requests carry no max_tokens.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Interactive is the fraction of requests of class interactive, in
	// [0, 1]; the rest are batch.
	Interactive float64 `json:"interactive"`
	// Label names the stream in the tables (default "team/kind").
	Label string `json:"label,omitempty"`
	// Trace selects the trace window a KindTrace workload replays
	// (file relative to the scenario file). Arrivals are the window's,
	// from Start; prompt and output lengths and prefix block ids are the
	// rows'; Prompt and Output must be absent.
	Trace *trace.Spec `json:"trace,omitempty"`
	// User, if set, is the user the workload's requests name in the
	// x-user header (the plugin's user_header): a user within the team,
	// whose requests share the team's reservation with the team's other
	// users (scenario S10). Several workloads may name the same user.
	// Empty: the requests carry no user.
	User string `json:"user,omitempty"`
	// SystemPrompt, for a KindTrace workload, prepends a system prompt of
	// this many tokens (a multiple of trace.BlockTokens) to every request:
	// the same prefix blocks for all the workload's requests, before the
	// row's own, so prefix caching can serve them from the cache.
	SystemPrompt int `json:"system_prompt_tokens,omitempty"`

	// from is the index + 1 of the workload in the scenario it was cut
	// from (AloneUsersScenario), so that its random streams, and so its
	// requests, are the ones it has there; 0: its own index.
	from int
	// requests is the loaded trace window of a KindTrace workload.
	requests []trace.Request
	// traceName and traceStats describe it, for the reports.
	traceName  string
	traceStats trace.Stats
}

// Length distributions of a LengthDist.
const (
	// DistFixed always returns Mean.
	DistFixed = "fixed"
	// DistUniform is uniform on [Min, Max].
	DistUniform = "uniform"
	// DistLogNormal is log-normal with the given Mean and coefficient of
	// variation CV, clipped to [Min, Max].
	DistLogNormal = "lognormal"
	// DistExp is exponential with the given Mean, clipped to [Min, Max].
	DistExp = "exp"
)

// LengthDist is a distribution of token counts.
type LengthDist struct {
	// Dist is DistFixed (default), DistUniform, DistLogNormal or DistExp.
	Dist string `json:"dist,omitempty"`
	// Mean is the mean length in tokens.
	Mean float64 `json:"mean,omitempty"`
	// CV is the coefficient of variation of DistLogNormal.
	CV float64 `json:"cv,omitempty"`
	// Min and Max clip the sampled length (Min defaults to 1; Max 0 means
	// no upper clip).
	Min int `json:"min,omitempty"`
	Max int `json:"max,omitempty"`
}

// CapacityChange changes the pool at a point in time.
type CapacityChange struct {
	// At is the time of the change in seconds.
	At float64 `json:"at_s"`
	// Replicas is the new number of engine replicas: added replicas start
	// empty, removed ones (the last ones) stop receiving requests and
	// finish what they run.
	Replicas int `json:"replicas"`
	// Capacity is the new C told to the gateways (0: replicas ×
	// max_num_seqs).
	Capacity int `json:"capacity,omitempty"`
}

// LoadScenario reads and validates a scenario file. Unknown fields are
// errors.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s, err := parseScenario(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return s, nil
}

// LoadScenarios reads every *.json file of dir, in name order.
func LoadScenarios(dir string) ([]*Scenario, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*Scenario
	for _, n := range names {
		s, err := LoadScenario(n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("scenario: no *.json file in %s", dir)
	}
	return out, nil
}

// ParseScenario decodes and validates a scenario. Unknown fields are errors;
// every problem is reported with its field path. The trace files of trace
// workloads resolve against the working directory (LoadScenario resolves
// them against the scenario file's).
func ParseScenario(data []byte) (*Scenario, error) { return parseScenario(data, "") }

// parseScenario is ParseScenario with trace files resolved against dir;
// it loads the trace workloads' windows.
func parseScenario(data []byte, dir string) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	s.dir = dir
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := s.loadTraces(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks the scenario and returns every problem found, each with
// its field path.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if s.Name == "" {
		bad("name", "must not be empty")
	}
	if !(s.Duration > 0) {
		bad("duration_s", "must be > 0, got %v", s.Duration)
	}
	if s.Warmup < 0 || s.Warmup >= s.Duration {
		bad("warmup_s", "must be in [0, duration_s), got %v", s.Warmup)
	}
	if s.Engine.Replicas < 0 {
		bad("engine.replicas", "must be >= 0, got %d", s.Engine.Replicas)
	}
	if s.Capacity < 0 {
		bad("capacity", "must be >= 0, got %d", s.Capacity)
	}
	if s.Engine.MaxModelLen < 0 {
		bad("engine.max_model_len", "must be >= 0, got %d", s.Engine.MaxModelLen)
	}
	if c := s.PluginCost; c != nil {
		for _, f := range []struct {
			name string
			v    float64
		}{{"prompt_token", c.PromptToken}, {"cached_prompt_token", c.CachedPromptToken}, {"completion_token", c.CompletionToken}} {
			if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
				bad("plugin_cost."+f.name, "must be a finite number >= 0 (0: the plugin's default), got %v", f.v)
			}
		}
	}
	if s.HalfLife < 0 {
		bad("half_life_s", "must be >= 0, got %v", s.HalfLife)
	}
	if s.PluginThroughput < 0 {
		bad("plugin_throughput", "must be >= 0 (0: none), got %d", s.PluginThroughput)
	}
	if b := s.PluginThroughputBurst; b < 0 || math.IsNaN(b) || math.IsInf(b, 0) {
		bad("plugin_throughput_burst_s", "must be a finite number >= 0 (0: the plugin's default), got %v", b)
	} else if b > 0 && s.PluginThroughput == 0 {
		bad("plugin_throughput_burst_s", "needs plugin_throughput")
	}
	for i, w := range s.GatewayReplicas {
		if w <= 0 {
			bad(fmt.Sprintf("gateway_replicas[%d]", i), "must be > 0, got %d", w)
		}
	}
	if len(s.GatewayReplicas) == 1 {
		bad("gateway_replicas", "must name at least two proxies, got 1")
	}
	for i, n := range s.GatewayFleets {
		if n < 2 || n > MaxFleet {
			bad(fmt.Sprintf("gateway_fleets[%d]", i), "must be in [2, %d], got %d", MaxFleet, n)
		}
	}
	if len(s.GatewayFleets) > 0 && len(s.GatewayReplicas) == 0 {
		bad("gateway_fleets", "needs gateway_replicas")
	}
	teams := map[string]bool{}
	sum := 0.0
	for i, t := range s.Teams {
		p := fmt.Sprintf("teams[%d]", i)
		if t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n") {
			bad(p+".name", "must be a non-empty token, got %q", t.Name)
		}
		if teams[t.Name] {
			bad(p+".name", "duplicate team %q", t.Name)
		}
		teams[t.Name] = true
		if !(t.Share > 0 && t.Share <= 1) {
			bad(p+".share", "must be in (0, 1], got %v", t.Share)
		}
		if l := t.LendingLimit; l != nil && !(*l >= 0 && *l <= 1) {
			bad(p+".lending_limit", "must be in [0, 1], got %v", *l)
		}
		if t.Weight < 0 || math.IsNaN(t.Weight) {
			bad(p+".weight", "must be >= 0, got %v", t.Weight)
		}
		sum += t.Share
	}
	if len(s.Teams) == 0 {
		bad("teams", "must not be empty")
	} else if sum > 1+1e-9 {
		bad("teams", "shares sum to %v, must be <= 1", sum)
	}
	if s.Spill != nil {
		s.Spill.validate(s, teams, bad)
	}
	for i, w := range s.Workloads {
		p := fmt.Sprintf("workloads[%d]", i)
		if !teams[w.Team] {
			bad(p+".team", "unknown team %q", w.Team)
		}
		switch w.Kind {
		case KindPoisson:
			if !(w.Rate > 0) {
				bad(p+".rate", "must be > 0, got %v", w.Rate)
			}
		case KindClosed:
			if w.Concurrency <= 0 {
				bad(p+".concurrency", "must be > 0, got %d", w.Concurrency)
			}
			if w.ThinkTime < 0 {
				bad(p+".think_s", "must be >= 0, got %v", w.ThinkTime)
			}
		case KindBurst:
			if w.Count <= 0 {
				bad(p+".count", "must be > 0, got %d", w.Count)
			}
		case KindTrace:
			if w.Trace == nil {
				bad(p+".trace", "must be set for kind %q", KindTrace)
			} else if err := w.Trace.ValidateAt(p + ".trace"); err != nil {
				errs = append(errs, err)
			}
		default:
			bad(p+".kind", "must be %q, %q, %q or %q, got %q", KindPoisson, KindClosed, KindBurst, KindTrace, w.Kind)
		}
		if w.User != "" && !validToken(w.User) {
			bad(p+".user", "must be a token (printable ASCII without spaces, at most %d bytes) to send as a header value, got %q", maxUserLen, w.User)
		}
		if w.SystemPrompt != 0 && (w.Kind != KindTrace || w.SystemPrompt < 0 || w.SystemPrompt%trace.BlockTokens != 0) {
			bad(p+".system_prompt_tokens", "must be a positive multiple of %d on a kind %q workload, got %d", trace.BlockTokens, KindTrace, w.SystemPrompt)
		}
		if w.Trace != nil && w.Kind != KindTrace {
			bad(p+".trace", "only for kind %q, got kind %q", KindTrace, w.Kind)
		}
		if w.Start < 0 || (w.Stop != 0 && w.Stop <= w.Start) {
			bad(p+".start_s", "start %v and stop %v: need 0 <= start < stop", w.Start, w.Stop)
		}
		if w.MaxTokens < 0 {
			bad(p+".max_tokens", "must be >= 0, got %d", w.MaxTokens)
		}
		if w.Interactive < 0 || w.Interactive > 1 {
			bad(p+".interactive", "must be in [0, 1], got %v", w.Interactive)
		}
		for _, d := range []struct {
			name string
			d    LengthDist
		}{{"prompt", w.Prompt}, {"output", w.Output}} {
			if w.Kind == KindTrace {
				if d.d != (LengthDist{}) {
					bad(p+"."+d.name, "must be absent for kind %q (the lengths are the trace's)", KindTrace)
				}
				continue
			}
			if err := d.d.validate(); err != nil {
				bad(p+"."+d.name, "%v", err)
			}
		}
	}
	if len(s.Workloads) == 0 {
		bad("workloads", "must not be empty")
	}
	for i, c := range s.CapacityChanges {
		p := fmt.Sprintf("capacity_changes[%d]", i)
		if c.At <= 0 || c.At >= s.Duration {
			bad(p+".at_s", "must be in (0, duration_s), got %v", c.At)
		}
		if c.Replicas <= 0 {
			bad(p+".replicas", "must be > 0, got %d", c.Replicas)
		}
		if i > 0 && c.At <= s.CapacityChanges[i-1].At {
			bad(p+".at_s", "must be after the previous change")
		}
	}
	for i, a := range s.Ablations {
		if NewAblation(a) == nil {
			bad(fmt.Sprintf("ablations[%d]", i), "must be %q, %q, %q, %q or %q, got %q",
				AblationNoEntryPenalty, AblationNativeFlow, AblationNativeFlowNoKV, AblationNativeFlowNoLend, AblationNativeFlowMaxTokens, a)
		}
	}
	if s.Alone != "" && !teams[s.Alone] {
		bad("alone", "unknown team %q", s.Alone)
	}
	s.validateAloneUsers(bad)
	for i, t := range s.Saturated {
		if !teams[t] {
			bad(fmt.Sprintf("saturated[%d]", i), "unknown team %q", t)
		}
	}
	s.Targets.validate(s, bad)
	return errors.Join(errs...)
}

// maxUserLen bounds a workload's user, in bytes.
const maxUserLen = 64

// validToken reports whether v is a non-empty run of at most maxUserLen
// printable ASCII bytes other than space, fit for a header value.
func validToken(v string) bool {
	if v == "" || len(v) > maxUserLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return true
}

// validateAloneUsers checks alone_users: each entry a user that some
// workload names, of one team, named once.
func (s *Scenario) validateAloneUsers(bad func(path, format string, args ...any)) {
	seen := map[string]bool{}
	for i, u := range s.AloneUsers {
		p := fmt.Sprintf("alone_users[%d]", i)
		if seen[u] {
			bad(p, "duplicate user %q", u)
			continue
		}
		seen[u] = true
		var teams []string
		for _, w := range s.Workloads {
			if w.User == u && !slices.Contains(teams, w.Team) {
				teams = append(teams, w.Team)
			}
		}
		switch {
		case len(teams) == 0:
			bad(p, "unknown user %q: no workload names it", u)
		case len(teams) > 1:
			bad(p, "user %q is in teams %s: alone_users takes a user of one team", u, strings.Join(teams, ", "))
		}
	}
}

func (d LengthDist) validate() error {
	switch d.Dist {
	case "", DistFixed, DistExp:
	case DistUniform:
		if d.Max < d.Min || d.Max <= 0 {
			return fmt.Errorf("uniform needs 0 < min <= max, got [%d, %d]", d.Min, d.Max)
		}
		return nil
	case DistLogNormal:
		if !(d.CV > 0) {
			return fmt.Errorf("lognormal needs cv > 0, got %v", d.CV)
		}
	default:
		return fmt.Errorf("dist must be fixed, uniform, lognormal or exp, got %q", d.Dist)
	}
	if !(d.Mean >= 1) {
		return fmt.Errorf("mean must be >= 1, got %v", d.Mean)
	}
	if d.Max != 0 && d.Max < d.Min {
		return fmt.Errorf("max %d < min %d", d.Max, d.Min)
	}
	return nil
}

// Sec converts seconds of scenario time to a time.Duration.
func Sec(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// Share returns the configured share of a team (0 if unknown).
func (s *Scenario) Share(team string) float64 {
	for _, t := range s.Teams {
		if t.Name == team {
			return t.Share
		}
	}
	return 0
}

// TeamNames returns the team names in configuration order.
func (s *Scenario) TeamNames() []string {
	out := make([]string, len(s.Teams))
	for i, t := range s.Teams {
		out[i] = t.Name
	}
	return out
}

// Replicas returns the number of engine replicas at the start (default 1).
func (s *Scenario) Replicas() int {
	if s.Engine.Replicas <= 0 {
		return 1
	}
	return s.Engine.Replicas
}

// AloneScenario returns a copy of s that keeps only the workloads of team
// (for the "ratio to running alone" columns), or nil if s has no Alone team.
func (s *Scenario) AloneScenario() *Scenario {
	if s.Alone == "" {
		return nil
	}
	c := *s
	c.Workloads = nil
	for _, w := range s.Workloads {
		if w.Team == s.Alone {
			c.Workloads = append(c.Workloads, w)
		}
	}
	c.Name = s.Name + "-alone"
	c.Saturated = nil
	return &c
}

// TeamUser is one user within a team: a (team, user) pair that some
// workload's requests carry.
type TeamUser struct {
	Team, User string
}

// HasUsers reports whether some workload of s names a user.
func (s *Scenario) HasUsers() bool {
	for _, w := range s.Workloads {
		if w.User != "" {
			return true
		}
	}
	return false
}

// Users returns the (team, user) pairs of the workloads of s, by team in
// configuration order, then by user name; none if no workload names a
// user.
func (s *Scenario) Users() []TeamUser {
	var out []TeamUser
	for _, t := range s.Teams {
		var names []string
		for _, w := range s.Workloads {
			if w.Team == t.Name && w.User != "" && !slices.Contains(names, w.User) {
				names = append(names, w.User)
			}
		}
		slices.Sort(names)
		for _, u := range names {
			out = append(out, TeamUser{Team: t.Name, User: u})
		}
	}
	return out
}

// UsersTeams returns the teams of s that have users (Users), in
// configuration order.
func (s *Scenario) UsersTeams() []string {
	var out []string
	for _, u := range s.Users() {
		if !slices.Contains(out, u.Team) {
			out = append(out, u.Team)
		}
	}
	return out
}

// AloneUsersScenario returns a copy of s that keeps only the workloads of
// the AloneUsers (for the users tables' "ratio to alone" column), each
// drawing the requests it draws in s, or nil if s has no AloneUsers.
func (s *Scenario) AloneUsersScenario() *Scenario {
	if len(s.AloneUsers) == 0 {
		return nil
	}
	c := *s
	c.Workloads = nil
	for i, w := range s.Workloads {
		if w.User != "" && slices.Contains(s.AloneUsers, w.User) {
			w.from = w.randIndex(i) + 1
			c.Workloads = append(c.Workloads, w)
		}
	}
	c.Name = s.Name + "-alone-users"
	c.Saturated = nil
	return &c
}

// randIndex is the index that seeds workload i's random streams: its
// index in the scenario it was cut from, else i.
func (w *WorkloadSpec) randIndex(i int) int {
	if w.from > 0 {
		return w.from - 1
	}
	return i
}

// Scaled returns a copy of s whose times (duration, warm-up, generator
// bounds, capacity changes) are multiplied by f: the reduced runs of -quick
// and of the tests.
func (s *Scenario) Scaled(f float64) *Scenario {
	c := *s
	c.Duration *= f
	c.Warmup *= f
	c.HalfLife *= f
	c.Workloads = append([]WorkloadSpec(nil), s.Workloads...)
	for i := range c.Workloads {
		c.Workloads[i].Start *= f
		c.Workloads[i].Stop *= f
	}
	c.CapacityChanges = append([]CapacityChange(nil), s.CapacityChanges...)
	for i := range c.CapacityChanges {
		c.CapacityChanges[i].At *= f
	}
	if s.Spill != nil {
		sp := *s.Spill
		sp.SaturatedAt *= f
		c.Spill = &sp
	}
	return &c
}

// MaxFleet bounds the numbers of proxies of gateway_fleets.
const MaxFleet = 64

// FleetSplit returns the weights of n proxies of a gateway_fleets column:
// proxy i gets ⌊12/(i+1)⌉ (rounded, at least 1) parts of the requests, a
// load balancer that favours a few proxies (for 10: 12, 6, 4, 3, 2, 2,
// 2, 2, 1, 1), so that a team's requests reach many more proxies than
// the few that carry most of them.
func FleetSplit(n int) []int {
	w := make([]int, n)
	for i := range w {
		w[i] = max(1, (24/(i+1)+1)/2)
	}
	return w
}
