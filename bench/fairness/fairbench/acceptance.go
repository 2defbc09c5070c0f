package fairbench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Target is one acceptance target of flow control measured on
// one column of one run.
type Target struct {
	// Scenario and Mode name the run; Name says what is measured.
	Scenario, Mode, Name string
	// Value is the measure and Limit its bound: Value <= Limit when AtMost,
	// else Value >= Limit.
	Value, Limit float64
	AtMost       bool
	// Format formats Value and Limit ("%.2f s", "%.3f").
	Format string
	// Detail qualifies the value (the team it was measured on), or "".
	Detail string
}

// OK reports whether the target holds.
func (t Target) OK() bool {
	if t.AtMost {
		return t.Value <= t.Limit
	}
	return t.Value >= t.Limit
}

// String returns the target as "s1-flood/vllm: name: value (<= limit) ok".
func (t Target) String() string {
	op, verdict := ">=", "holds"
	if t.AtMost {
		op = "<="
	}
	if !t.OK() {
		verdict = "FAILS"
	}
	d := ""
	if t.Detail != "" {
		d = " (" + t.Detail + ")"
	}
	return fmt.Sprintf("%s/%s: %s: "+t.Format+"%s (want %s "+t.Format+"): %s", t.Scenario, t.Mode, t.Name, t.Value, d, op, t.Limit, verdict)
}

// Column returns the result of the named policy in mode: a column of the
// main table or of the ablation table (nil if absent).
func (rep *Report) Column(mode, policy string) *Result {
	for _, rs := range [][]*Result{rep.Results[mode], rep.Ablations[mode]} {
		for _, r := range rs {
			if r != nil && r.Policy == policy {
				return r
			}
		}
	}
	return nil
}

