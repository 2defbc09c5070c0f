package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/trace"
)

// -trace: the load comes from a trace window (package internal/trace)
// instead of the demo's closed-loop clients. Each row is one streaming
// chat request at its arrival time (times the simulator's -time-scale, so
// the engine sees the trace's rate), of the row's prompt length and with
// max_tokens the row's output length; rows are split among teams by
// -trace-teams. With the simulator, rows with prefix block ids (Mooncake
// hash_ids, jsonl blocks) carry them as mock_hash_ids and the engine has
// prefix caching on, its usage reporting cached tokens.

// traceOptions are the -trace flags.
type traceOptions struct {
	file      string
	format    string
	start     float64
	duration  float64
	timeScale float64
	rateScale float64
	every     int
	offset    int
	teams     string
	requests  int
}

// spec returns the trace.Spec the flags describe.
func (o traceOptions) spec() trace.Spec {
	return trace.Spec{File: o.file, Format: trace.Format(o.format), Start: o.start, Duration: o.duration,
		TimeScale: o.timeScale, RateScale: o.rateScale, Every: o.every, Offset: o.offset}
}

// traceTeam is one entry of -trace-teams: a team, its weight among the
// trace's rows, and the class of its requests when the row names none.
type traceTeam struct {
	Name   string
	Weight float64
	Class  string
}

// parseTraceTeams parses "search=0.5,chat=0.3,research=0.2:batch": team
// names with positive weights (any scale; normalised), each optionally
// with ":interactive" (the default) or ":batch".
func parseTraceTeams(s string) ([]traceTeam, error) {
	var out []traceTeam
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, rest, ok := strings.Cut(part, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t:") {
			return nil, fmt.Errorf("-trace-teams: entry %d %q: want team=weight[:class]", i+1, part)
		}
		w, class, _ := strings.Cut(rest, ":")
		weight, err := strconv.ParseFloat(w, 64)
		if err != nil || !(weight > 0) || math.IsInf(weight, 0) {
			return nil, fmt.Errorf("-trace-teams: entry %d %q: weight %q must be a positive number", i+1, part, w)
		}
		switch class {
		case "":
			class = "interactive"
		case "interactive", "batch":
		default:
			return nil, fmt.Errorf("-trace-teams: entry %d %q: class %q must be interactive or batch", i+1, part, class)
		}
		if slices.ContainsFunc(out, func(t traceTeam) bool { return t.Name == name }) {
			return nil, fmt.Errorf("-trace-teams: entry %d: team %q named twice", i+1, name)
		}
		out = append(out, traceTeam{Name: name, Weight: weight, Class: class})
	}
	return out, nil
}

// traceTeamsOf returns the default team mapping: the pool's teams
// weighted by their shares, interactive.
func traceTeamsOf(p configPool) []traceTeam {
	var out []traceTeam
	for _, t := range p.Teams {
		if t.Share > 0 {
			out = append(out, traceTeam{Name: t.Name, Weight: t.Share, Class: "interactive"})
		}
	}
	return out
}

// traceRequest is one request of the replay.
type traceRequest struct {
	At          time.Duration // from the start of the load, wall clock
	Team        int           // index in traceLoad.Teams
	Class       string
	Prompt, Max int
	Blocks      []uint64
	Cut         bool // the prompt was cut to fit the simulator's max_model_len
	Source      trace.Request
}

// traceLoad is the replay of one trace window.
type traceLoad struct {
	Spec     trace.Spec
	Name     string
	Window   int // rows in the time window, before every/offset and rate_scale
	Teams    []traceTeam
	Requests []traceRequest
	Caching  bool // some row has prefix block ids and the upstream is simulated

	mu   sync.Mutex
	sent []trace.Request // the requests sent, for the summary
	cut  int
}

// assign returns the team of a row: a fixed hash (splitmix64) of its
// source line and copy number, placed on the teams' cumulative weights.
// The split depends on the row only, so each team's stream is an
// independent thinning of the trace (the per-minute shape kept).
func assign(q trace.Request, teams []traceTeam) int {
	z := uint64(q.Line)<<20 ^ uint64(q.Copy) ^ 0x7a1ce5eed
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	u := float64(z>>11) / (1 << 53)
	total := 0.0
	for _, t := range teams {
		total += t.Weight
	}
	acc := 0.0
	for i, t := range teams {
		acc += t.Weight / total
		if u < acc {
			return i
		}
	}
	return len(teams) - 1
}

