package fairbench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// RequestCost are the token counts of one finished request, from which a
// report computes what a gateway charged for it.
type RequestCost struct {
	// Team is the team's index in the scenario; Class its class.
	Team  int
	Class Class
	// Finished is when its last token came.
	Finished time.Duration
	// Window reports whether it arrived in the measured window.
	Window bool
	// Prompt, Cached and Output are its prompt tokens, those served from
	// the prefix cache, and its output tokens (vLLM's usage).
	Prompt, Cached, Output int
	// MaxTokens is the max_tokens it carried (0: none).
	MaxTokens int
}

// CostAblation is the name of the ablation column that runs the plugin
// with its default cost weights in a scenario with plugin_cost.
const CostAblation = "plugin-cost1"

// SeatsAblation is the name of the ablation column that runs the plugin
// without the scenario's plugin_throughput: reservations in sequences and
// KV tokens only.
const SeatsAblation = "plugin-seats"

// pluginDefaultMaxTokens is the plugin's default_max_tokens: its
// completion estimate for a request without max_tokens.
const pluginDefaultMaxTokens = 512

// PluginEstimateTokens returns the plugin's estimate of a benchmark
// request's prompt and completion, as its entry penalty charges them at
// admission: the prompt is bytes/4 (rounded up) of the chat messages
// the gateway sends ([{"role":"user","content":"…"}] with 4 bytes a
// token), the completion max_tokens or, without one, default_max_tokens.
// The plugin never knows how much of the prompt vLLM will find cached,
// so the estimate charges all of it at cost.prompt_token.
func PluginEstimateTokens(prompt, maxTokens int) (in, out int) {
	const wrapper = len(`[{"role":"user","content":""}]`)
	in = (wrapper + 4*prompt + 3) / 4
	out = maxTokens
	if out <= 0 {
		out = pluginDefaultMaxTokens
	}
	return in, out
}

// Estimate returns the plugin's entry-penalty estimate of c under the cost
// weights.
func (c RequestCost) Estimate(cost *CostSpec) float64 {
	wp, _, wo := cost.Weights()
	in, out := PluginEstimateTokens(c.Prompt, c.MaxTokens)
	return float64(in)*wp + float64(out)*wo
}

// Settled returns the cost the plugin settles c at from the response's
// usage: uncached prompt tokens at prompt_token, cached ones at
// cached_prompt_token (reported only with prompt_tokens_details), output
// at completion_token.
func (c RequestCost) Settled(cost *CostSpec, details bool) float64 {
	wp, wc, wo := cost.Weights()
	cached := 0
	if details {
		cached = c.Cached
	}
	return float64(c.Prompt-cached)*wp + float64(cached)*wc + float64(c.Output)*wo
}

// Standing is one team's standing among the teams as a plugin column
// charges them, computed from the run's records.
type Standing struct {
	// Usage is the team's usage at the end of the measured window: every
	// request finished by then charged its settled cost, decayed with the
	// scenario's half-life from its finish (the plugin's decayed usage
	// without the entry penalties of requests still running).
	Usage float64
	// Rank is the team's rank by Usage / share (1: the smallest, served
	// first among borrowers).
	Rank int
	// Estimate and Settled sum the entry-penalty estimates and the settled
	// costs of the team's requests of the window.
	Estimate, Settled float64
	// AbsErr sums |estimate − settled| over them; Requests counts them.
	AbsErr   float64
	Requests int
}

// Bias returns Estimate / Settled − 1: how much the entry penalty
// over-charges (positive) or under-charges the team while its requests
// run.
func (s Standing) Bias() float64 {
	if s.Settled == 0 {
		return 0
	}
	return s.Estimate/s.Settled - 1
}

// MeanAbsErr returns the estimate's error as a ratio of sums,
// Σ|estimate − settled| / Σsettled.
func (s Standing) MeanAbsErr() float64 {
	if s.Settled == 0 {
		return 0
	}
	return s.AbsErr / s.Settled
}

