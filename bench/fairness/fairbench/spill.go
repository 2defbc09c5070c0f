package fairbench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Spill-over scenarios (S8). A scenario with a "spill" section
// has several pools: each team of the scenario belongs to one, each pool
// has its own engine replicas (the scenario's engine, engine.replicas in
// total, pool 0's first), and the gateway routes every request to a pool
// (Request.Pool: the plugin's x-fairshare-pool, read from the headers it
// released) whose replicas alone serve it. Only the plugin runs, as two
// columns: with the pools' spill_to (SpillColumn) and without
// (NoSpillColumn); the gateway checks the plugin's records after every
// submission and reports the bounds in Result.Spill.

// Column names of a spill scenario.
const (
	SpillColumn   = "plugin"
	NoSpillColumn = "plugin-nospill"
)

// SpillSpec is a scenario's pools and spill-over targets.
type SpillSpec struct {
	// Pools are the pools in configuration order.
	Pools []SpillPool `json:"pools"`
	// SaturatedAt is when, in seconds, both pools are saturated: a
	// request arriving then or later that moves is a crossing (the
	// target says none).
	SaturatedAt float64 `json:"saturated_at_s"`
	// Within names the fallback teams whose interactive requests stay
	// within their share: the TTFTs of those arriving before SaturatedAt
	// (while spill-over can run) are compared with the no-spill run's.
	Within []string `json:"within"`
	// Targets are the acceptance targets of the spill-over.
	Targets SpillTargets `json:"targets"`
}

// SpillPool is one pool of a spill scenario.
type SpillPool struct {
	// Name is the plugin's pool name; its requests name the model
	// "m-<name>".
	Name string `json:"name"`
	// Replicas is the pool's number of engine replicas.
	Replicas int `json:"replicas"`
	// Capacity is the pool's C (0: replicas × max_num_seqs).
	Capacity int `json:"capacity,omitempty"`
	// Teams are the scenario's teams in this pool; their shares in the
	// pool are their scenario shares normalised over the pool.
	Teams []string `json:"teams"`
	// SpillTo are the pool's fallbacks (the plugin's spill_to), used by
	// SpillColumn only.
	SpillTo []string `json:"spill_to,omitempty"`
}

// SpillTargets are the targets of a spill scenario (each a Bound).
type SpillTargets struct {
	// FloodedServiceVsNoSpill bounds the service of the flooded pools'
	// teams (those of the pools with spill_to) as a multiple of the
	// no-spill run's (at_least).
	FloodedServiceVsNoSpill *Bound `json:"flooded_service_vs_nospill,omitempty"`
	// FallbackWithinP95VsNoSpill bounds the interactive p95 TTFT of each
	// Within team's requests arriving in the measured window before
	// SaturatedAt (SpillReport.WithinTTFT) as a multiple of the no-spill
	// run's over the same arrivals (at_most; the worst team is reported).
	FallbackWithinP95VsNoSpill *Bound `json:"fallback_within_p95_vs_nospill,omitempty"`
	// BorrowersOverC bounds, over every pool and every submission, the
	// borrowers in flight on the plugin's count minus the pool's C
	// (at_most; spilled requests are borrowers there).
	BorrowersOverC *Bound `json:"borrowers_over_capacity,omitempty"`
	// SpillInFlightOverC bounds, right after every submission of a
	// spilled request, its fallback's requests in flight on the plugin's
	// count minus C (at_most).
	SpillInFlightOverC *Bound `json:"spill_in_flight_over_capacity,omitempty"`
	// CrossingsSaturated bounds the requests moved that arrived at or
	// after SaturatedAt (at_most).
	CrossingsSaturated *Bound `json:"crossings_when_saturated,omitempty"`
}

// SpillStats is what a spill-aware gateway measured on the plugin's
// records (Result.Spill).
type SpillStats struct {
	// Pools holds one entry per pool, in configuration order.
	Pools []SpillPoolStats
	// Crossings counts the requests moved that arrived at or after
	// SaturatedAt.
	Crossings int
}

// SpillPoolStats is one pool's bounds.
type SpillPoolStats struct {
	Name     string
	Capacity int
	// MaxInFlight and MaxBorrowing are the most requests, and borrowers,
	// in flight on the plugin's count after any submission.
	MaxInFlight, MaxBorrowing int
	// MaxAfterSpill is the most requests in flight on the plugin's count
	// right after a request spilled into this pool was submitted (-1:
	// none was).
	MaxAfterSpill int
	// SpilledIn counts the requests moved into this pool; SpilledOut
	// those moved out of it.
	SpilledIn, SpilledOut int
}

// SpillReporter is a gateway that measures spill-over (wasmgw).
type SpillReporter interface {
	// SpillStats returns the run's measures, called once it is over.
	SpillStats() *SpillStats
}

