package fairbench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Baselines returns the constructors of the six baseline gateways, in
// column order: FCFS, class priority, static quotas, VTC, and the EPP
// flow control with round-robin and with program-aware fairness (epp.go).
func Baselines() []NewGateway {
	return []NewGateway{NewFCFS, NewClassPriority, NewQuota, NewVTC, NewEPPRoundRobin, NewEPPProgramAware}
}

// Modes are the engine behaviours every scenario runs under.
var Modes = []string{ModeVLLM, Mode45561}

// SuiteOptions configure RunScenario.
type SuiteOptions struct {
	// Policies are the gateways, in column order; the first is the
	// reference of the "vs" rows (FCFS).
	Policies []NewGateway
	// Modes are the engine modes (default Modes).
	Modes []string
	// Seed overrides the scenario's seed when non-zero.
	Seed uint64
	// PluginPath names how the plugin column runs, for the report.
	PluginPath string
	// Parallel bounds the runs in flight (default GOMAXPROCS).
	Parallel int
	// Variants are extra columns of the ablation tables, run for every
	// scenario after the scenario's own ablations.
	Variants []Variant
}

// RunScenario runs s under every mode and policy (and its Alone and
// AloneUsers runs) and returns the report. Runs go in parallel; the
// result does not depend on their order.
func RunScenario(s *Scenario, opt SuiteOptions) (*Report, error) {
	modes := opt.Modes
	if len(modes) == 0 {
		modes = Modes
	}
	seed := opt.Seed
	if seed == 0 {
		seed = s.Seed
	}
	rep := &Report{Scenario: s, Seed: seed, Modes: modes, Results: map[string][]*Result{}, Ablations: map[string][]*Result{},
		PluginPath: opt.PluginPath, Charts: map[string][]string{}}
	type job struct {
		mode string
		i    int
		s    *Scenario
		gw   NewGateway
	}
	var jobs []job
	for _, m := range modes {
		rep.Results[m] = make([]*Result, len(opt.Policies))
		for i, p := range opt.Policies {
			jobs = append(jobs, job{m, i, s, p})
		}
	}
	variants := make([]Variant, 0, len(s.Ablations)+len(opt.Variants))
	for _, a := range s.Ablations {
		variants = append(variants, Variant{New: NewAblation(a), Note: AblationNote(a)})
	}
	variants = append(variants, opt.Variants...)
	kept := variants[:0]
	for _, v := range variants {
		if v.Skip == nil || !v.Skip(s) {
			kept = append(kept, v)
		}
	}
	variants = kept
	for _, v := range variants {
		rep.AblationNotes = append(rep.AblationNotes, v.Note)
	}
	for _, m := range modes {
		rep.Ablations[m] = make([]*Result, len(variants))
		for i, v := range variants {
			jobs = append(jobs, job{"ablation/" + m, i, s, v.New})
		}
	}
	if a := s.AloneScenario(); a != nil {
		jobs = append(jobs, job{"alone", 0, a, NewFCFS})
	}
	if a := s.AloneUsersScenario(); a != nil {
		jobs = append(jobs, job{"alone-users", 0, a, NewFCFS})
	}
	par := opt.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, par)
	)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			mode, ablation := strings.CutPrefix(j.mode, "ablation/")
			res, err := Run(j.s, j.gw(), RunOptions{Mode: mode, Seed: seed})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			switch {
			case j.mode == "alone":
				rep.Alone = res
			case j.mode == "alone-users":
				rep.AloneUsers = res
			case ablation:
				rep.Ablations[mode][j.i] = res
			default:
				rep.Results[j.mode][j.i] = res
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return rep, nil
}

// MaxShareError returns the largest |SatShare − Fair| over the saturated
// teams of r, in absolute share points (0.05 = 5 percentage points): the
// distance from the max-min fair division of what the saturated teams got
// (TeamResult.Fair), which is their shares' division unless a team asked
// for less than its part.
func (r *Result) MaxShareError() float64 {
	e := 0.0
	for _, t := range r.Teams {
		if t.Saturated {
			e = math.Max(e, math.Abs(t.SatShare-t.Fair))
		}
	}
	return e
}

