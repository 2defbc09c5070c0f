package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// frame is one refresh of the live view: everything the renderer needs, so
// rendering is a pure function of it.
type frame struct {
	Elapsed   time.Duration
	Duration  time.Duration // 0: no planned end (proxy only)
	Phase     string        // "load", "draining", ...
	Pools     []statusPool  // the plugin's snapshot; nil if unknown
	StatusErr string        // why Pools is nil
	Teams     []teamView
	Upstream  string // a line about the upstream (simulator counters), or ""
	// Replicas is every proxy's status with -replicas (Pools is then the
	// pool as a whole, merged); nil with one proxy.
	Replicas []replicaStatus
	// Flow is the configuration's flow control, named in the header.
	Flow flowControl
	// Jain is each pool's last reading of the plugin's Jain gauges
	// (latency.go); a pool without one is absent.
	Jain map[string]jainReading
}

// flowControl is what the configuration says of flow control (the
// plugin's max_queue_time and queue_limit): whether borrowers that find
// the pool full are held at the gateway.
type flowControl struct {
	On           bool
	MaxQueueTime time.Duration
	// Shadow is mode "shadow": the plugin holds nothing whatever
	// max_queue_time says (On is then false).
	Shadow bool
}

// header names flow control in the view's first line and the summary's.
func (fc flowControl) header() string {
	switch {
	case fc.Shadow:
		return "mode shadow: nothing held, every request forwarded as sent (the x-fairshare-* headers say what enforce would do)"
	case fc.On:
		return fmt.Sprintf("flow control on (max_queue_time %s)", fc.MaxQueueTime)
	case fc.MaxQueueTime > 0:
		return "flow control OFF (queue_limit 0: nothing is held)"
	default:
		return "flow control OFF (max_queue_time 0s: nothing is held)"
	}
}

// legend explains the live view's columns and figures, in lines of at most
// 150 characters (what docs/make-run.txt was captured at).
func legend(fc flowControl) []string {
	over := []string{
		"in flight above capacity: a team's requests within its reservation are never held, even while borrowers fill the pool;",
		"  they wait in vLLM's queue (first, by priority) until running borrowers end: vLLM preempts no running request for a waiting one",
	}
	switch {
	case fc.Shadow:
		over = []string{
			"in flight above capacity: in shadow mode every request goes to vLLM at once and as sent, without a priority: vLLM runs",
			"  capacity of them and queues the rest in arrival order, within-share and borrowers alike (nothing the plugin decides is enforced)",
		}
	case !fc.On:
		over = []string{
			"in flight above capacity: without flow control every request goes to vLLM at once; it runs capacity of them and queues",
			"  the rest, lowest priority first, so borrowers wait there behind within-share requests",
		}
	}
	first := []string{
		"RSV reserved slots (share × capacity) · FLIGHT = WITHIN (in its reservation) + BORROW (beyond it), the plugin's count · WAIT held at the gateway",
		"PRIORITY the vLLM priorities given in the last 10s, lower runs first: 0 interactive or 1 batch within share; 10 + 10 × RANK + class when borrowing",
	}
	if fc.Shadow {
		first = []string{
			"RSV reserved slots (share × capacity) · FLIGHT = WITHIN + BORROW as enforce mode would count them · HOLD requests enforce would have held",
			"WOULD PRIO the priorities enforce mode would have written (none is: vLLM sees the client's body): 0 or 1 within share; 10 + 10 × RANK + class",
		}
	}
	return append(append(first,
		"  (\"1, 31\": batch within share, and batch borrowing at rank 2) · USAGE decayed usage in cost units · RANK by LF, 0 borrows first",
		"LF level fairshare: its share over its part of the usage (inf: no usage yet); the higher, the sooner it borrows",
		"Jain: the fairness_jain gauge, over the decayed usage / share of the teams held or borrowing (1: usage in proportion to shares)",
	), over...)
}

// Live view windows: tokens/s over rateWindow (the rate meter's 20 × 250 ms),
// priorities and TTFT percentiles over viewWindow.
const (
	rateWindow = 5 * time.Second
	viewWindow = 10 * time.Second
)