// validate checks the spill section of s (teams is the set of s's team
// names).
func (sp *SpillSpec) validate(s *Scenario, teams map[string]bool, bad func(path, format string, args ...any)) {
	if len(sp.Pools) < 2 {
		bad("spill.pools", "must list at least two pools, got %d", len(sp.Pools))
	}
	names := map[string]bool{}
	in := map[string]string{}
	replicas := 0
	for i, p := range sp.Pools {
		pp := fmt.Sprintf("spill.pools[%d]", i)
		if p.Name == "" || names[p.Name] {
			bad(pp+".name", "must be a unique non-empty name, got %q", p.Name)
		}
		names[p.Name] = true
		if p.Replicas < 1 {
			bad(pp+".replicas", "must be >= 1, got %d", p.Replicas)
		}
		replicas += p.Replicas
		for j, t := range p.Teams {
			if !teams[t] {
				bad(fmt.Sprintf("%s.teams[%d]", pp, j), "unknown team %q", t)
			} else if prev, dup := in[t]; dup {
				bad(fmt.Sprintf("%s.teams[%d]", pp, j), "team %q is already in pool %s", t, prev)
			}
			in[t] = p.Name
		}
	}
	for i, p := range sp.Pools {
		for j, f := range p.SpillTo {
			if !names[f] || f == p.Name {
				bad(fmt.Sprintf("spill.pools[%d].spill_to[%d]", i, j), "must name another pool, got %q", f)
			}
		}
	}
	for _, t := range s.Teams {
		if _, ok := in[t.Name]; !ok {
			bad("spill.pools", "team %q is in no pool", t.Name)
		}
	}
	if replicas != s.Replicas() {
		bad("spill.pools", "replicas sum to %d, engine.replicas is %d", replicas, s.Replicas())
	}
	for i, t := range sp.Within {
		if !teams[t] {
			bad(fmt.Sprintf("spill.within[%d]", i), "unknown team %q", t)
		}
	}
	if !(sp.SaturatedAt > 0 && sp.SaturatedAt < s.Duration) {
		bad("spill.saturated_at_s", "must be in (0, duration_s), got %v", sp.SaturatedAt)
	}
	for _, k := range []struct {
		name string
		b    *Bound
		dir  string
	}{
		{"flooded_service_vs_nospill", sp.Targets.FloodedServiceVsNoSpill, "at_least"},
		{"fallback_within_p95_vs_nospill", sp.Targets.FallbackWithinP95VsNoSpill, "at_most"},
		{"borrowers_over_capacity", sp.Targets.BorrowersOverC, "at_most"},
		{"spill_in_flight_over_capacity", sp.Targets.SpillInFlightOverC, "at_most"},
		{"crossings_when_saturated", sp.Targets.CrossingsSaturated, "at_most"},
	} {
		if k.b == nil {
			continue
		}
		if (k.dir == "at_most") != (k.b.AtMost != nil) || (k.dir == "at_least") != (k.b.AtLeast != nil) || k.b.Report {
			bad("spill.targets."+k.name, "must set %s", k.dir)
		}
	}
}

// PoolOf returns the pool of team (its index in Pools), or -1.
func (sp *SpillSpec) PoolOf(team string) int {
	for i, p := range sp.Pools {
		if slices.Contains(p.Teams, team) {
			return i
		}
	}
	return -1
}

// Index returns the index of the pool named name, or -1.
func (sp *SpillSpec) Index(name string) int {
	return slices.IndexFunc(sp.Pools, func(p SpillPool) bool { return p.Name == name })
}

// CapacityOf returns pool i's C under engine max_num_seqs m.
func (sp *SpillSpec) CapacityOf(i, m int) int {
	if c := sp.Pools[i].Capacity; c > 0 {
		return c
	}
	return sp.Pools[i].Replicas * m
}

// poolReplica returns the replica of q's pool (q.Pool, else its team's)
// with the fewest requests outstanding.
func (r *runner) poolReplica(q *Request) *replica {
	sp := r.s.Spill
	i := sp.Index(q.Pool)
	if i < 0 {
		i = sp.PoolOf(q.Team)
	}
	first := 0
	for k := 0; k < i; k++ {
		first += sp.Pools[k].Replicas
	}
	var rep *replica
	for _, p := range r.reps[first : first+sp.Pools[i].Replicas] {
		if rep == nil || p.out < rep.out {
			rep = p
		}
	}
	return rep
}

// SpillReport is a spill scenario's results: per mode, the spill and
// no-spill columns.
type SpillReport struct {
	Scenario *Scenario
	Seed     uint64
	Modes    []string
	// Results[mode] is {SpillColumn, NoSpillColumn}.
	Results map[string][2]*Result
	// WithinTTFT[mode][column][team] are the sorted TTFTs of the
	// interactive requests of each Within team that arrived in
	// [Warmup, SaturatedAt), while spill-over can run (censored at the
	// run's end for one without a first token), column 0 SpillColumn.
	WithinTTFT map[string][2]map[string][]time.Duration
}