// FlowTargets returns the flow-control acceptance targets for the named column
// of rep, in every mode, as the scenario's targets section names them
// (none if the column or the references are missing), in this order:
//
//   - alone_p99_vs_alone: the `alone` team's interactive p99 TTFT as a
//     multiple of its p99 running alone (S1, vLLM main: at most 1.5×);
//   - worst_p99_vs_vtc: the worst p99 TTFT of any team and class as a
//     multiple of VTC's worst in the same mode (S2, S5, S6: at most
//     1.25×);
//   - max_share_error_points: every saturated team's share within ±limit
//     points (S2, S5, S6: 2);
//   - jain: Jain's index (S2, S5, S6: at least 0.99);
//   - alone_p99_vs_fcfs: the `alone` team's interactive p99 TTFT as a
//     fraction of FCFS's (S7: at most a fifth);
//   - service_vs_fcfs: the service as a fraction of FCFS's (S2, S5, S6:
//     at least 0.97; S7: 0.95; S1: reported, no target);
//   - within_share_interactive_p99_vs_fcfs: every team's within-share
//     interactive p99 TTFT as a fraction of its interactive p99 under
//     FCFS (the trace scenarios: at most a fifth);
//   - worst_p99_vs_epp: the worst p99 TTFT of any team and class as a
//     multiple of each EPP column's worst (the trace scenarios: at most
//     1);
//   - reserved_p99_vs_best_peer: the interactive p99 TTFT of every team
//     the scenario does not list as saturated (inside its reservation) as
//     a multiple of the best of vtc, epp-rr and epp-paf for that team
//     (the trace scenarios: at most 1.25×);
//   - reserved_p99_vs_fcfs: the same teams' interactive p99 TTFT as a
//     fraction of FCFS's (the trace scenarios: at most a fifth);
//   - the users targets (UsersTargets: users_light_p99_vs_alone,
//     users_team_share_vs_flat_points, users_nothing_lost; S10);
//   - within_share_interactive_p50_s: every team's within-share
//     interactive p50 TTFT (every scenario: at most 0.2 s).
func FlowTargets(rep *Report, policy string) []Target {
	var out []Target
	s := rep.Scenario
	ts := s.Targets
	for _, m := range rep.Modes {
		col := rep.Column(m, policy)
		fcfs := rep.Column(m, "fcfs")
		vtc := rep.Column(m, "vtc")
		if col == nil || fcfs == nil || vtc == nil {
			continue
		}
		add := func(name string, v float64, b *Bound, format string) {
			lim, atMost := b.limit()
			out = append(out, Target{Scenario: s.Name, Mode: m, Name: name, Value: v, Limit: lim, AtMost: atMost, Format: format})
		}
		if b := ts.AloneP99VsAlone; b.in(m) && rep.Alone != nil {
			a := rep.Alone.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			p := col.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			add(fmt.Sprintf("`%s` interactive p99 TTFT / alone", s.Alone), p/a, b, "%.2f×")
		}
		if b := ts.WorstP99VsVTC; b.in(m) {
			add("worst p99 TTFT / VTC's worst", col.WorstTTFTp99().Seconds()/vtc.WorstTTFTp99().Seconds(), b, "%.2f×")
		}
		if b := ts.MaxShareError; b.in(m) {
			add("max share error (points)", 100*col.MaxShareError(), b, "%.1f")
		}
		if b := ts.Jain; b.in(m) {
			add("Jain", col.Pool.Jain, b, "%.3f")
		}
		if b := ts.AloneP99VsFCFS; b.in(m) {
			p := col.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			f := fcfs.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			add(fmt.Sprintf("`%s` interactive p99 TTFT / FCFS's", s.Alone), p/f, b, "%.3f")
		}
		if b := ts.ServiceVsFCFS; b.in(m) {
			name := "service vs FCFS"
			if b.Report {
				name += " (reported, no target)"
			}
			add(name, col.Pool.ServiceRate/fcfs.Pool.ServiceRate, b, "%.3f")
		}
		if b := ts.WithinShareP99VsFCFS; b.in(m) {
			worst, team := -1.0, ""
			for _, t := range col.Teams {
				c, f := t.Class[Interactive], fcfs.Team(t.Team).Class[Interactive]
				if c.Within > 0 && f.TTFTp99 > 0 {
					if r := c.WithinTTFTp99.Seconds() / f.TTFTp99.Seconds(); r > worst {
						worst, team = r, t.Team
					}
				}
			}
			if team != "" {
				add("within-share interactive p99 TTFT / FCFS's p99, worst team", worst, b, "%.3f")
				out[len(out)-1].Detail = "`" + team + "`"
			}
		}
		elasticTargets(s, m, col, add, func(d string) { out[len(out)-1].Detail = d })
		if b := ts.WorstP99VsEPP; b.in(m) {
			worst, name := -1.0, ""
			for _, p := range []string{EPPRoundRobin, EPPProgramAware} {
				if e := rep.Column(m, p); e != nil && e.WorstTTFTp99() > 0 {
					if r := col.WorstTTFTp99().Seconds() / e.WorstTTFTp99().Seconds(); r > worst {
						worst, name = r, p
					}
				}
			}
			if name != "" {
				add("worst p99 TTFT / each EPP column's worst", worst, b, "%.2f×")
				out[len(out)-1].Detail = "vs `" + name + "`"
			}
		}
		reserved := func(ratio func(t TeamResult) (float64, bool)) (float64, string) {
			worst, team := -1.0, ""
			for _, t := range col.Teams {
				if slices.Contains(s.Saturated, t.Team) || t.Class[Interactive].Requests == 0 {
					continue
				}
				if r, ok := ratio(t); ok && r > worst {
					worst, team = r, t.Team
				}
			}
			return worst, team
		}
		if b := ts.ReservedP99VsBestPeer; b.in(m) {
			worst, team := reserved(func(t TeamResult) (float64, bool) {
				best := 0.0
				for _, p := range []string{"vtc", EPPRoundRobin, EPPProgramAware} {
					if e := rep.Column(m, p); e != nil {
						if v := e.Team(t.Team).Class[Interactive].TTFTp99.Seconds(); v > 0 && (best == 0 || v < best) {
							best = v
						}
					}
				}
				return t.Class[Interactive].TTFTp99.Seconds() / best, best > 0
			})
			if team != "" {
				add("interactive p99 TTFT of a team inside its reservation / the best of vtc, epp-rr, epp-paf, worst team", worst, b, "%.2f×")
				out[len(out)-1].Detail = "`" + team + "`"
			}
		}
		if b := ts.ReservedP99VsFCFS; b.in(m) {
			worst, team := reserved(func(t TeamResult) (float64, bool) {
				f := fcfs.Team(t.Team).Class[Interactive].TTFTp99.Seconds()
				return t.Class[Interactive].TTFTp99.Seconds() / f, f > 0
			})
			if team != "" {
				add("interactive p99 TTFT of a team inside its reservation / FCFS's, worst team", worst, b, "%.3f")
				out[len(out)-1].Detail = "`" + team + "`"
			}
		}
		out = append(out, UsersTargets(rep, m, policy)...)
		b := ts.WithinShareP50
		if !b.in(m) {
			continue
		}
		worst, team := 0.0, ""
		for _, t := range col.Teams {
			if c := t.Class[Interactive]; c.Within > 0 && c.WithinTTFTp50.Seconds() >= worst {
				worst, team = c.WithinTTFTp50.Seconds(), t.Team
			}
		}
		if team != "" {
			add("within-share interactive p50 TTFT of the worst team, s", worst, b, "%.3f")
			out[len(out)-1].Detail = "`" + team + "`"
		}
	}
	return out
}

