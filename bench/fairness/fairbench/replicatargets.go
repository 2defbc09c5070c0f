package fairbench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The replicas targets: R proxies sharing the pool through etcd (the
// plugin's cluster block) act as one pool.

// ReplicaTargets returns the replicas targets for the run many (the plugin
// on several proxies) against one (the same plugin on one proxy), of
// scenario s in mode, with bound the stated overshoot of the requests in
// flight, as the scenario's targets section names them:
//
//   - replica_share_difference_points: every team's share of the service
//     within ±limit points of its share on one proxy (the largest
//     difference, with its team; S1, S2: 2);
//   - replica_alone_p99_vs_one: the `alone` team's interactive p99 TTFT
//     (a team within its share) at most limit × its p99 on one proxy
//     (S1: 1.2);
//   - on a capacity_from_engines scenario, its capacity_from targets
//     (capacity_follow_s, phase_share_error_points, nothing_lost: the
//     fleet reads the engines and agrees on C) on many;
//   - with bound >= 0 (flow control: borrowers are held while the pool
//     is full), the most borrowers in flight at the engines at most C +
//     bound (the
//     replicas gateway checks it after every submission and fails the
//     run, with every team's within-share requests at most its
//     reservation + bound; within-share requests are never held, so the
//     total in flight passes C by those sent while the pool is full, on
//     one proxy as on several: Pool.MaxInFlight, reported).
func ReplicaTargets(s *Scenario, mode string, one, many *Result, bound int) ([]Target, error) {
	c, err := poolCapacity(s, mode)
	if err != nil {
		return nil, err
	}
	var out []Target
	add := func(name string, v, lim float64, format, detail string) {
		out = append(out, Target{Scenario: s.Name, Mode: mode, Name: name, Value: v, Limit: lim, AtMost: true, Format: format, Detail: detail})
	}
	worst, team := -1.0, ""
	ts := s.Targets
	for _, t := range many.Teams {
		o := one.Team(t.Team)
		if o == nil {
			return nil, fmt.Errorf("replica targets: team %s missing on one proxy", t.Team)
		}
		if d := 100 * math.Abs(t.ServiceShare-o.ServiceShare); d > worst {
			worst, team = d, t.Team
		}
	}
	if b := ts.ReplicaShareDifference; b.in(mode) {
		lim, _ := b.limit()
		add("largest share difference vs one proxy (points)", worst, lim, "%.1f", "`"+team+"`")
	}
	if b := ts.ReplicaAloneP99; b.in(mode) {
		p1 := one.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
		pr := many.Team(s.Alone).Class[Interactive].TTFTp99.Seconds()
		if p1 > 0 {
			lim, _ := b.limit()
			add(fmt.Sprintf("`%s` interactive p99 TTFT / one proxy's", s.Alone), pr/p1, lim, "%.2f×", "")
		}
	}
	if s.CapacityFromEngines {
		// The fleet reads the engines (capacity_from with the cluster
		// block): the scenario's capacity_from targets hold on it too.
		elasticTargets(s, mode, many, func(name string, v float64, b *Bound, format string) {
			lim, atMost := b.limit()
			out = append(out, Target{Scenario: s.Name, Mode: mode, Name: name, Value: v, Limit: lim, AtMost: atMost, Format: format})
		}, func(d string) { out[len(out)-1].Detail = d })
		// The borrowers' bound is the largest C of the run: the gateway
		// checks each phase's (wasmgw, proxies.bound).
		for _, ch := range s.CapacityChanges {
			cfg, err := EngineConfig(s, EnginePriority, mode)
			if err != nil {
				return nil, err
			}
			c = max(c, s.capacityAt(ch.Replicas, ch.Capacity, cfg.MaxNumSeqs))
		}
	}
	if bound >= 0 {
		add(fmt.Sprintf("most borrowers in flight (C = %d, bound %d)", c, bound), float64(many.Pool.MaxBorrowing), float64(c+bound), "%.0f", "")
	}
	return out, nil
}

// poolCapacity returns the pool's C in scenario s at its start.
func poolCapacity(s *Scenario, mode string) (int, error) {
	cfg, err := EngineConfig(s, EnginePriority, mode)
	if err != nil {
		return 0, err
	}
	return s.capacityAt(s.Replicas(), s.Capacity, cfg.MaxNumSeqs), nil
}

// perTeam writes one figure of every team of x, "name value" joined by
// commas, the value by format.
func perTeam(x *Result, format string, v func(*TeamResult) float64) string {
	p := make([]string, 0, len(x.Teams))
	for i := range x.Teams {
		t := &x.Teams[i]
		p = append(p, t.Team+" "+fmt.Sprintf(format, v(t)))
	}
	return strings.Join(p, ", ")
}

// shares writes every team's service share of x (perTeam).
func shares(x *Result) string {
	return perTeam(x, "%.3f", func(t *TeamResult) float64 { return t.ServiceShare })
}

// within writes every team's mean within-share requests in flight of x
// (perTeam).
func within(x *Result) string {
	return perTeam(x, "%.2f", func(t *TeamResult) float64 { return t.WithinInFlight })
}

// WriteReplicas writes, for every report that ran the column many
// against the column one, a table per mode of every team's share of the
// service on each, the protected team's interactive p99 TTFT, the most
// requests and borrowers in flight, and the replicas targets
// (ReplicaTargets with bound, then the users targets of many,
// UsersTargets, against its own flat column).
func WriteReplicas(w io.Writer, reps []*Report, one, many string, bound int) error {
	var b strings.Builder
	b.WriteString("| scenario | engine | team shares, one proxy | team shares, " + many + " | `alone` interactive p99 TTFT, one / " + many + " (s) | most in flight, one / " + many + " | most borrowers in flight, one / " + many + " (C) | decisions: largest difference in a team's requests sent borrowing, " + many + " − one (points) | within-share requests in flight (mean), one / " + many + " |\n|---|---|---|---|---|---|---|---|---|\n")
	var targets []Target
	for _, rep := range reps {
		for _, m := range rep.Modes {
			o, r := rep.Column(m, one), rep.Column(m, many)
			if o == nil || r == nil {
				continue
			}
			p99 := "—"
			if a := rep.Scenario.Alone; a != "" {
				p99 = secs(o.Team(a).Class[Interactive].TTFTp99) + " / " + secs(r.Team(a).Class[Interactive].TTFTp99)
			}
			ts, err := ReplicaTargets(rep.Scenario, m, o, r, bound)
			if err != nil {
				return err
			}
			ts = append(ts, UsersTargets(rep, m, many)...)
			c, err := poolCapacity(rep.Scenario, m)
			if err != nil {
				return err
			}
			d, team := DecisionDifference(o, r)
			fmt.Fprintf(&b, "| [%s](results/%s.md) | %s | %s | %s | %s | %d / %d | %d / %d (%d) | %+.1f `%s` | %s / %s |\n", rep.Scenario.Name, rep.Scenario.Name, m,
				shares(o), shares(r), p99, o.Pool.MaxInFlight, r.Pool.MaxInFlight, o.Pool.MaxBorrowing, r.Pool.MaxBorrowing, c, d, team, within(o), within(r))
			targets = append(targets, ts...)
		}
	}
	for _, rep := range reps {
		for _, m := range rep.Modes {
			if r := rep.Column(m, many); r != nil {
				for _, n := range r.Notes {
					fmt.Fprintf(&b, "\n%s/%s, %s: %s\n", rep.Scenario.Name, m, many, n)
				}
			}
		}
	}
	b.WriteString("\n| scenario | engine | target | bound | " + many + " |\n|---|---|---|---|---|\n")
	for _, t := range targets {
		mark := " ✓"
		if !t.OK() {
			mark = " ✗"
		}
		d := ""
		if t.Detail != "" {
			d = " " + t.Detail
		}
		fmt.Fprintf(&b, "| %s | %s | %s | <= "+t.Format+" | "+t.Format+"%s%s |\n", t.Scenario, t.Mode, t.Name, t.Limit, t.Value, d, mark)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// DecisionDifference returns the decisions' error of the run many
// against one: for every team, the part of its requests of the window
// sent borrowing (in points) on many minus on one, the largest in
// magnitude, with its team. A team within its reservation that borrows
// at some proxy shows here.
func DecisionDifference(one, many *Result) (float64, string) {
	frac := func(t *TeamResult) float64 {
		n := t.Class[Interactive].Requests + t.Class[Batch].Requests
		if n == 0 {
			return 0
		}
		return 100 * float64(t.Borrowing) / float64(n)
	}
	worst, team := 0.0, ""
	for i := range many.Teams {
		t := &many.Teams[i]
		o := one.Team(t.Team)
		if o == nil {
			continue
		}
		if d := frac(t) - frac(o); team == "" || math.Abs(d) > math.Abs(worst) {
			worst, team = d, t.Team
		}
	}
	return worst, team
}