// Standings returns every team's standing in r under the cost weights
// (details: the usage reports cached tokens) with half-life hl (0: no
// decay).
func Standings(sc *Scenario, r *Result, cost *CostSpec, details bool, hl time.Duration) []Standing {
	out := make([]Standing, len(sc.Teams))
	for _, c := range r.Costs {
		st := &out[c.Team]
		settled := c.Settled(cost, details)
		if c.Finished <= r.To {
			age := (r.To - c.Finished).Seconds()
			f := 1.0
			if hl > 0 {
				f = math.Exp2(-age / hl.Seconds())
			}
			st.Usage += settled * f
		}
		if c.Window {
			e := c.Estimate(cost)
			st.Estimate += e
			st.Settled += settled
			st.AbsErr += math.Abs(e - settled)
			st.Requests++
		}
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ua, ub := out[a].Usage/sc.Teams[a].Share, out[b].Usage/sc.Teams[b].Share
		switch {
		case ua < ub:
			return -1
		case ua > ub:
			return 1
		}
		return 0
	})
	for k, i := range idx {
		out[i].Rank = k + 1
	}
	return out
}

// CostColumn is a plugin column of a cost comparison with the cost
// weights it ran with.
type CostColumn struct {
	// Result is the column's run.
	Result *Result
	// Cost are its weights (nil: the plugin's defaults).
	Cost *CostSpec
}

// writeCosts writes the cost-weight comparison of a scenario with a
// plugin_cost: per team, the share of service, the standing among the
// teams (rank by usage / share, usage at the end of the window) and the
// entry penalty's estimate against the settled cost, for each column.
func (rep *Report) writeCosts(b *strings.Builder, cols []CostColumn) {
	s := rep.Scenario
	hl := DefaultHalfLife
	if s.HalfLife > 0 {
		hl = Sec(s.HalfLife)
	}
	b.WriteString("### Cost weights: standing and entry-penalty error\n\n")
	b.WriteString("Computed from the run's records with each column's cost weights (not read from the plugin): usage is every request finished by the end of the window charged its settled cost (uncached prompt × prompt_token + cached prompt × cached_prompt_token + output × completion_token, cached tokens as vLLM's usage reports them) and decayed with the half-life; rank orders the teams by usage / share (1 is served first among borrowers). The entry penalty charges each request its estimate at admission (prompt bytes/4 × prompt_token + max_tokens × completion_token, default_max_tokens 512 without max_tokens) until its response settles it; bias is Σestimate / Σsettled − 1 over the team's requests of the window, error Σ|estimate − settled| / Σsettled.\n\n")
	b.WriteString("| team | measure |")
	for _, c := range cols {
		p, cc, o := c.Cost.Weights()
		fmt.Fprintf(b, " %s (%g / %g / %g) |", c.Result.Policy, p, cc, o)
	}
	b.WriteString("\n|---|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	st := make([][]Standing, len(cols))
	for k, c := range cols {
		st[k] = Standings(s, c.Result, c.Cost, s.Engine.PromptTokensDetails, hl)
	}
	for i, t := range s.Teams {
		rows := []struct {
			name string
			f    func(k int) string
		}{
			{"service share", func(k int) string { return fmt.Sprintf("%.3f", cols[k].Result.Teams[i].ServiceShare) }},
			{"cached prompt tokens", func(k int) string {
				tr := cols[k].Result.Teams[i]
				if tr.PromptTokens == 0 {
					return "—"
				}
				return fmt.Sprintf("%.1f%%", 100*float64(tr.CachedTokens)/float64(tr.PromptTokens))
			}},
			{"rank (usage / share, end of window)", func(k int) string {
				return fmt.Sprintf("%d (%.3g)", st[k][i].Rank, st[k][i].Usage/t.Share)
			}},
			{"borrowing requests", func(k int) string { return fmt.Sprintf("%d", cols[k].Result.Teams[i].Borrowing) }},
			{"entry penalty bias / error", func(k int) string {
				x := st[k][i]
				if x.Requests == 0 {
					return "—"
				}
				return fmt.Sprintf("%+.1f%% / %.1f%%", 100*x.Bias(), 100*x.MeanAbsErr())
			}},
		}
		for _, row := range rows {
			fmt.Fprintf(b, "| %s | %s |", t.Name, row.name)
			for k := range cols {
				fmt.Fprintf(b, " %s |", row.f(k))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
}