// loadTraceFile reads the window and plans its requests: timeScale is the
// simulator's -time-scale (wall seconds per simulated second), maxLen the
// simulator's max_model_len (0: a real upstream, nothing cut).
func loadTraceFile(o traceOptions, teams []traceTeam, timeScale float64, maxLen int, simulated bool) (*traceLoad, error) {
	if len(teams) == 0 {
		return nil, fmt.Errorf("-trace: no team to send the rows (set -trace-teams)")
	}
	t, err := trace.Load(o.spec(), "")
	if err != nil {
		return nil, fmt.Errorf("-trace: %w", err)
	}
	tl := &traceLoad{Spec: o.spec(), Name: t.Name, Window: t.Window, Teams: teams}
	for _, q := range t.Requests {
		if o.requests > 0 && len(tl.Requests) >= o.requests {
			break
		}
		ti := assign(q, teams)
		r := traceRequest{At: time.Duration(float64(q.Arrival) * timeScale), Team: ti, Class: teams[ti].Class,
			Prompt: max(q.Prompt, 1), Max: max(q.Output, 1), Source: q}
		switch q.Class {
		case trace.Interactive:
			r.Class = "interactive"
		case trace.Batch:
			r.Class = "batch"
		}
		if maxLen > 0 {
			// vLLM refuses prompt + max_tokens > max_model_len (with a
			// margin for the chat template).
			r.Max = min(r.Max, maxLen/2)
			if lim := maxLen - r.Max - 64; r.Prompt > lim {
				r.Prompt, r.Cut = lim, true
			}
		}
		if simulated && len(q.Blocks) > 0 {
			r.Blocks = q.Blocks
			tl.Caching = true
		}
		tl.Requests = append(tl.Requests, r)
	}
	return tl, nil
}

// describe is the banner's line for the replay.
func (tl *traceLoad) describe() string {
	var ts []string
	for _, t := range tl.Teams {
		ts = append(ts, fmt.Sprintf("%s %g (%s)", t.Name, t.Weight, t.Class))
	}
	return fmt.Sprintf("trace %s (%s), %s: %d requests planned, split among %s", tl.Name, tl.Spec.Format, describeWindow(tl.Spec), len(tl.Requests), strings.Join(ts, ", "))
}

// describeWindow says which window of the trace a spec takes.
func describeWindow(s trace.Spec) string {
	return "window " + s.Span("s") + " of the trace" + s.Shaping()
}

// summaryLine says honestly what was replayed: the window, the rows sent
// of the rows in it, and the statistics of the requests sent
// (trace.Summarize over the span they covered, in trace seconds).
func (tl *traceLoad) summaryLine() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var span time.Duration
	for _, q := range tl.sent {
		span = max(span, q.Arrival)
	}
	st := trace.Summarize(tl.sent, span)
	line := fmt.Sprintf("trace replayed: %s (%s), %s; %d of the window's %d rows sent (%d planned); rate %.2f/s over %.1fs (trace time after time_scale), inter-arrival CV %.2f; prompt mean %.0f, output mean %.0f tokens",
		tl.Name, tl.Spec.Format, describeWindow(tl.Spec), len(tl.sent), tl.Window, len(tl.Requests), st.Rate, st.Span.Seconds(), st.CV, st.Prompt.Mean, st.Output.Mean)
	if tl.cut > 0 {
		line += fmt.Sprintf("; %d prompts cut to fit the simulator's max_model_len", tl.cut)
	}
	if tl.Caching {
		line += "; prefix block ids sent as mock_hash_ids (simulator prefix caching on)"
	}
	return line
}

// runTrace sends the replay's requests at their times until stop is done,
// each on its own goroutine; reqCtx bounds the requests in flight.
func (g *loadGen) runTrace(stop, reqCtx context.Context, tl *traceLoad) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		start := time.Now()
		for i := range tl.Requests {
			q := &tl.Requests[i]
			if !sleepCtx(stop, time.Until(start.Add(q.At))) {
				return
			}
			tl.mu.Lock()
			tl.sent = append(tl.sent, q.Source)
			if q.Cut {
				tl.cut++
			}
			tl.mu.Unlock()
			t := tl.Teams[q.Team]
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				id := g.nextID()
				g.send(reqCtx, id, t.Name, q.Class, traceBody(g.shape.Model, t.Name, q, id), g.stats[t.Name])
			}()
		}
	}()
}

// traceBody is the chat request of a trace row.
func traceBody(model, team string, q *traceRequest, id int64) []byte {
	m := map[string]any{
		"model":          model,
		"messages":       []map[string]string{{"role": "user", "content": prompt(team, q.Prompt, id)}},
		"max_tokens":     q.Max,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	}
	if len(q.Blocks) > 0 {
		m["mock_hash_ids"] = q.Blocks
	}
	b, _ := json.Marshal(m)
	return b
}
