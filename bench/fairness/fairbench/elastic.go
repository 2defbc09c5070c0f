package fairbench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Capacity from the engines (S9, a scenario's capacity_from_engines): the
// plugin is never told the pool's C. It reads the engines' /metrics
// (capacity_from, engines "learned") through its host's http_call path:
// the wasmgw gateway serves each active replica's /metrics on its own
// loopback address, names that address as the upstream.address of the
// requests the replica serves, and routes the plugin's reads by the
// x-envoy-original-dst-host header as Envoy's ORIGINAL_DST cluster does.
// A removed replica's server is closed (the engine is gone): its reads
// fail. The other gateways are told every change, as in S6.

// EngineView is what a gateway that reads the engines sees of them; the
// runner implements it.
type EngineView interface {
	// EngineReplicas returns the number of engine replicas started so far.
	EngineReplicas() int
	// EngineUp reports whether replica i is in the pool (receiving
	// requests): a removed replica is gone, its /metrics unreadable.
	EngineUp(i int) bool
	// WriteEngineMetrics writes replica i's /metrics (vLLM's exposition).
	// It may be called from another goroutine while the simulation's
	// goroutine waits in the gateway.
	WriteEngineMetrics(w io.Writer, i int)
}

// CapacityReporter is a gateway that says which C it decides against
// and what it counted, for the capacity_from targets.
type CapacityReporter interface {
	// DecidedCapacity returns the C the gateway decides against now.
	DecidedCapacity() int
	// Ledger returns, once the run is over, the requests the gateway
	// still counts in flight or holds and the tokens it charged (prompt and
	// completion, as the responses reported them).
	Ledger() (inFlight int, prompt, completion int64)
}

// UserCounter is a CapacityReporter that can divide its teams among
// their users (the plugin's user_header): it also says what its user
// entries still count once the run is over.
type UserCounter interface {
	// UserLedger returns the requests the gateway's user entries count
	// in flight (within share, over, borrowing) or waiting, summed over
	// every team's users, and whether the gateway divides its teams
	// among users at all (false: the count means nothing).
	UserLedger() (inFlight int, on bool)
}

// CapacitySample is the C a gateway decided against at a time, and the
// C of the engines then.
type CapacitySample struct {
	At         time.Duration
	Decided    int
	FromEngine int
}

// Ledger is what a CapacityReporter counted against what the run served.
type Ledger struct {
	// InFlight are the requests the gateway counts in flight or held at
	// the end; Open the run's requests not finished then (0 after a full
	// drain).
	InFlight, Open int
	// Charged are the tokens it charged; Reported the tokens of the
	// finished requests' responses (prompt and completion).
	ChargedPrompt, ChargedCompletion   int64
	ReportedPrompt, ReportedCompletion int64
	// Users reports whether the gateway divides its teams among users
	// (a UserCounter with the user level on); UsersInFlight are then the
	// requests its user entries count in flight or waiting at the end
	// (every request counts at one user, UserNone for one naming none).
	Users         bool
	UsersInFlight int
}

// Lost is the requests counted in flight beyond those still open (by
// the teams, and by the users when the gateway has them), plus the
// tokens charged and not reported, or reported and not charged: 0 when
// nothing is lost.
func (l *Ledger) Lost() int64 {
	abs := func(x int64) int64 { return max(x, -x) }
	n := abs(int64(l.InFlight-l.Open)) + abs(l.ChargedPrompt-l.ReportedPrompt) + abs(l.ChargedCompletion-l.ReportedCompletion)
	if l.Users {
		n += abs(int64(l.UsersInFlight - l.Open))
	}
	return n
}

// EngineReplicas implements EngineView.
func (r *runner) EngineReplicas() int { return len(r.reps) }

// EngineUp implements EngineView.
func (r *runner) EngineUp(i int) bool { return i < len(r.reps) && r.reps[i].active }

// WriteEngineMetrics implements EngineView.
func (r *runner) WriteEngineMetrics(w io.Writer, i int) {
	p := r.reps[i]
	p.sim.WriteMetrics(w, "bench", p.idx)
}

// engineCapacity is the pool's C by its active engines.
func (r *runner) engineCapacity() int {
	n := 0
	for _, p := range r.reps {
		if p.active {
			n++
		}
	}
	return n * r.cfg.MaxNumSeqs
}

// sampleCapacity records the gateway's C (a CapacityReporter's) and the
// engines'.
func (r *runner) sampleCapacity(res *[]CapacitySample) {
	if cr, ok := r.gw.(CapacityReporter); ok && r.s.CapacityFromEngines {
		*res = append(*res, CapacitySample{At: r.now, Decided: cr.DecidedCapacity(), FromEngine: r.engineCapacity()})
	}
}

// ledger fills the run's ledger from a CapacityReporter, in a scenario
// with capacity_from_engines or with users within teams (their targets
// read it).
func (r *runner) ledger() *Ledger {
	cr, ok := r.gw.(CapacityReporter)
	if !ok || !(r.s.CapacityFromEngines || r.s.HasUsers()) {
		return nil
	}
	l := &Ledger{Open: r.open}
	l.InFlight, l.ChargedPrompt, l.ChargedCompletion = cr.Ledger()
	if uc, ok := r.gw.(UserCounter); ok {
		l.UsersInFlight, l.Users = uc.UserLedger()
	}
	for _, q := range r.reqs {
		if q.Finished > 0 {
			l.ReportedPrompt += int64(q.Prompt)
			l.ReportedCompletion += int64(q.Output)
		}
	}
	return l
}

// CapacityLag is, for every change of the engines' C in the run, how
// long the gateway took to decide against it (the first sample at or
// after the change where it does); a change it never followed counts
// until the end of the samples. It returns the largest lag and the
// number of changes.
func (res *Result) CapacityLag() (time.Duration, int) {
	var worst time.Duration
	n := 0
	s := res.Capacity
	for i := 1; i < len(s); i++ {
		if s[i].FromEngine == s[i-1].FromEngine {
			continue
		}
		n++
		want, at := s[i].FromEngine, s[i].At
		lag := s[len(s)-1].At - at
		for j := i; j < len(s) && s[j].FromEngine == want; j++ {
			if s[j].Decided == want {
				lag = s[j].At - at
				break
			}
		}
		worst = max(worst, lag)
	}
	return worst, n
}

// PhaseShareError is the largest share error, in points, of the phases
// between the scenario's capacity changes (the measured window cut at
// each change): each saturated team's share of the service in the phase
// against its entitled share. It also returns each phase's error.
func (res *Result) PhaseShareError(s *Scenario) (float64, []float64) {
	cuts := []time.Duration{res.From}
	for _, c := range s.CapacityChanges {
		if t := Sec(c.At); t > res.From && t < res.To {
			cuts = append(cuts, t)
		}
	}
	cuts = append(cuts, res.To)
	worst := 0.0
	var phases []float64
	for k := 1; k < len(cuts); k++ {
		var tot, ent float64
		svc := make([]float64, len(res.Teams))
		for i, t := range res.Teams {
			if !t.Saturated || i >= len(res.Series) {
				continue
			}
			for b, v := range res.Series[i] {
				at := time.Duration(b) * res.Bucket
				if at >= cuts[k-1] && at+res.Bucket <= cuts[k] {
					svc[i] += v
				}
			}
			tot += svc[i]
			ent += t.Entitled
		}
		if tot == 0 || ent == 0 {
			continue
		}
		e := 0.0
		for i, t := range res.Teams {
			if t.Saturated {
				e = max(e, 100*abs(svc[i]/tot-t.Entitled/ent))
			}
		}
		phases = append(phases, e)
		worst = max(worst, e)
	}
	return worst, phases
}

func abs(x float64) float64 { return max(x, -x) }

// elasticTargets are the capacity_from targets of a plugin column.
func elasticTargets(s *Scenario, m string, col *Result, add func(name string, v float64, b *Bound, format string), detail func(string)) {
	ts := s.Targets
	if b := ts.PhaseShareError; b.in(m) {
		worst, phases := col.PhaseShareError(s)
		add("max share error in any phase (points)", worst, b, "%.1f")
		var d []string
		for _, e := range phases {
			d = append(d, fmt.Sprintf("%.1f", e))
		}
		detail("phases: " + strings.Join(d, " / "))
	}
	if col.Ledger == nil {
		return // a column that is told C (not a CapacityReporter): nothing to follow
	}
	if b := ts.CapacityFollow; b.in(m) {
		lag, n := col.CapacityLag()
		add(fmt.Sprintf("C follows the engines: worst lag over the %d changes (s)", n), lag.Seconds(), b, "%.1f")
	}
	if b := ts.NothingLost; b.in(m) {
		add("lost: requests left counted + tokens charged ≠ reported", float64(col.Ledger.Lost()), b, "%.0f")
	}
}

// writeElastic writes, for a capacity_from_engines scenario, the table of
// the capacity each column decided against: the share error of every
// phase between capacity changes (every column), and for the columns that
// read the engines (CapacityReporter) the worst lag behind them, the C at
// the end of each phase, and the ledger.
func writeElastic(b *strings.Builder, s *Scenario, rs []*Result) {
	if !s.CapacityFromEngines {
		return
	}
	b.WriteString("### Capacity from the engines\n\n")
	b.WriteString("The plugin columns are never told C: they read the engines (capacity_from). Phases are cut at each capacity change.\n\n")
	header(b, []string{"measure"}, rs)
	row := func(name string, f func(*Result) string) {
		fmt.Fprintf(b, "| %s |", name)
		for _, r := range rs {
			fmt.Fprintf(b, " %s |", f(r))
		}
		b.WriteString("\n")
	}
	_, phases := rs[0].PhaseShareError(s)
	for k := range phases {
		row(fmt.Sprintf("share error, phase %d (points)", k+1), func(r *Result) string {
			if _, ph := r.PhaseShareError(s); k < len(ph) {
				return fmt.Sprintf("%.1f", ph[k])
			}
			return "—"
		})
	}
	reads := func(f func(*Result) string) func(*Result) string {
		return func(r *Result) string {
			if r.Ledger == nil {
				return "—"
			}
			return f(r)
		}
	}
	row("worst lag of C behind the engines (s)", reads(func(r *Result) string {
		lag, _ := r.CapacityLag()
		return fmt.Sprintf("%.1f", lag.Seconds())
	}))
	row("C decided / engines' C at each change + 10 s", reads(func(r *Result) string {
		var out []string
		for _, c := range s.CapacityChanges {
			at := Sec(c.At) + 10*time.Second
			for _, smp := range r.Capacity {
				if smp.At >= at {
					out = append(out, fmt.Sprintf("%d/%d", smp.Decided, smp.FromEngine))
					break
				}
			}
		}
		return strings.Join(out, ", ")
	}))
	row("requests left counted at the end", reads(func(r *Result) string { return fmt.Sprintf("%d", r.Ledger.InFlight-r.Ledger.Open) }))
	row("tokens charged − reported (prompt, completion)", reads(func(r *Result) string {
		return fmt.Sprintf("%d, %d", r.Ledger.ChargedPrompt-r.Ledger.ReportedPrompt, r.Ledger.ChargedCompletion-r.Ledger.ReportedCompletion)
	}))
	b.WriteString("\n")
}
