package fairbench

import (
	"fmt"
	"io"
	"strings"
)

// Target is one acceptance target of issue 10 (flow control) measured on
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

// FlowTargets returns issue 10's acceptance targets for the named column
// of rep, in every mode (none if the column or the references are
// missing):
//
//   - S1 (vLLM main): the `alone` team's interactive p99 TTFT at most 1.5×
//     its p99 running alone (the service against FCFS is reported with it);
//   - S2, S5, S6: the worst p99 TTFT of any team and class at most 1.25×
//     VTC's worst in the same mode, every saturated team's share within
//     ±2 points, Jain at least 0.99, service at least 0.97 of FCFS's;
//   - S7 (KV-bound): the `alone` team's interactive p99 TTFT at most a
//     fifth of FCFS's, service at least 0.95 of FCFS's;
//   - every scenario: every team's within-share interactive p50 TTFT at
//     most 0.2 s.
func FlowTargets(rep *Report, policy string) []Target {
	var out []Target
	s := rep.Scenario
	for _, m := range rep.Modes {
		col := rep.Column(m, policy)
		fcfs := rep.Column(m, "fcfs")
		vtc := rep.Column(m, "vtc")
		if col == nil || fcfs == nil || vtc == nil {
			continue
		}
		add := func(name string, v, lim float64, atMost bool, format string) {
			out = append(out, Target{Scenario: s.Name, Mode: m, Name: name, Value: v, Limit: lim, AtMost: atMost, Format: format})
		}
		service := col.Pool.ServiceRate / fcfs.Pool.ServiceRate
		switch {
		case strings.HasPrefix(s.Name, "s1-") && m == ModeVLLM && rep.Alone != nil:
			a := rep.Alone.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			p := col.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			add(fmt.Sprintf("`%s` interactive p99 TTFT / alone", s.Alone), p/a, 1.5, true, "%.2f×")
			add("service vs FCFS (reported, no target)", service, 0, false, "%.3f")
		case strings.HasPrefix(s.Name, "s2-") || strings.HasPrefix(s.Name, "s5-") || strings.HasPrefix(s.Name, "s6-"):
			add("worst p99 TTFT / VTC's worst", col.WorstTTFTp99().Seconds()/vtc.WorstTTFTp99().Seconds(), 1.25, true, "%.2f×")
			add("max share error (points)", 100*col.MaxShareError(), 2, true, "%.1f")
			add("Jain", col.Pool.Jain, 0.99, false, "%.3f")
			add("service vs FCFS", service, 0.97, false, "%.3f")
		case strings.HasPrefix(s.Name, "s7-") && s.Alone != "":
			p := col.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			f := fcfs.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
			add(fmt.Sprintf("`%s` interactive p99 TTFT / FCFS's", s.Alone), p/f, 0.2, true, "%.3f")
			add("service vs FCFS", service, 0.95, false, "%.3f")
		}
		worst, team := 0.0, ""
		for _, t := range col.Teams {
			if c := t.Class[Interactive]; c.Within > 0 && c.WithinTTFTp50.Seconds() >= worst {
				worst, team = c.WithinTTFTp50.Seconds(), t.Team
			}
		}
		if team != "" {
			add("within-share interactive p50 TTFT of the worst team, s", worst, 0.2, true, "%.3f")
			out[len(out)-1].Detail = "`" + team + "`"
		}
	}
	return out
}

// WriteTargets writes the targets as a markdown table, one row per target
// of every report, for each named column.
func WriteTargets(w io.Writer, reps []*Report, policies []string) error {
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
			ts := FlowTargets(rep, p)
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