// windowTTFT returns, per team of within, the sorted TTFTs of its
// interactive requests of reqs that arrived in [from, to), a request
// without a first token censored at end.
func windowTTFT(reqs []*Request, within []string, from, to, end time.Duration) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, t := range within {
		out[t] = []time.Duration{}
	}
	for _, q := range reqs {
		ts, ok := out[q.Team]
		if !ok || q.Class != Interactive || q.Arrival < from || q.Arrival >= to {
			continue
		}
		ft := q.FirstToken
		if ft < 0 {
			ft = end
		}
		out[q.Team] = append(ts, ft-q.Arrival)
	}
	for _, ts := range out {
		slices.Sort(ts)
	}
	return out
}

// RunSpillScenario runs s (with a spill section) under every mode with
// the spill and no-spill gateways, in parallel.
func RunSpillScenario(s *Scenario, spill, noSpill NewGateway, modes []string, seed uint64) (*SpillReport, error) {
	if seed == 0 {
		seed = s.Seed
	}
	rep := &SpillReport{Scenario: s, Seed: seed, Modes: modes, Results: map[string][2]*Result{}, WithinTTFT: map[string][2]map[string][]time.Duration{}}
	from, to := time.Duration(s.Warmup*float64(time.Second)), time.Duration(s.Spill.SaturatedAt*float64(time.Second))
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for _, m := range modes {
		for i, gw := range []NewGateway{spill, noSpill} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var win map[string][]time.Duration
				keep := func(reqs []*Request, end time.Duration) { win = windowTTFT(reqs, s.Spill.Within, from, to, end) }
				res, err := Run(s, gw(), RunOptions{Mode: m, Seed: seed, Requests: keep})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if first == nil {
						first = err
					}
					return
				}
				rs := rep.Results[m]
				rs[i] = res
				rep.Results[m] = rs
				ws := rep.WithinTTFT[m]
				ws[i] = win
				rep.WithinTTFT[m] = ws
			}()
		}
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return rep, nil
}

// floodedService is the service of the teams of the pools with spill_to.
func floodedService(s *Scenario, r *Result) float64 {
	sum := 0.0
	for _, p := range s.Spill.Pools {
		if len(p.SpillTo) == 0 {
			continue
		}
		for _, t := range p.Teams {
			if tr := r.Team(t); tr != nil {
				sum += tr.Service
			}
		}
	}
	return sum
}

// SpillTargets evaluates the spill targets of rep's scenario in mode.
func (rep *SpillReport) SpillTargets(mode string) []Target {
	s := rep.Scenario
	ts := s.Spill.Targets
	rs := rep.Results[mode]
	sp, no := rs[0], rs[1]
	var out []Target
	add := func(b *Bound, name string, v float64, format string) {
		if !b.in(mode) {
			return
		}
		limit, atMost := b.limit()
		out = append(out, Target{Scenario: s.Name, Mode: mode, Name: name, Value: v, Format: format, Limit: limit, AtMost: atMost})
	}
	if fs, fn := floodedService(s, sp), floodedService(s, no); fn > 0 {
		add(ts.FloodedServiceVsNoSpill, "flooded pools' teams' service vs no spill-over", fs/fn, "%.2f×")
	}
	worst := 0.0
	ws := rep.WithinTTFT[mode]
	for _, team := range s.Spill.Within {
		a, b := percentileSorted(ws[0][team], 0.95), percentileSorted(ws[1][team], 0.95)
		if b <= 0 {
			continue
		}
		worst = max(worst, float64(a)/float64(b))
	}
	add(ts.FallbackWithinP95VsNoSpill, fmt.Sprintf("fallback's within-share teams' interactive p95 TTFT, arrivals before %.0f s, vs no spill-over (worst)", s.Spill.SaturatedAt), worst, "%.2f×")
	if st := sp.Spill; st != nil {
		over, after := -1<<31, -1<<31
		for _, p := range st.Pools {
			over = max(over, p.MaxBorrowing-p.Capacity)
			if p.MaxAfterSpill >= 0 {
				after = max(after, p.MaxAfterSpill-p.Capacity)
			}
		}
		add(ts.BorrowersOverC, "most borrowers in flight − C (any pool, after every submission)", float64(over), "%+.0f")
		if after > -1<<31 {
			add(ts.SpillInFlightOverC, "most in flight − C right after a spilled submission", float64(after), "%+.0f")
		}
		add(ts.CrossingsSaturated, "requests moved once both pools are saturated", float64(st.Crossings), "%.0f")
	}
	return out
}