// fmtDur formats a latency for a table cell: "38ms", "1.23s", "-" when absent.
func fmtDur(d time.Duration, ok bool) string {
	switch {
	case !ok:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}

// fmtNum formats a float compactly for the plugin's usage and LF columns:
// three significant digits (whole numbers from 100 to 1e6), "inf" for +Inf,
// "-" for NaN.
func fmtNum(x float64) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	case x != 0 && (math.Abs(x) >= 1e6 || math.Abs(x) < 1e-3):
		return fmt.Sprintf("%.2e", x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

// fmtShare formats a fraction as a percentage ("50%", "-" when unknown).
func fmtShare(x float64) string {
	if x <= 0 || math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

// standing returns a team's in-flight figures: the plugin's when the
// snapshot has the team, the client's otherwise.
func standing(t teamView) (inFlight, within, borrowing int) {
	if s := t.Status; s != nil {
		return s.InFlight + s.Phantoms, s.InFlight - s.Borrowing, s.Borrowing
	}
	return t.InFlight, t.Within, t.Borrowing
}

// group is one pool's part of a frame: the plugin's status of the pool
// (nil when unknown) and its teams' rows.
type group struct {
	name   string
	status *statusPool
	teams  []teamView
}

// groups splits a frame's teams by pool, in the order of f.Pools, then the
// pools the status does not list. A team without a pool belongs to the only
// pool of the status.
func groups(f frame) []group {
	var gs []group
	used := make([]bool, len(f.Teams))
	for i := range f.Pools {
		g := group{name: f.Pools[i].Name, status: &f.Pools[i]}
		for j, t := range f.Teams {
			if !used[j] && (t.Pool == g.name || t.Pool == "" && len(f.Pools) == 1) {
				g.teams, used[j] = append(g.teams, t), true
			}
		}
		gs = append(gs, g)
	}
	for j, t := range f.Teams {
		if used[j] {
			continue
		}
		k := slices.IndexFunc(gs, func(g group) bool { return g.status == nil && g.name == t.Pool })
		if k < 0 {
			gs, k = append(gs, group{name: t.Pool}), len(gs)
		}
		gs[k].teams = append(gs[k].teams, t)
	}
	return gs
}

// renderTable writes the live view's lines (no ANSI codes) to b: a line of
// progress, then per pool its line and its teams' rows.
func renderTable(b *strings.Builder, f frame) {
	progress := fmt.Sprintf("%.0fs", f.Elapsed.Seconds())
	if f.Duration > 0 {
		progress += fmt.Sprintf(" / %.0fs", f.Duration.Seconds())
	}
	fmt.Fprintf(b, "%s · %s · %s\n", progress, f.Phase, f.Flow.header())
	if len(f.Pools) == 0 {
		fmt.Fprintf(b, "plugin status: %s\n", orDash(f.StatusErr))
	}
	if f.Upstream != "" {
		b.WriteString(f.Upstream + "\n")
	}
	prioHead, waitHead := "PRIORITY", "WAIT"
	if f.Flow.Shadow {
		prioHead, waitHead = "WOULD PRIO", "HOLD"
	}
	fmt.Fprintf(b, "%-10s %5s %4s %6s %6s %6s  %-10s %7s %8s %8s %6s %4s │ %4s %8s %7s %4s\n",
		"TEAM", "SHARE", "RSV", "FLIGHT", "WITHIN", "BORROW", prioHead, "TOK/S", "TTFT p50", "p99", "DONE", "ERR",
		waitHead, "USAGE", "LF", "RANK")
	for _, g := range groups(f) {
		switch {
		case g.status != nil:
			n, borrow := g.status.inFlight()
			fmt.Fprintf(b, "pool %s: capacity %d%s · in flight %d (within share %d, borrowing %d)",
				g.name, g.status.Capacity, capacityNote(g.status), n, n-borrow, borrow)
			if over := n - g.status.Capacity; over > 0 && g.status.Capacity > 0 {
				fmt.Fprintf(b, " · %d above capacity: waiting in vLLM's queue", over)
			}
			b.WriteString(spillNote(g.status) + jainNote(f.Jain, g.name) + "\n")
			if w := workNote(g.status); w != "" {
				b.WriteString(w + "\n")
			}
		case g.name == "-":
			b.WriteString("not scheduled (no pool serves the model)\n")
		case g.name != "":
			fmt.Fprintf(b, "pool %s: no status\n", g.name)
		}
		for _, t := range g.teams {
			n, within, borrow := standing(t)
			share, rsv, wait, usage, lf, rank := fmtShare(t.Share), "-", "-", "-", "-", "-"
			if s := t.Status; s != nil {
				share = fmtShare(s.Share)
				rsv = fmt.Sprint(s.Reserved)
				wait = fmt.Sprint(s.Waiting)
				usage, lf, rank = fmtNum(s.Usage), fmtNum(s.LevelFairshare), fmt.Sprint(s.Rank)
			}
			if f.Flow.Shadow {
				wait = fmt.Sprint(t.WouldHold) // nothing waits: what enforce would have held, so far
			}
			fmt.Fprintf(b, "%-10s %5s %4s %6d %6d %6d  %-10s %7.0f %8s %8s %6d %4d │ %4s %8s %7s %4s\n",
				t.Name, share, rsv, n, within, borrow, t.Bands, t.TokPerSec,
				ttftCell(t.P50, t), ttftCell(t.P99, t), t.Done, t.Errors, wait, usage, lf, rank)
			if u := usersNote(t.Status); u != "" {
				b.WriteString("  " + u + "\n")
			}
		}
	}
	renderReplicas(b, "", f.Replicas)
	for _, l := range legend(f.Flow) {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(b, "tokens/s over the last %v; priorities and TTFT over the last %v. Ctrl-C stops.\n%s.\n",
		rateWindow, viewWindow, ttftLegend)
}

// workNote is the line under a pool with throughput: the pool's work
// capacity and, per team, its reserved rate and what is left in its work
// bucket (the team's requests run within share while it is above 0%);
// "" for a pool without a work resource.
func workNote(p *statusPool) string {
	if p.Throughput <= 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  work: throughput %d cost units/s (configured) · reserved/s, bucket left:", p.Throughput)
	for _, t := range p.Teams {
		if t.ReservedWork == 0 && t.WorkDebt == 0 {
			continue
		}
		left := 0.0
		if t.WorkBurst > 0 {
			left = max(0, 1-t.WorkDebt/t.WorkBurst)
		}
		fmt.Fprintf(&b, " %s %d %.0f%%", t.Team, t.ReservedWork, 100*left)
	}
	return b.String()
}

// viewUsers is how many of a team's users the view lists (the status's
// first, by standing).
const viewUsers = 4

// userNone is the user the plugin counts a request under when it names
// none (fairshare.UserNone).
const userNone = "_none"

// usersNote is the line under a team divided among its users (the
// plugin's user_header): its active users and over requests, then its
// first users by standing, each "within/portion" (its requests within
// share in flight over its part of the team's reserved slots), then its
// over requests (slots its teammates leave, priority 2 to 9), borrowers
// and held requests; "" for a team without users.
func usersNote(s *statusTeam) string {
	if s == nil || !slices.ContainsFunc(s.Users, func(u statusUser) bool { return u.User != userNone }) {
		return "" // not divided: no user, or only requests that named none
	}
	var b strings.Builder
	fmt.Fprintf(&b, "users: %d active, %d over (within/portion +over +borrowing, held):", s.ActiveUsers, s.Over)
	for i, u := range s.Users {
		if i == viewUsers {
			fmt.Fprintf(&b, " · %d more", len(s.Users)-viewUsers)
			break
		}
		sep := " "
		if i > 0 {
			sep = " · "
		}
		fmt.Fprintf(&b, "%s%s %d/%d", sep, u.User, u.Within, u.Portion)
		if u.Over > 0 {
			fmt.Fprintf(&b, " +%d over", u.Over)
		}
		if u.Borrowing > 0 {
			fmt.Fprintf(&b, " +%d borrowing", u.Borrowing)
		}
		if u.Waiting > 0 {
			fmt.Fprintf(&b, ", %d held", u.Waiting)
		}
		if !u.Active {
			b.WriteString(" (idle)")
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// liveView redraws the table in place on a terminal: it moves the cursor up
// over the previous frame and overwrites it line by line. Line wrapping is
// turned off while it runs so a narrow terminal truncates instead of
// breaking the cursor arithmetic. Not safe for concurrent use.
type liveView struct {
	w     io.Writer
	lines int // lines of the previous frame
}

// draw replaces the previous frame with f.
func (v *liveView) draw(f frame) {
	var b strings.Builder
	renderTable(&b, f)
	v.drawText(b.String())
}

func (v *liveView) drawText(text string) {
	var out strings.Builder
	if v.lines == 0 {
		out.WriteString("\x1b[?7l") // no autowrap
	} else {
		fmt.Fprintf(&out, "\x1b[%dA\r", v.lines)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for _, l := range lines {
		out.WriteString(l)
		out.WriteString("\x1b[K\n")
	}
	out.WriteString("\x1b[J")
	v.lines = len(lines)
	io.WriteString(v.w, out.String())
}

// close restores line wrapping; the last frame stays on the screen.
func (v *liveView) close() {
	if v.lines > 0 {
		io.WriteString(v.w, "\x1b[?7h")
	}
}

// renderLines writes the compact form of f used when stdout is not a
// terminal: per pool a line, then one line per team, prefixed with the
// elapsed time.
func renderLines(b *strings.Builder, f frame) {
	at := fmt.Sprintf("[%3.0fs]", f.Elapsed.Seconds())
	if len(f.Pools) == 0 && f.StatusErr != "" {
		fmt.Fprintf(b, "%s plugin status: %s\n", at, f.StatusErr)
	}
	width := 9
	for _, t := range f.Teams {
		width = max(width, utf8.RuneCountInString(t.label()))
	}
	for _, g := range groups(f) {
		if p := g.status; p != nil {
			n, borrow := p.inFlight()
			capNote := ""
			if c := capacityNote(p); c != "" {
				capNote = " · capacity" + c
			}
			fmt.Fprintf(b, "%s pool %s: %d/%d in flight, %d borrowing%s%s%s\n", at, p.Name, n, p.Capacity, borrow, capNote, spillNote(p), jainNote(f.Jain, p.Name))
			if w := workNote(p); w != "" {
				fmt.Fprintf(b, "%s %s\n", at, w)
			}
		}
		prio := "priority"
		if f.Flow.Shadow {
			prio = "would-be priority"
		}
		for _, t := range g.teams {
			n, within, borrow := standing(t)
			fmt.Fprintf(b, "%s %-*s in flight %3d (within %2d, borrowing %3d)  %s %-9s %6.0f tok/s  TTFT p50 %6s p99 %6s  done %d",
				at, width, t.label(), n, within, borrow, prio, t.Bands, t.TokPerSec, ttftCell(t.P50, t), ttftCell(t.P99, t), t.Done)
			if s := t.Status; s != nil && s.Waiting > 0 {
				fmt.Fprintf(b, ", %d held", s.Waiting)
			}
			if f.Flow.Shadow && t.WouldHold > 0 {
				fmt.Fprintf(b, ", %d enforce would have held", t.WouldHold)
			}
			if t.Errors > 0 {
				fmt.Fprintf(b, ", %d errors", t.Errors)
			}
			b.WriteString("\n")
			if u := usersNote(t.Status); u != "" {
				fmt.Fprintf(b, "%s   %s\n", at, u)
			}
		}
	}
	renderReplicas(b, at+" ", f.Replicas)
}

// summary is the end-of-run report.
type summary struct {
	Elapsed      time.Duration
	Upstream     string
	Config       string
	Teams        []teamView   // whole-run figures (window 0)
	Classes      []string     // the demo class of each team, same order
	Pools        []statusPool // the plugin's snapshot after the load, nil if unknown
	StatusErr    string
	Interrupted  bool
	Errors       []string // "team: last error" of the teams that had errors
	UpstreamLine string   // the simulator's counters, or ""
	PluginLogs   int      // warnings and errors the plugin logged
	TraceLine    string   // -trace: what was replayed, or ""
	// UserLines are each divided team's users' figures (userTallies), nil
	// without the plugin's user_header.
	UserLines []string
	Flow      flowControl
	// Baseline is the same demo load without the plugin (baseline.go), by
	// pool and team; nil when not computed (a real vLLM, a trace, -no-load).
	Baseline map[string]map[string]baselineTeam
	// LoadUnmet is what the load's end condition (a test's, loadEnd)
	// never saw happen before its guard stopped the load; "" otherwise.
	LoadUnmet string
	// Jain is each pool's readings of the plugin's Jain gauges over the
	// run (latency.go); nil when none was read.
	Jain map[string]jainSummary
}

// renderSummary writes the final summary table: per team the requests, how
// many borrowed, the priorities seen, tokens and their share of all tokens
// against the team's entitled share, TTFT percentiles, and TTFT p50 of the
// within-share and borrowing requests apart; then the plugin's final state.
func renderSummary(b *strings.Builder, s summary) {
	how := "after"
	if s.Interrupted {
		how = "interrupted after"
	}
	fmt.Fprintf(b, "\nsummary %s %.1fs (%s, %s, %s)\n", how, s.Elapsed.Seconds(), s.Upstream, s.Config, s.Flow.header())
	if s.TraceLine != "" {
		b.WriteString(s.TraceLine + "\n")
	}
	if s.LoadUnmet != "" {
		b.WriteString("end condition never held: " + s.LoadUnmet + "\n")
	}
	total := poolTokens(s.Teams)
	width := 10
	for _, t := range s.Teams {
		width = max(width, utf8.RuneCountInString(t.label()))
	}
	prioHead := "PRIORITY"
	if s.Flow.Shadow {
		prioHead = "WOULD PRIO"
	}
	fmt.Fprintf(b, "%-*s %-11s %5s %4s %6s %8s  %-10s %7s %6s %6s %8s %8s %8s %10s %10s\n",
		width, "TEAM", "CLASS", "REQS", "ERR", "WITHIN", "BORROWED", prioHead, "TOKENS", "TOK/S",
		"TOK%", "ENTITLED", "TTFT p50", "p99", "p50 within", "p50 borrow")
	for i, t := range s.Teams {
		class := "-"
		if i < len(s.Classes) {
			class = s.Classes[i]
		}
		share := t.Share
		if t.Status != nil && t.Status.Share > 0 {
			share = t.Status.Share
		}
		tokShare := "-"
		if total[t.Pool] > 0 {
			tokShare = fmt.Sprintf("%.0f%%", 100*float64(t.Tokens)/float64(total[t.Pool]))
		}
		fmt.Fprintf(b, "%-*s %-11s %5d %4d %6d %8d  %-10s %7d %6.0f %6s %8s %8s %8s %10s %10s\n",
			width, t.label(), class, t.Done, t.Errors, t.DoneWithin, t.DoneBorrow, t.Bands, t.Tokens, t.TokPerSec,
			tokShare, fmtShare(share), ttftCell(t.P50, t), ttftCell(t.P99, t),
			fmtDur(t.P50Within, t.HasP50Within), fmtDur(t.P50Borrow, t.HasP50Borrow))
	}
	fmt.Fprintf(b, "%s.\n", ttftLegend)
	b.WriteString("TOK%: the team's part of its pool's completion tokens. ENTITLED: its share, which it gets whenever it asks for it; a team below it\n" +
		"  that never borrowed asked for less, and what it left was lent to the others.\n" +
		"WITHIN, BORROWED: its requests that ran within its reservation, and beyond it. p50 within, p50 borrow: their TTFT p50 (the client's figures).\n")
	if s.Flow.Shadow {
		b.WriteString("shadow mode: WITHIN, BORROWED and WOULD PRIO are what enforce mode would have decided; nothing was written or held,\n" +
			"  so vLLM saw every request as the client sent it and served them in arrival order.\n")
	}
	for _, l := range s.UserLines {
		b.WriteString(l + "\n")
	}
	if len(s.UserLines) > 0 {
		b.WriteString("  (within: in the user's portion of its team's reservation; over: a reserved slot its teammates left, priority 2 to 9)\n")
	}
	renderLatency(b, s)
	renderBaseline(b, s)
	for _, t := range s.Teams {
		if t.Canceled > 0 {
			fmt.Fprintf(b, "%s: %d requests cancelled at the end\n", t.label(), t.Canceled)
		}
	}
	if len(s.Pools) == 0 {
		fmt.Fprintf(b, "plugin status at the end: %s\n", orDash(s.StatusErr))
	}
	for _, p := range s.Pools {
		n, borrow := p.inFlight()
		fmt.Fprintf(b, "plugin at the end: pool %s in flight %d (borrowing %d); usage / LF / rank:", p.Name, n, borrow)
		for i, t := range p.Teams {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(b, "%s %s %s / %s / %d", sep, t.Team, fmtNum(t.Usage), fmtNum(t.LevelFairshare), t.Rank)
		}
		b.WriteString("\n")
	}
	if s.UpstreamLine != "" {
		b.WriteString(s.UpstreamLine + "\n")
	}
	for _, e := range s.Errors {
		fmt.Fprintf(b, "last error of %s\n", e)
	}
	if s.PluginLogs > 0 {
		fmt.Fprintf(b, "the plugin logged %d warnings or errors (-v prints them)\n", s.PluginLogs)
	}
	for _, line := range verdict(s.Teams, s.Flow.Shadow) {
		b.WriteString(line + "\n")
	}
}

// jainNote is the pool line's Jain part: " · Jain 0.982 over 2 teams"
// ("" without a reading; "Jain -" when fewer than two teams wanted more
// than their share, as nobody is compared then).
func jainNote(readings map[string]jainReading, pool string) string {
	r, ok := readings[pool]
	switch {
	case !ok:
		return ""
	case r.Saturated < 2:
		return " · Jain - (fewer than two teams above their share)"
	}
	return fmt.Sprintf(" · Jain %.3f over %d teams", r.J, r.Saturated)
}

// renderLatency writes the plugin's latency histograms of every team over
// the run: TTFT, the time held at the gateway (held requests only) and end
// to end, then each pool's Jain index; nothing when the plugin's
// histograms had no sample (no status, nothing scheduled).
func renderLatency(b *strings.Builder, s summary) {
	some := false
	for _, t := range s.Teams {
		some = some || t.Total.N > 0 || t.Queue.N > 0
	}
	if some {
		width := 10
		for _, t := range s.Teams {
			width = max(width, utf8.RuneCountInString(t.label()))
		}
		b.WriteString("the plugin's histograms over the run (first_byte_ms, queue_time_ms, total_time_ms; from the arrival at the gateway):\n")
		for _, t := range s.Teams {
			held := "none held at the gateway"
			switch {
			case t.Queue.N > 0:
				held = fmt.Sprintf("%d held at the gateway, p50 %s, p99 %s", t.Queue.N, fmtDur(t.Queue.P50, true), fmtDur(t.Queue.P99, true))
			case s.Flow.Shadow:
				held = "none held (shadow mode holds nothing)"
			}
			total := "end to end -"
			if t.Total.N > 0 {
				total = fmt.Sprintf("end to end p50 %s, p99 %s", fmtDur(t.Total.P50, true), fmtDur(t.Total.P99, true))
			}
			fmt.Fprintf(b, "  %-*s TTFT p50 %s, p99 %s · %s · %s\n", width, t.label(), ttftCell(t.P50, t), ttftCell(t.P99, t), held, total)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(s.Jain)) {
		j := s.Jain[p]
		if j.Readings == 0 {
			fmt.Fprintf(b, "Jain's index (fairness_jain), pool %s: no reading had two teams above their share (%d readings): nobody to compare\n", p, j.All)
			continue
		}
		fmt.Fprintf(b, "Jain's index (fairness_jain), pool %s: p50 %.3f, lowest %.3f, over %d readings with two or more teams above their share (1: served by share)\n",
			p, j.P50, j.Min, j.Readings)
	}
}

// poolTokens returns the tokens of teams summed by pool: a team's TOK% is
// its part of its pool's tokens, to compare with its share of that pool.
func poolTokens(teams []teamView) map[string]int64 {
	total := map[string]int64{}
	for _, t := range teams {
		total[t.Pool] += t.Tokens
	}
	return total
}

// verdict states in words what the run showed: which team borrowed, how
// long its borrowers waited, and how the within-share teams fared. In
// shadow mode (shadow) it says what enforce mode would have done, and
// nothing of what a share got: nothing was enforced, so a borrower's
// tokens are what vLLM's arrival order gave it, not capacity the others
// left idle.
func verdict(teams []teamView, shadow bool) []string {
	var out []string
	total := poolTokens(teams)
	for _, t := range teams {
		if t.DoneBorrow == 0 {
			continue
		}
		share := t.Share
		if t.Status != nil && t.Status.Share > 0 {
			share = t.Status.Share
		}
		got := ""
		if total[t.Pool] > 0 && share > 0 {
			got = fmt.Sprintf("%.0f%% of the tokens for a %s share", 100*float64(t.Tokens)/float64(total[t.Pool]), fmtShare(share))
		}
		if shadow {
			line := fmt.Sprintf("%s would have borrowed for %d of its %d requests (would-be priority %s), and enforce mode would have held %d of them at the gateway; "+
				"nothing was enforced", t.label(), t.DoneBorrow, t.Done, t.Bands, t.WouldHold)
			if got != "" {
				line += ": it got " + got + ", what vLLM's arrival order gave it"
			}
			out = append(out, line+".")
			continue
		}
		line := fmt.Sprintf("%s borrowed for %d of its %d requests (priority %s)", t.label(), t.DoneBorrow, t.Done, t.Bands)
		if t.HasP50Borrow {
			line += fmt.Sprintf("; its borrowers waited TTFT p50 %s", fmtDur(t.P50Borrow, true))
		}
		if t.HasP50Within && t.HasP50Borrow && t.HeldWithin > 0 {
			if t.HeldBorrow > 0 {
				line += fmt.Sprintf(", its within-share requests %s: both include the time held at the gateway (p50 %s borrowing, %s within share), "+
					"since a slot of its reservation goes to its own oldest held request",
					fmtDur(t.P50Within, true), fmtDur(t.HeldBorrow, true), fmtDur(t.HeldWithin, true))
			} else {
				// Most borrowers went at once (room, or a fallback pool
				// took them): a p50 of 0 held says nothing to print.
				line += fmt.Sprintf(", its within-share requests %s: they include the time held at the gateway (p50 %s), "+
					"since a slot of its reservation goes to its own oldest held request, while most of its borrowers were not held",
					fmtDur(t.P50Within, true), fmtDur(t.HeldWithin, true))
			}
		}
		if got != "" && float64(t.Tokens)/float64(total[t.Pool]) > share {
			line += "; it got " + got + ": capacity the others left idle"
		}
		out = append(out, line+".")
	}
	for _, t := range teams {
		if t.DoneBorrow == 0 && t.DoneWithin > 0 {
			if shadow {
				out = append(out, fmt.Sprintf("%s would have stayed within its share: %d requests at would-be priority %s, TTFT p50 %s (nothing enforced).",
					t.label(), t.DoneWithin, t.Bands, fmtDur(t.P50Within, t.HasP50Within)))
				continue
			}
			out = append(out, fmt.Sprintf("%s stayed within its share: %d requests at priority %s, TTFT p50 %s.",
				t.label(), t.DoneWithin, t.Bands, fmtDur(t.P50Within, t.HasP50Within)))
		}
	}
	return out
}

// renderBaseline writes what the same demo load got without the plugin
// (summary.Baseline), team by team next to what it got with it.
func renderBaseline(b *strings.Builder, s summary) {
	if s.Baseline == nil {
		return
	}
	b.WriteString("without the plugin: the same demo load on the same simulated engine under vLLM's default fcfs, computed in virtual time:\n")
	with := "with the plugin"
	if s.Flow.Shadow {
		b.WriteString("  (in shadow mode the plugin changes nothing vLLM sees, so the two differ only by the run's timing)\n")
		with = "with the plugin in shadow mode"
	}
	total := poolTokens(s.Teams)
	width := 10
	for _, t := range s.Teams {
		width = max(width, utf8.RuneCountInString(t.label()))
	}
	for _, t := range s.Teams {
		base, ok := s.Baseline[t.Pool][t.Name]
		if !ok {
			continue
		}
		var sum int64
		for _, x := range s.Baseline[t.Pool] {
			sum += x.Tokens
		}
		pct := func(n, of int64) string {
			if of <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
		}
		fmt.Fprintf(b, "  %-*s TTFT p50 %s, p99 %s (%s %s, %s) · %s of the tokens (with %s) · %d requests (with %d)\n",
			width, t.label(), fmtDur(base.P50, base.HasTTFT), fmtDur(base.P99, base.HasTTFT), with, ttftCell(t.P50, t), ttftCell(t.P99, t),
			pct(base.Tokens, sum), pct(t.Tokens, total[t.Pool]), base.Done, t.Done)
	}
}