// WorstTTFTp99 returns the largest TTFT p99 over every team and class of
// r that had requests.
func (r *Result) WorstTTFTp99() time.Duration {
	var w time.Duration
	for _, t := range r.Teams {
		for _, c := range t.Class {
			if c.Requests > 0 {
				w = max(w, c.TTFTp99)
			}
		}
	}
	return w
}

// Team returns the measures of the named team (nil if absent).
func (r *Result) Team(name string) *TeamResult {
	for i := range r.Teams {
		if r.Teams[i].Team == name {
			return &r.Teams[i]
		}
	}
	return nil
}

// headlineTeam is the team whose interactive p99 TTFT a summary shows: the
// Alone team, else the team with the worst p99 under the first policy.
func (rep *Report) headlineTeam() string {
	if rep.Scenario.Alone != "" {
		return rep.Scenario.Alone
	}
	return ""
}

// WriteSummary writes the cross-scenario summary tables (markdown) of the
// reports: per scenario and mode, one column per policy.
func WriteSummary(w io.Writer, reps []*Report) error {
	if len(reps) == 0 {
		return nil
	}
	var b strings.Builder
	var names []string
	for _, r := range reps[0].Results[reps[0].Modes[0]] {
		names = append(names, r.Policy)
	}
	table := func(title, note string, cell func(rep *Report, r *Result) string) {
		fmt.Fprintf(&b, "### %s\n\n", title)
		if note != "" {
			fmt.Fprintf(&b, "%s\n\n", note)
		}
		fmt.Fprintf(&b, "| scenario | engine | %s |\n|---|---|", strings.Join(names, " | "))
		for range names {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, rep := range reps {
			for _, m := range rep.Modes {
				fmt.Fprintf(&b, "| [%s](results/%s.md) | %s |", rep.Scenario.Name, rep.Scenario.Name, m)
				for _, r := range rep.Results[m] {
					fmt.Fprintf(&b, " %s |", cell(rep, r))
				}
				b.WriteString("\n")
			}
		}
		b.WriteString("\n")
	}
	table("Largest deviation from the entitled share (percentage points, saturated teams)", "", func(_ *Report, r *Result) string {
		return fmt.Sprintf("%.1f", 100*r.MaxShareError())
	})
	table("Jain's index on share-normalised throughput (saturated teams)", "", func(_ *Report, r *Result) string {
		return fmt.Sprintf("%.3f", r.Pool.Jain)
	})
	table("Interactive TTFT p99 of the protected team, s (× running alone)",
		"The protected team is the scenario's `alone` team (S1 `chat`, S4 `chat`, S5 `owner`, S7 `rag`); other scenarios show the worst interactive p99 over teams.",
		func(rep *Report, r *Result) string {
			name := rep.headlineTeam()
			var p99 float64
			if name == "" {
				for _, t := range r.Teams {
					p99 = math.Max(p99, t.Class[Interactive].TTFTp99.Seconds())
				}
				return fmt.Sprintf("%.2f", p99)
			}
			p99 = r.Team(name).Class[Interactive].TTFTp99.Seconds()
			if rep.Alone != nil {
				a := rep.Alone.Team(name).Class[Interactive].TTFTp99.Seconds()
				if a > 0 {
					return fmt.Sprintf("%.2f (%.1f×)", p99, p99/a)
				}
			}
			return fmt.Sprintf("%.2f", p99)
		})
	table("Pool service rate relative to FCFS", "", func(rep *Report, r *Result) string {
		f := rep.Results[r.Mode][0].Pool.ServiceRate
		if f == 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f", r.Pool.ServiceRate/f)
	})
	table("Preemptions", "", func(_ *Report, r *Result) string { return fmt.Sprintf("%d", r.Pool.Preemptions) })
	_, err := io.WriteString(w, b.String())
	return err
}