// WriteSpill writes a spill scenario's markdown: its setup, per mode the
// teams' service and interactive TTFT in both columns, the pools' bounds
// and spill counts, and the targets.
func WriteSpill(w io.Writer, rep *SpillReport) error {
	s := rep.Scenario
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %s\n\n%s\n\n", s.Name, s.Title, s.Description)
	fmt.Fprintf(&b, "Seed %d; %.0f s, measured from %.0f s; both pools saturated from %.0f s. Pools:\n\n", rep.Seed, s.Duration, s.Warmup, s.Spill.SaturatedAt)
	for _, p := range s.Spill.Pools {
		spill := "no fallback"
		if len(p.SpillTo) > 0 {
			spill = "spill_to " + strings.Join(p.SpillTo, ", ")
		}
		fmt.Fprintf(&b, "- `%s`: %d replica(s), teams %s; %s\n", p.Name, p.Replicas, strings.Join(p.Teams, ", "), spill)
	}
	b.WriteString("\nWorkloads:\n\n")
	for _, wl := range s.Workloads {
		fmt.Fprintf(&b, "- %s: %s\n", wl.Team, describeWorkload(wl))
	}
	fmt.Fprintf(&b, "\nColumns: `%s` (plugin.wasm with the pools' spill_to) and `%s` (the same without spill_to); both with flow control and hold_headers \"on\", every request routed to the engines of the pool the plugin named in x-fairshare-pool.\n", SpillColumn, NoSpillColumn)
	for _, m := range rep.Modes {
		rs := rep.Results[m]
		fmt.Fprintf(&b, "\n## %s\n\n", ModeTitle(m))
		b.WriteString("| team | pool | service, " + SpillColumn + " | service, " + NoSpillColumn + " | interactive TTFT p50 / p99 (s), " + SpillColumn + " | interactive TTFT p50 / p99 (s), " + NoSpillColumn + " |\n|---|---|---|---|---|---|\n")
		for _, t := range s.Teams {
			pool := s.Spill.Pools[s.Spill.PoolOf(t.Name)].Name
			cells := []string{t.Name, pool}
			for _, r := range rs {
				cells = append(cells, fmt.Sprintf("%.0f", r.Team(t.Name).Service))
			}
			for _, r := range rs {
				c := r.Team(t.Name).Class[Interactive]
				if c.Requests == 0 {
					cells = append(cells, "-")
					continue
				}
				cells = append(cells, fmt.Sprintf("%s / %s", secs(c.TTFTp50), secs(c.TTFTp99)))
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
		fmt.Fprintf(&b, "\nFlooded pools' teams' service: %.0f with spill-over, %.0f without.\n\n", floodedService(s, rs[0]), floodedService(s, rs[1]))
		b.WriteString("| pool | column | C | most in flight | most borrowers | most in flight after a spill into it | spilled in | spilled out |\n|---|---|---|---|---|---|---|---|\n")
		for i, r := range rs {
			if r.Spill == nil {
				continue
			}
			for _, p := range r.Spill.Pools {
				after := "-"
				if p.MaxAfterSpill >= 0 {
					after = fmt.Sprint(p.MaxAfterSpill)
				}
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %d | %d |\n", p.Name, []string{SpillColumn, NoSpillColumn}[i], p.Capacity,
					p.MaxInFlight, p.MaxBorrowing, after, p.SpilledIn, p.SpilledOut)
			}
		}
		if len(s.Spill.Within) > 0 {
			fmt.Fprintf(&b, "\nThe fallback's within-share teams' interactive requests that arrived while spill-over can run (from %.0f s to %.0f s, when both pools are saturated):\n\n", s.Warmup, s.Spill.SaturatedAt)
			b.WriteString("| team | column | requests | TTFT p50 (ms) | TTFT p95 (ms) | TTFT p99 (ms) |\n|---|---|---|---|---|---|\n")
			for _, team := range s.Spill.Within {
				for i, col := range []string{SpillColumn, NoSpillColumn} {
					ts := rep.WithinTTFT[m][i][team]
					fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", team, col, len(ts), millis(percentileSorted(ts, 0.5)), millis(percentileSorted(ts, 0.95)), millis(percentileSorted(ts, 0.99)))
				}
			}
		}
		if st := rs[0].Spill; st != nil {
			fmt.Fprintf(&b, "\nRequests moved that arrived once both pools were saturated (from %.0f s): %d.\n", s.Spill.SaturatedAt, st.Crossings)
		}
		b.WriteString("\n### Targets\n\n| target | bound | value | |\n|---|---|---|---|\n")
		for _, t := range rep.SpillTargets(m) {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, bound(t), fmt.Sprintf(t.Format, t.Value), mark(t.OK()))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// millis formats d in milliseconds with one decimal.
func millis(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func bound(t Target) string {
	op := "≥"
	if t.AtMost {
		op = "≤"
	}
	return op + " " + fmt.Sprintf(t.Format, t.Limit)
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}
