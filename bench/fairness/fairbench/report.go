package fairbench

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"
)

// Engine behaviours a scenario runs under.
const (
	// ModeVLLM is vLLM main: a waiting request never preempts a running
	// one (vllm#40004).
	ModeVLLM = "vllm"
	// Mode45561 is PR #45561: at max_num_seqs, a waiting request of better
	// (priority, arrival) preempts the worst running one.
	Mode45561 = "pr45561"
)

// ModeTitle returns the heading of an engine mode.
func ModeTitle(mode string) string {
	if mode == Mode45561 {
		return "vLLM with PR #45561 (a waiting request preempts the worst running one at max_num_seqs)"
	}
	return "vLLM main (a waiting request never preempts; vllm#40004)"
}

// Report is everything measured for one scenario.
type Report struct {
	// Scenario is the scenario run (as run: scaled under -quick).
	Scenario *Scenario
	// Seed is the seed used.
	Seed uint64
	// Modes lists the engine modes in order; Results[mode] holds one
	// result per policy, in column order.
	Modes   []string
	Results map[string][]*Result
	// Ablations[mode] holds the runs of the scenario's ablations, in
	// Scenario.Ablations order, then the suite's extra variants.
	Ablations map[string][]*Result
	// AblationNotes say what each ablation column is, in the order of
	// Ablations[mode].
	AblationNotes []string
	// Alone is the Alone team's workloads run alone under FCFS (nil if
	// the scenario has no Alone team).
	Alone *Result
	// AloneUsers is the AloneUsers' workloads run alone under FCFS (nil
	// if the scenario has no AloneUsers).
	AloneUsers *Result
	// PluginPath says how the plugin column ran ("wasm" or "native").
	PluginPath string
	// Charts lists the chart files written for the report, per mode.
	Charts map[string][]string
}

func secs(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s >= 100:
		return fmt.Sprintf("%.0f", s)
	case s >= 10:
		return fmt.Sprintf("%.1f", s)
	default:
		return fmt.Sprintf("%.2f", s)
	}
}

