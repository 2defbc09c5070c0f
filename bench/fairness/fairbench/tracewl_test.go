package fairbench

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// traceScenario writes a small trace scenario and its jsonl trace into a
// temporary directory and returns the scenario file's path.
func traceScenario(t *testing.T, scenario string) string {
	t.Helper()
	dir := t.TempDir()
	var rows strings.Builder
	for i := 0; i < 120; i++ {
		class := "interactive"
		if i%3 == 0 {
			class = "batch"
		}
		// Every row shares block 7 (a 512-token system prompt); rows of
		// the same conversation (i/4) share block 100+i/4 too.
		rows.WriteString(`{"arrival_s": ` + ftoa(float64(i)*0.1) + `, "team": "ignored", "class": "` + class +
			`", "prompt_tokens": 1200, "output_tokens": ` + itoa(20+i%50) + `, "blocks": [7, ` + itoa(100+i/4) + `]}` + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "small.jsonl"), []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "t.json")
	if err := os.WriteFile(p, []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func itoa(i int) string     { return strconv.Itoa(i) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

const smallTrace = `{
  "name": "t0-small", "seed": 5, "duration_s": 14, "capacity": 16, "half_life_s": 10,
  "engine": {"preset": "demo", "prefix_caching": true, "prompt_tokens_details": true},
  "teams": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}],
  "workloads": [
    {"team": "a", "kind": "trace", "trace": {"file": "small.jsonl", "format": "jsonl", "every": 2, "offset": 0}, "max_tokens": 40, "interactive": 0.5},
    {"team": "b", "kind": "trace", "trace": {"file": "small.jsonl", "format": "jsonl", "every": 2, "offset": 1, "rate_scale": 3}, "max_tokens": 512, "interactive": 1}
  ]
}`

func TestTraceWorkloadRequests(t *testing.T) {
	s, err := LoadScenario(traceScenario(t, smallTrace))
	if err != nil {
		t.Fatal(err)
	}
	reqs := OpenLoopArrivals(s, s.Seed)
	var a, b int
	for _, q := range reqs {
		switch q.Team {
		case "a":
			a++
			if q.Output > 40 {
				t.Errorf("team a request with output %d: want cut at max_tokens 40", q.Output)
			}
		case "b":
			b++
		default:
			t.Errorf("request of team %q: want the workload's team, not the trace's", q.Team)
		}
		if q.Prompt != 1200 || len(q.HashIDs) != 2 {
			t.Errorf("request %+v: want prompt 1200 and 2 block ids from the row", q)
		}
	}
	// every 2 splits the 120 rows 60/60; rate_scale 3 triples b's.
	if a != 60 || b != 180 {
		t.Errorf("a %d, b %d requests: want 60 and 180", a, b)
	}
	// The jsonl class wins over interactive: every third row is batch.
	batch := 0
	for _, q := range reqs {
		if q.Team == "a" && q.Class == Batch {
			batch++
		}
	}
	if batch != 20 {
		t.Errorf("team a: %d batch requests, want the trace's 20", batch)
	}
	w := s.TraceWindows()
	if len(w) != 2 || w[0].Name == "" || w[0].Stats.Count != 60 || w[1].Stats.Count != 180 {
		t.Errorf("TraceWindows = %+v: want two windows of 60 and 180 requests", w)
	}
}

// TestTraceScenarioDeterministic runs a small trace scenario twice, under
// the baselines and the native plugin, and compares the reports byte for
// byte.
func TestTraceScenarioDeterministic(t *testing.T) {
	path := traceScenario(t, smallTrace)
	var out [2][]byte
	cached := 0
	for i := range out {
		s, err := LoadScenario(path)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := RunScenario(s, SuiteOptions{Policies: append(Baselines(), NewNativePlugin), Modes: []string{ModeVLLM}})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := rep.WriteMarkdown(&b); err != nil {
			t.Fatal(err)
		}
		out[i] = b.Bytes()
		for _, r := range rep.Results[ModeVLLM] {
			for _, tr := range r.Teams {
				cached += tr.CachedTokens
			}
		}
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Errorf("two runs of the same trace scenario differ:\n%s\n---\n%s", out[0], out[1])
	}
	if cached == 0 {
		t.Errorf("no cached prompt tokens with prefix caching on and shared blocks")
	}
}

func TestTraceWorkloadErrors(t *testing.T) {
	for _, tt := range []struct {
		name, edit, want string
	}{
		{"no trace", `"kind": "trace", "trace": {"file": "small.jsonl", "format": "jsonl", "every": 2, "offset": 0}`, "workloads[0].trace: must be set"},
		{"bad format", `"format": "jsonl", "every": 2, "offset": 0`, "workloads[0].trace.format: must be one of"},
		{"bad offset", `"every": 2, "offset": 0}`, "workloads[0].trace.offset: must be in [0, every)"},
		{"missing file", `"file": "small.jsonl", "format": "jsonl", "every": 2, "offset": 0`, "workloads[0].trace: nope.jsonl: open trace"},
		{"lengths", `"max_tokens": 40,`, "workloads[0].prompt: must be absent for kind \"trace\""},
		{"trace on poisson", `"kind": "trace", "trace": {"file": "small.jsonl", "format": "jsonl", "every": 2, "offset": 1, "rate_scale": 3}`, "workloads[1].trace: only for kind \"trace\""},
		{"unknown engine field", `"prefix_caching": true`, "unknown field \"prefix_cache\""},
		{"unknown trace field", `"every": 2, "offset": 0}`, "unknown field \"evry\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := smallTrace
			switch tt.name {
			case "no trace":
				src = strings.Replace(src, tt.edit, `"kind": "trace"`, 1)
			case "bad format":
				src = strings.Replace(src, tt.edit, `"format": "csv", "every": 2, "offset": 0`, 1)
			case "bad offset":
				src = strings.Replace(src, tt.edit, `"every": 2, "offset": 2}`, 1)
			case "missing file":
				src = strings.Replace(src, tt.edit, `"file": "nope.jsonl", "format": "jsonl", "every": 2, "offset": 0`, 1)
			case "lengths":
				src = strings.Replace(src, tt.edit, `"max_tokens": 40, "prompt": {"mean": 10},`, 1)
			case "trace on poisson":
				src = strings.Replace(src, tt.edit, `"kind": "poisson", "rate": 1, "prompt": {"mean": 10}, "output": {"mean": 10}, "trace": {"file": "small.jsonl", "format": "jsonl"}`, 1)
			case "unknown engine field":
				src = strings.Replace(src, tt.edit, `"prefix_cache": true`, 1)
			case "unknown trace field":
				src = strings.Replace(src, tt.edit, `"evry": 2, "offset": 0}`, 1)
			}
			if src == smallTrace {
				t.Fatal("edit not applied")
			}
			_, err := LoadScenario(traceScenario(t, src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestTraceRowErrorNamesFileAndLine(t *testing.T) {
	p := traceScenario(t, smallTrace)
	f := filepath.Join(filepath.Dir(p), "small.jsonl")
	data, _ := os.ReadFile(f)
	data = append(data, []byte(`{"arrival_s": 20, "team": "x", "class": "batch", "prompt_tokens": -1, "output_tokens": 1}`+"\n")...)
	os.WriteFile(f, data, 0o644)
	_, err := LoadScenario(p)
	if err == nil || !strings.Contains(err.Error(), "workloads[0].trace: small.jsonl:121: prompt_tokens") {
		t.Errorf("error %v, want workloads[0].trace: small.jsonl:121: prompt_tokens …", err)
	}
}

func TestTraceSystemPrompt(t *testing.T) {
	src := strings.Replace(smallTrace, `"max_tokens": 40,`, `"max_tokens": 40, "system_prompt_tokens": 2048,`, 1)
	s, err := LoadScenario(traceScenario(t, src))
	if err != nil {
		t.Fatal(err)
	}
	var first []uint64
	for _, q := range OpenLoopArrivals(s, s.Seed) {
		if q.Team != "a" {
			if len(q.HashIDs) != 2 {
				t.Errorf("team b: %d block ids, want the row's 2", len(q.HashIDs))
			}
			continue
		}
		if q.Prompt != 1200+2048 || len(q.HashIDs) != 4+2 {
			t.Fatalf("team a: prompt %d with %d block ids, want 3248 tokens and 4 system blocks + the row's 2", q.Prompt, len(q.HashIDs))
		}
		if first == nil {
			first = q.HashIDs[:4]
		} else if !slices.Equal(first, q.HashIDs[:4]) {
			t.Errorf("team a's system blocks differ between requests: %v, %v", first, q.HashIDs[:4])
		}
		if q.HashIDs[4] != 7 {
			t.Errorf("row blocks %v after the system prompt, want 7 first", q.HashIDs[4:])
		}
	}
	bad := strings.Replace(smallTrace, `"max_tokens": 40,`, `"max_tokens": 40, "system_prompt_tokens": 1000,`, 1)
	if _, err := LoadScenario(traceScenario(t, bad)); err == nil || !strings.Contains(err.Error(), "workloads[0].system_prompt_tokens: must be a positive multiple of 512") {
		t.Errorf("error %v, want workloads[0].system_prompt_tokens: must be a positive multiple of 512", err)
	}
}