// EngineOffColumn is the name of the column of the plugin with
// engine_priority "off" in front of engines under FCFS.
const EngineOffColumn = "plugin-off-fcfs"

// EngineOffTargets returns the engine-off target for rep's EngineOffColumn,
// in every mode the scenario's targets section names it for (none if the
// column is missing): engine_off_max_share_error_points, every saturated
// team's share within ±limit points when nothing but holding at the
// gateway enforces the reservations (S2: 2).
func EngineOffTargets(rep *Report, policy string) []Target {
	var out []Target
	s := rep.Scenario
	for _, m := range rep.Modes {
		col := rep.Column(m, policy)
		b := s.Targets.EngineOffShareError
		if col == nil || !b.in(m) {
			continue
		}
		lim, atMost := b.limit()
		out = append(out, Target{Scenario: s.Name, Mode: m, Name: "max share error (points), FCFS engine", Value: 100 * col.MaxShareError(),
			Limit: lim, AtMost: atMost, Format: "%.1f"})
	}
	return out
}

// WriteEngineOffTargets writes EngineOffTargets of every report as a
// markdown table, one column: EngineOffColumn.
func WriteEngineOffTargets(w io.Writer, reps []*Report) error {
	return writeTargets(w, reps, []string{EngineOffColumn}, EngineOffTargets)
}

// WriteTargets writes the targets as a markdown table, one row per target
// of every report, for each named column.
func WriteTargets(w io.Writer, reps []*Report, policies []string) error {
	return writeTargets(w, reps, policies, FlowTargets)
}

// writeTargets writes the targets that targets returns for each report
// and named column as a markdown table.
func writeTargets(w io.Writer, reps []*Report, policies []string, targets func(*Report, string) []Target) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | engine | target | bound |")
	for _, p := range policies {
		fmt.Fprintf(&b, " %s |", p)
	}
	b.WriteString("\n|---|---|---|---|")
	for range policies {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, rep := range reps {
		type key struct{ mode, name string }
		var rows []key
		cells := map[key][]*Target{}
		for i, p := range policies {
			ts := targets(rep, p)
			for k := range ts {
				t := &ts[k]
				kk := key{t.Mode, t.Name}
				if cells[kk] == nil {
					rows = append(rows, kk)
					cells[kk] = make([]*Target, len(policies))
				}
				cells[kk][i] = t
			}
		}
		for _, kk := range rows {
			var ref *Target
			for _, t := range cells[kk] {
				if t != nil {
					ref = t
					break
				}
			}
			op := ">="
			if ref.AtMost {
				op = "<="
			}
			bound := op + " " + fmt.Sprintf(ref.Format, ref.Limit)
			if ref.Limit == 0 && !ref.AtMost {
				bound = "—"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |", ref.Scenario, ref.Mode, ref.Name, bound)
			for _, t := range cells[kk] {
				if t == nil {
					b.WriteString(" — |")
					continue
				}
				mark := ""
				if bound != "—" {
					mark = " ✓"
					if !t.OK() {
						mark = " ✗"
					}
				}
				d := ""
				if t.Detail != "" {
					d = " " + t.Detail
				}
				fmt.Fprintf(&b, " "+t.Format+"%s%s |", t.Value, d, mark)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