// WriteMarkdown writes the report's tables as markdown: per engine mode, the
// policies side by side.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	s := rep.Scenario
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %s\n\n", s.Name, s.Title)
	if s.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(s.Description))
	}
	rep.writeSetup(&b)
	for _, mode := range rep.Modes {
		rs := rep.Results[mode]
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n", ModeTitle(mode))
		rep.writeShares(&b, rs)
		rep.writeLatency(&b, rs, "Interactive TTFT p50 / p99 (s)", Interactive, true)
		rep.writeLatency(&b, rs, "Batch TTFT p50 / p99 (s)", Batch, true)
		rep.writeLatency(&b, rs, "Interactive end-to-end latency p50 / p99 (s)", Interactive, false)
		rep.writeLatency(&b, rs, "Batch end-to-end latency p50 / p99 (s)", Batch, false)
		rep.writeUsers(&b, mode, rs)
		rep.writePool(&b, rs)
		writeElastic(&b, s, rs)
		if ab := rep.Ablations[mode]; len(ab) > 0 {
			rep.writeAblations(&b, rs, ab)
		}
		if s.PluginCost != nil {
			cols := []CostColumn{{Result: rs[len(rs)-1], Cost: s.PluginCost}}
			if r := rep.Column(mode, CostAblation); r != nil {
				cols = append(cols, CostColumn{Result: r})
			}
			rep.writeCosts(&b, cols)
		}
		for _, c := range rep.Charts[mode] {
			fmt.Fprintf(&b, "![%s](%s)\n\n", filepath.Base(c), filepath.Base(c))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (rep *Report) writeSetup(b *strings.Builder) {
	s := rep.Scenario
	e := s.Engine
	fmt.Fprintf(b, "Setup: %d replica(s) of the `%s` engine preset", s.Replicas(), e.Preset)
	if e.MaxNumSeqs > 0 {
		fmt.Fprintf(b, ", max_num_seqs %d", e.MaxNumSeqs)
	}
	if e.NumBlocks > 0 {
		fmt.Fprintf(b, ", %d KV blocks", e.NumBlocks)
	}
	fmt.Fprintf(b, "; pool capacity C = %d; %.0f s run", s.Capacity, s.Duration)
	if s.Warmup > 0 {
		fmt.Fprintf(b, " of which the first %.0f s are warm-up (not measured)", s.Warmup)
	}
	fmt.Fprintf(b, "; seed %d; plugin column: **%s**.\n\n", rep.Seed, rep.PluginPath)
	b.WriteString("| team | share | workloads |\n|---|---|---|\n")
	for _, t := range s.Teams {
		var ws []string
		for _, w := range s.Workloads {
			if w.Team == t.Name {
				ws = append(ws, describeWorkload(w))
			}
		}
		fmt.Fprintf(b, "| %s | %.2f | %s |\n", t.Name, t.Share, strings.Join(ws, "; "))
	}
	b.WriteString("\n")
	if e.MaxModelLen > 0 || e.PrefixCaching || e.PromptTokensDetails {
		var o []string
		if e.MaxModelLen > 0 {
			o = append(o, fmt.Sprintf("max_model_len %d", e.MaxModelLen))
		}
		if e.PrefixCaching {
			o = append(o, "prefix caching on")
		}
		if e.PromptTokensDetails {
			o = append(o, "usage reports prompt_tokens_details.cached_tokens")
		}
		fmt.Fprintf(b, "Engine: %s.", strings.Join(o, ", "))
		if c := s.PluginCost; c != nil {
			p, cc, out := c.Weights()
			fmt.Fprintf(b, " Plugin cost weights: prompt_token %g, cached_prompt_token %g, completion_token %g (`%s`: the defaults 1 / 1 / 2).", p, cc, out, CostAblation)
		}
		b.WriteString("\n\n")
	}
	if ws := s.TraceWindows(); len(ws) > 0 {
		b.WriteString("Trace windows replayed (statistics of the stream each workload replays, `trace.Summarize`; arrivals past the run's end are cut):\n\n")
		b.WriteString("| team | trace | window | requests | rate /s | inter-arrival CV | per minute | prompt mean / p99 | output mean / p99 |\n|---|---|---|---:|---:|---:|---|---|---|\n")
		for _, w := range ws {
			st := w.Stats
			fmt.Fprintf(b, "| %s | `%s` | %s | %d | %.2f | %.2f | %d to %d | %.0f / %d | %.0f / %d |\n", w.Team, w.Name, describeSpec(w.Spec),
				st.Count, st.Rate, st.CV, st.MinPerMinute, st.MaxPerMinute, st.Prompt.Mean, st.Prompt.P99, st.Output.Mean, st.Output.P99)
		}
		b.WriteString("\n")
	}
	for _, c := range s.CapacityChanges {
		fmt.Fprintf(b, "At %.0f s the pool changes to %d replica(s), C = %d.\n\n", c.At, c.Replicas, c.Capacity)
	}
}

func describeWorkload(w WorkloadSpec) string {
	var d string
	switch w.Kind {
	case KindPoisson:
		d = fmt.Sprintf("Poisson %.3g req/s", w.Rate)
	case KindClosed:
		d = fmt.Sprintf("closed loop, %d users", w.Concurrency)
		if w.ThinkTime > 0 {
			d += fmt.Sprintf(" (think %.3g s)", w.ThinkTime)
		}
	case KindBurst:
		d = fmt.Sprintf("burst of %d", w.Count)
	case KindTrace:
		d = describeTrace(w)
	}
	if w.Kind != KindTrace {
		d += fmt.Sprintf(", prompt %s, output %s", describeDist(w.Prompt), describeDist(w.Output))
	}
	if w.MaxTokens > 0 {
		d += fmt.Sprintf(" (max_tokens %d)", w.MaxTokens)
	} else {
		d += " (no max_tokens)"
	}
	d += fmt.Sprintf(", %.0f%% interactive", 100*w.Interactive)
	if w.Kind == KindBurst {
		d += fmt.Sprintf(", at %.0f s", w.Start)
	} else if w.Start > 0 || w.Stop > 0 {
		stop := "end"
		if w.Stop > 0 {
			stop = fmt.Sprintf("%.0f s", w.Stop)
		}
		d += fmt.Sprintf(", %.0f s to %s", w.Start, stop)
	}
	return d
}

func describeDist(d LengthDist) string {
	switch d.Dist {
	case DistUniform:
		return fmt.Sprintf("U[%d,%d]", d.Min, d.Max)
	case DistLogNormal:
		return fmt.Sprintf("lognormal(mean %.0f, cv %.2g)", d.Mean, d.CV)
	case DistExp:
		return fmt.Sprintf("exp(mean %.0f)", d.Mean)
	}
	return fmt.Sprintf("%.0f", d.Mean)
}

func header(b *strings.Builder, first []string, rs []*Result, extra ...string) {
	cols := append([]string(nil), first...)
	for _, r := range rs {
		cols = append(cols, r.Policy)
	}
	cols = append(cols, extra...)
	fmt.Fprintf(b, "| %s |\n|", strings.Join(cols, " | "))
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
}

func (rep *Report) writeShares(b *strings.Builder, rs []*Result) {
	b.WriteString("### Throughput share (service in + 2·out, measured window)\n\n")
	b.WriteString("Saturated teams: share of the saturated teams' service against the entitled share (share normalised over them). Other teams: share of all service.\n\n")
	writeShareTable(b, rs, func(tr TeamResult) float64 {
		if tr.Saturated {
			return tr.SatShare
		}
		return tr.ServiceShare
	})
	rep.writeFair(b, rs)
	b.WriteString("### Sequence-time share (engine sequences held, measured window)\n\n")
	b.WriteString("The resource a reservation in sequences divides: each request counts from its first scheduling to its finish. Saturated teams: share of the saturated teams' sequence time. Other teams: share of all.\n\n")
	writeShareTable(b, rs, func(tr TeamResult) float64 { return tr.SeqShare })
}

// writeFair writes, when some saturated team asked for less than its
// entitled part of the saturated teams' service under some policy, what
// each team offered and its max-min fair share per policy
// (TeamResult.Fair), the reference of the max share error and Jain.
func (rep *Report) writeFair(b *strings.Builder, rs []*Result) {
	capped := false
	for _, r := range rs {
		for _, t := range r.Teams {
			if t.Saturated && math.Abs(t.Fair-t.Entitled) >= 0.0005 {
				capped = true
			}
		}
	}
	if !capped {
		return
	}
	span := (rs[0].To - rs[0].From).Seconds()
	b.WriteString("### Max-min fair share (offered service, measured window)\n\n")
	b.WriteString("Some saturated team asked for less than its entitled part of what the saturated teams got, and no policy can give a team more than it asks: the max share error and Jain are measured against the max-min fair share (the saturated teams' service divided by share, each team capped at what it offered, the rest to the others by share). Offered service (units/s) and fair share per policy:\n\n")
	header(b, []string{"team", "offered (units/s)"}, rs)
	for i, t := range rs[0].Teams {
		if !t.Saturated {
			continue
		}
		off := "closed loop"
		if !math.IsInf(t.Offered, 1) && span > 0 {
			off = fmt.Sprintf("%.0f", t.Offered/span)
		}
		fmt.Fprintf(b, "| %s | %s |", t.Team, off)
		for _, r := range rs {
			fmt.Fprintf(b, " %.3f |", r.Teams[i].Fair)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// writeShareTable writes a table of every team's share, entitlement and
// share(tr) under each policy of rs.
func writeShareTable(b *strings.Builder, rs []*Result, share func(TeamResult) float64) {
	header(b, []string{"team", "share", "entitled"}, rs)
	for i, t := range rs[0].Teams {
		ent := "—"
		if t.Saturated {
			ent = fmt.Sprintf("%.3f", t.Entitled)
		}
		fmt.Fprintf(b, "| %s | %.2f | %s |", t.Team, t.Share, ent)
		for _, r := range rs {
			fmt.Fprintf(b, " %.3f |", share(r.Teams[i]))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func (rep *Report) writeLatency(b *strings.Builder, rs []*Result, title string, class Class, ttft bool) {
	any := false
	for _, t := range rs[0].Teams {
		if t.Class[class].Requests > 0 {
			any = true
		}
	}
	if !any {
		return
	}
	fmt.Fprintf(b, "### %s\n\n", title)
	var extra []string
	if rep.Alone != nil {
		extra = []string{"alone (fcfs)", "p99 ratio to alone"}
	}
	header(b, []string{"team"}, rs, extra...)
	for i, t := range rs[0].Teams {
		if t.Class[class].Requests == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s |", t.Team)
		for _, r := range rs {
			c := r.Teams[i].Class[class]
			p50, p99 := c.E2Ep50, c.E2Ep99
			if ttft {
				p50, p99 = c.TTFTp50, c.TTFTp99
			}
			cell := secs(p50) + " / " + secs(p99)
			if c.Unfinished > 0 {
				cell += fmt.Sprintf(" (%d unf.)", c.Unfinished)
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		if rep.Alone != nil {
			a := rep.Alone.Teams[i].Class[class]
			if a.Requests == 0 {
				b.WriteString(" | |")
			} else {
				ap50, ap99 := a.E2Ep50, a.E2Ep99
				if ttft {
					ap50, ap99 = a.TTFTp50, a.TTFTp99
				}
				fmt.Fprintf(b, " %s / %s |", secs(ap50), secs(ap99))
				var ratios []string
				for _, r := range rs {
					c := r.Teams[i].Class[class]
					p99 := c.E2Ep99
					if ttft {
						p99 = c.TTFTp99
					}
					ratios = append(ratios, fmt.Sprintf("%s %.1f×", r.Policy, float64(p99)/float64(ap99)))
				}
				fmt.Fprintf(b, " %s |", strings.Join(ratios, ", "))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func (rep *Report) writePool(b *strings.Builder, rs []*Result) {
	b.WriteString("### Pool\n\n")
	header(b, []string{"measure"}, rs)
	row := func(name string, f func(*Result) string) {
		fmt.Fprintf(b, "| %s |", name)
		for _, r := range rs {
			fmt.Fprintf(b, " %s |", f(r))
		}
		b.WriteString("\n")
	}
	fcfs := rs[0]
	row("service rate (units/s)", func(r *Result) string { return fmt.Sprintf("%.0f", r.Pool.ServiceRate) })
	row("output tokens/s", func(r *Result) string { return fmt.Sprintf("%.0f", r.Pool.TokenRate) })
	row("service rate vs "+fcfs.Policy, func(r *Result) string {
		if fcfs.Pool.ServiceRate == 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f", r.Pool.ServiceRate/fcfs.Pool.ServiceRate)
	})
	row("KV blocks busy", func(r *Result) string { return fmt.Sprintf("%.1f%%", 100*r.Pool.KVUtil) })
	row("sequence slots busy", func(r *Result) string { return fmt.Sprintf("%.1f%%", 100*r.Pool.SlotUtil) })
	row("preemptions", func(r *Result) string { return fmt.Sprintf("%d", r.Pool.Preemptions) })
	row("Jain (share-normalised)", func(r *Result) string { return fmt.Sprintf("%.3f", r.Pool.Jain) })
	row("service gap (units)", func(r *Result) string { return fmt.Sprintf("%.0f", r.Pool.Gap) })
	for i, t := range fcfs.Teams {
		row("preemptions "+t.Team, func(r *Result) string { return fmt.Sprintf("%d", r.Teams[i].Preemptions) })
	}
	for i, t := range fcfs.Teams {
		row("borrowing requests "+t.Team, func(r *Result) string { return fmt.Sprintf("%d", r.Teams[i].Borrowing) })
	}
	b.WriteString("\n")
}

// Charts writes the report's PNGs for one mode into dir and returns their
// paths: per-team throughput over time (one panel per policy) and the TTFT
// CDF of interactive requests (one panel per team, one line per policy).
func (rep *Report) WriteCharts(dir, mode string) ([]string, error) {
	rs := rep.Results[mode]
	if len(rs) == 0 {
		return nil, nil
	}
	s := rep.Scenario
	var panels []Panel
	top := 0.0
	for _, r := range rs {
		for _, sr := range r.Series {
			for _, v := range sr {
				top = max(top, v)
			}
		}
	}
	for _, r := range rs {
		p := Panel{Title: "policy " + r.Policy, XLabel: "time (s)", YLabel: "units/s", YMax: top}
		for i, t := range r.Teams {
			sr := Series{Name: t.Team}
			for k, v := range r.Series[i] {
				sr.X = append(sr.X, (time.Duration(k)*r.Bucket + r.Bucket/2).Seconds())
				sr.Y = append(sr.Y, v)
			}
			p.Series = append(p.Series, sr)
		}
		panels = append(panels, p)
	}
	tp := filepath.Join(dir, fmt.Sprintf("%s-%s-throughput.png", s.Name, mode))
	if err := WriteChart(tp, fmt.Sprintf("%s, %s: per-team service (input + 2 x output tokens per second) over time", s.Name, mode), panels); err != nil {
		return nil, err
	}
	panels = nil
	for i, t := range rs[0].Teams {
		for k, lat := range [][]string{{"interactive"}, {"batch"}} {
			p := Panel{Title: fmt.Sprintf("team %s, %s TTFT CDF", t.Team, lat[0]), XLabel: "TTFT (s, log scale)", YLabel: "fraction", LogX: true, YMax: 1}
			n := 0
			for _, r := range rs {
				xsD := r.TTFT[i]
				if k == 1 {
					xsD = r.TTFTBatch[i]
				}
				n += len(xsD)
				x, y := CDF(xsD)
				p.Series = append(p.Series, Series{Name: r.Policy, X: x, Y: y, Step: true})
			}
			if n > 0 {
				panels = append(panels, p)
			}
		}
	}
	cp := filepath.Join(dir, fmt.Sprintf("%s-%s-ttft-cdf.png", s.Name, mode))
	if err := WriteChart(cp, fmt.Sprintf("%s, %s: TTFT CDF per team and class", s.Name, mode), panels); err != nil {
		return nil, err
	}
	return []string{tp, cp}, nil
}

// writeAblations compares the plugin column (the last of main) with the
// ablation runs, team by team, then pool-wide with the fcfs and vtc
// columns of main for reference.
func (rep *Report) writeAblations(b *strings.Builder, main, ab []*Result) {
	fcfs, plug := main[0], main[len(main)-1]
	rs := append([]*Result{plug}, ab...)
	var refs []*Result
	for _, r := range main {
		if r.Policy == "fcfs" || r.Policy == "vtc" {
			refs = append(refs, r)
		}
	}
	b.WriteString("### Ablation\n\nThe plugin column against variants (see docs/fairness.md):\n\n")
	for i, r := range ab {
		note := ""
		if i < len(rep.AblationNotes) {
			note = rep.AblationNotes[i]
		}
		fmt.Fprintf(b, "- `%s`: %s\n", r.Policy, note)
	}
	b.WriteString("\n")
	header(b, []string{"team", "measure"}, rs)
	for i, t := range plug.Teams {
		rows := []struct {
			name string
			f    func(*Result) string
		}{
			{"service share", func(r *Result) string { return fmt.Sprintf("%.3f", r.Teams[i].ServiceShare) }},
			{"interactive TTFT p50 / p99 (s)", func(r *Result) string {
				c := r.Teams[i].Class[Interactive]
				if c.Requests == 0 {
					return "—"
				}
				return secs(c.TTFTp50) + " / " + secs(c.TTFTp99)
			}},
			{"batch TTFT p50 / p99 (s)", func(r *Result) string {
				c := r.Teams[i].Class[Batch]
				if c.Requests == 0 {
					return "—"
				}
				return secs(c.TTFTp50) + " / " + secs(c.TTFTp99)
			}},
			{"batch end-to-end p50 / p99 (s)", func(r *Result) string {
				c := r.Teams[i].Class[Batch]
				if c.Requests == 0 {
					return "—"
				}
				return secs(c.E2Ep50) + " / " + secs(c.E2Ep99)
			}},
			{"within-share interactive TTFT p50 (s)", func(r *Result) string {
				c := r.Teams[i].Class[Interactive]
				if c.Within == 0 {
					return "—"
				}
				return secs(c.WithinTTFTp50)
			}},
			{"held at the gateway (requests; wait p99, s; still held at the end)", func(r *Result) string {
				t := r.Teams[i]
				n := t.Class[0].Held + t.Class[1].Held
				out := fmt.Sprintf("%d; %s", n, secs(max(t.Class[0].Waitp99, t.Class[1].Waitp99)))
				if never := t.Class[0].NeverSent + t.Class[1].NeverSent; never > 0 {
					out += fmt.Sprintf("; **%d never sent**", never)
				}
				return out
			}},
			{"borrowing requests", func(r *Result) string { return fmt.Sprintf("%d", r.Teams[i].Borrowing) }},
		}
		for _, row := range rows {
			fmt.Fprintf(b, "| %s | %s |", t.Team, row.name)
			for _, r := range rs {
				fmt.Fprintf(b, " %s |", row.f(r))
			}
			b.WriteString("\n")
		}
	}
	pool := []struct {
		name string
		f    func(*Result) string
	}{
		{"worst p99 TTFT of any team and class (s)", func(r *Result) string { return secs(r.WorstTTFTp99()) }},
		{"max share error (pp) / Jain", func(r *Result) string {
			return fmt.Sprintf("%.1f / %.3f", 100*r.MaxShareError(), r.Pool.Jain)
		}},
		{"service rate vs fcfs", func(r *Result) string {
			if fcfs.Pool.ServiceRate == 0 {
				return "—"
			}
			return fmt.Sprintf("%.3f", r.Pool.ServiceRate/fcfs.Pool.ServiceRate)
		}},
		{"KV blocks / slots busy", func(r *Result) string {
			return fmt.Sprintf("%.1f%% / %.1f%%", 100*r.Pool.KVUtil, 100*r.Pool.SlotUtil)
		}},
		{"preemptions", func(r *Result) string { return fmt.Sprintf("%d", r.Pool.Preemptions) }},
	}
	b.WriteString("\nPool-wide, with the fcfs and vtc columns for reference:\n\n")
	header(b, []string{"measure"}, append(append([]*Result(nil), refs...), rs...))
	for _, row := range pool {
		fmt.Fprintf(b, "| %s |", row.name)
		for _, r := range append(append([]*Result(nil), refs...), rs...) {
			fmt.Fprintf(b, " %s |", row.f(r))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}
