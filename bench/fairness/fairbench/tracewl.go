package fairbench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/trace"
)

// Trace workloads (kind "trace") replay a window of a public
// trace instead of drawing from distributions:
//
//   - arrivals are the window's (trace.Request.Arrival, after time_scale
//     and rate_scale), shifted by the workload's start_s and cut at its
//     stop_s or the end of the run;
//   - the prompt length is the row's, the output length the row's cut at
//     the workload's max_tokens (a row of 0 output tokens generates one:
//     vLLM always samples a first token);
//   - the prefix block ids (Mooncake hash_ids, jsonl blocks) go to the
//     engine as vllmsim.Request.HashIDs, so prefix caching, when the
//     scenario's engine has it, sees which prompts share what;
//   - with system_prompt_tokens, every request starts with the same
//     system prompt of that many tokens: its blocks (ids of the workload's
//     own, in a space no trace uses) come before the row's, and its
//     tokens are added to the row's prompt;
//   - the team is the workload's, never the trace's (no public trace
//     names tenants; a jsonl row's team is ignored): a scenario splits one
//     trace among teams with every/offset, or replays it twice;
//   - the class is the jsonl row's if it names one, else interactive with
//     probability interactive, drawn from the workload's own stream of the
//     scenario seed (so the same seed gives the same classes under every
//     policy).
//
// The window is read once, when the scenario is loaded; the same scenario
// file gives the same requests.

// loadTraces reads the trace window of every trace workload, resolving
// the files against the scenario's directory. Errors carry the workload's
// field path and the trace's file:line.
func (s *Scenario) loadTraces() error {
	for i := range s.Workloads {
		w := &s.Workloads[i]
		if w.Kind != KindTrace {
			continue
		}
		t, err := trace.Load(*w.Trace, s.dir)
		if err != nil {
			return fmt.Errorf("workloads[%d].trace: %w", i, err)
		}
		w.requests = t.Requests
		w.traceName = t.Name
		w.traceStats = t.Stats()
	}
	return nil
}

// TraceWindow describes the window a trace workload replays, for the
// reports: the file, the spec and the statistics of the stream replayed
// (before the run's end cuts it).
type TraceWindow struct {
	// Workload is the index of the workload in the scenario.
	Workload int
	// Team is the workload's team.
	Team string
	// Name is the trace file's name.
	Name string
	// Spec is the workload's trace spec.
	Spec trace.Spec
	// Stats summarises the requests replayed.
	Stats trace.Stats
}

// TraceWindows returns the windows of the scenario's trace workloads, in
// workload order (none for a scenario without trace workloads).
func (s *Scenario) TraceWindows() []TraceWindow {
	var out []TraceWindow
	for i, w := range s.Workloads {
		if w.Kind == KindTrace && w.Trace != nil {
			out = append(out, TraceWindow{Workload: i, Team: w.Team, Name: w.traceName, Spec: *w.Trace, Stats: w.traceStats})
		}
	}
	return out
}

// traceRequest returns the request of trace row q for workload w: its
// lengths and block ids from the row, its class from the row or drawn
// from r.
func traceRequest(w *WorkloadSpec, q *trace.Request, r *rand.Rand) *Request {
	class := Batch
	u := r.Float64() // drawn for every row, so a named class shifts nothing
	switch q.Class {
	case trace.Interactive:
		class = Interactive
	case trace.Batch:
	default:
		if u < w.Interactive {
			class = Interactive
		}
	}
	out := &Request{Team: w.Team, User: w.User, Class: class, Prompt: max(q.Prompt, 1), Output: max(q.Output, 1), MaxTokens: w.MaxTokens}
	if out.MaxTokens > 0 && out.Output > out.MaxTokens {
		out.Output = out.MaxTokens
	}
	if n := w.SystemPrompt / trace.BlockTokens; n > 0 {
		out.Prompt += w.SystemPrompt
		ids := make([]uint64, 0, n+len(q.Blocks))
		for j := range n {
			ids = append(ids, systemBlock(w.Team, j))
		}
		out.HashIDs = append(ids, q.Blocks...)
	} else if len(q.Blocks) > 0 {
		out.HashIDs = q.Blocks
	}
	return out
}

// systemBlock returns the id of block j of team's system prompt: the top
// bit set, a hash of the team, then j (the shipped traces' ids are small
// integers; an id of a rate_scale copy, a 64-bit hash, matches one of
// these only by a hash collision).
func systemBlock(team string, j int) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(team); i++ {
		h = (h ^ uint64(team[i])) * 1099511628211
	}
	return 1<<63 | (h<<16)>>1 | uint64(j)
}

// traceArrivals appends the requests of trace workload i of s.
func traceArrivals(out []*Request, s *Scenario, i int, seed uint64, stop time.Duration) []*Request {
	w := &s.Workloads[i]
	r := streamRand(seed, "trace/"+w.Team, w.randIndex(i))
	start := Sec(w.Start)
	for k := range w.requests {
		q := &w.requests[k]
		at := start + q.Arrival
		if at >= stop {
			break
		}
		req := traceRequest(w, q, r)
		req.Stream, req.Client, req.Arrival = i, -1, at
		out = append(out, req)
	}
	return out
}

// describeTrace describes a trace workload for the setup table.
func describeTrace(w WorkloadSpec) string {
	return fmt.Sprintf("trace `%s` (%s), %d requests", w.traceName, describeSpec(*w.Trace), w.traceStats.Count)
}

// describeSpec describes the window and shaping of a trace spec.
func describeSpec(s trace.Spec) string {
	return s.Span(" s") + s.Shaping()
}
