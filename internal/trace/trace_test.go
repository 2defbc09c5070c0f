package trace

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// ms is a shorthand for durations in the tables.
func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// read parses input as format with the spec's other fields.
func read(t *testing.T, format Format, input string, spec Spec) *Trace {
	t.Helper()
	spec.File, spec.Format = "f", format
	tr, err := Read(strings.NewReader(input), "f", spec)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return tr
}

func TestReadFormats(t *testing.T) {
	cases := []struct {
		name   string
		format Format
		input  string
		want   []Request
		failed int
	}{
		{
			name:   "azure",
			format: Azure,
			input: "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
				"2023-11-16 18:17:03.9799600,4808,10\n" +
				"2023-11-16 18:17:04.0319600,3180,8\n" +
				"2023-11-16 18:17:05,0,0\r\n",
			want: []Request{
				{Arrival: 0, Prompt: 4808, Output: 10, Line: 2},
				{Arrival: ms(52), Prompt: 3180, Output: 8, Line: 3},
				{Arrival: ms(1020.04), Prompt: 0, Output: 0, Line: 4},
			},
		},
		{
			name:   "azure with a zone, a byte order mark and spaces",
			format: Azure,
			input: "\ufeffTIMESTAMP, ContextTokens ,GeneratedTokens\n" +
				"2024-05-10 00:00:00.009930+00:00, 12 ,3\n" +
				"2024-05-10T02:00:00.009930+02:00,5,6\n",
			want: []Request{
				{Arrival: 0, Prompt: 12, Output: 3, Line: 2},
				{Arrival: 0, Prompt: 5, Output: 6, Line: 3},
			},
		},
		{
			name:   "azure out of order is sorted",
			format: Azure,
			input: "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
				"2023-11-16 18:17:05,1,1\n" +
				"2023-11-16 18:17:04,2,2\n",
			want: []Request{
				{Arrival: 0, Prompt: 2, Output: 2, Line: 3},
				{Arrival: time.Second, Prompt: 1, Output: 1, Line: 2},
			},
		},
		{
			name:   "burstgpt drops failed rows",
			format: BurstGPT,
			input: "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" +
				"5,ChatGPT,472,18,490,Conversation log\n" +
				"45,ChatGPT,1087,0,1087,Conversation log\n" +
				"118.5,GPT-4,417,276,693,API log\n",
			want: []Request{
				{Arrival: 0, Prompt: 472, Output: 18, Line: 2},
				{Arrival: ms(113500), Prompt: 417, Output: 276, Line: 4},
			},
			failed: 1,
		},
		{
			name:   "burstgpt with session columns",
			format: BurstGPT,
			input: "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n" +
				"10,,1.5,ChatGPT,4,5,9,API log\n" +
				"\"11\",s1,2,ChatGPT,6,7,13,Conversation log\n",
			want: []Request{
				{Arrival: 0, Prompt: 4, Output: 5, Line: 2},
				{Arrival: time.Second, Prompt: 6, Output: 7, Line: 3},
			},
		},
		{
			name:   "mooncake",
			format: Mooncake,
			input: `{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}` + "\n\n" +
				`{"timestamp": 30535, "input_length": 512, "output_length": 26, "hash_ids": [46], "extra": true}` + "\n" +
				`{"timestamp": 30535.5, "input_length": 0, "output_length": 1, "hash_ids": []}`,
			want: []Request{
				{Arrival: 0, Prompt: 6955, Output: 52, Blocks: []uint64{46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354}, Line: 1},
				{Arrival: ms(3053), Prompt: 512, Output: 26, Blocks: []uint64{46}, Line: 3},
				{Arrival: ms(3053.5), Prompt: 0, Output: 1, Blocks: []uint64{}, Line: 4},
			},
		},
		{
			name:   "jsonl",
			format: JSONL,
			input: `{"arrival_s": 0.5, "team": "a", "class": "interactive", "prompt_tokens": 900, "output_tokens": 120, "blocks": [7, 8]}` + "\n" +
				`{"arrival_s": 2, "team": "b", "class": "batch", "prompt_tokens": 10, "output_tokens": 0}` + "\r\n" +
				`{"arrival_s": 2, "team": "a", "class": "batch", "prompt_tokens": 10, "output_tokens": 1, "blocks": null}` + "\n",
			want: []Request{
				{Arrival: 0, Team: "a", Class: Interactive, Prompt: 900, Output: 120, Blocks: []uint64{7, 8}, Line: 1},
				{Arrival: ms(1500), Team: "b", Class: Batch, Prompt: 10, Output: 0, Line: 2},
				{Arrival: ms(1500), Team: "a", Class: Batch, Prompt: 10, Output: 1, Line: 3},
			},
		},
		{name: "empty jsonl", format: JSONL, input: "\n \n", want: nil},
		{name: "header only", format: Azure, input: "TIMESTAMP,ContextTokens,GeneratedTokens\n", want: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := read(t, c.format, c.input, Spec{})
			if !reflect.DeepEqual(tr.Requests, c.want) {
				t.Errorf("requests\n got %+v\nwant %+v", tr.Requests, c.want)
			}
			if tr.Failed != c.failed || tr.Rows != len(c.want)+c.failed {
				t.Errorf("rows %d failed %d, want %d and %d", tr.Rows, tr.Failed, len(c.want)+c.failed, c.failed)
			}
		})
	}
}

func TestRowErrors(t *testing.T) {
	const (
		azureHead = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
		azureRow  = "2023-11-16 18:17:03.9799600,4808,10\n"
		burstHead = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
		ownRow    = `{"arrival_s": 1, "team": "a", "class": "batch", "prompt_tokens": 1, "output_tokens": 1}` + "\n"
	)
	cases := []struct {
		name   string
		format Format
		input  string
		want   string
	}{
		{"azure bad output", Azure, azureHead + strings.Repeat(azureRow, 15) + "2023-11-16 18:17:04,1,x\n", `conv.csv:17: GeneratedTokens: "x" is not a non-negative integer`},
		{"azure negative prompt", Azure, azureHead + "2023-11-16 18:17:04,-1,2\n", `conv.csv:2: ContextTokens: "-1" is not a non-negative integer`},
		{"azure huge prompt", Azure, azureHead + "2023-11-16 18:17:04,99999999999,2\n", `conv.csv:2: ContextTokens: 99999999999 tokens is more than 1073741824`},
		{"azure bad time", Azure, azureHead + azureRow + "18:17:04,1,2\n", `conv.csv:3: TIMESTAMP: "18:17:04" is not a time like 2023-11-16 18:17:03.9799600`},
		{"azure far time", Azure, azureHead + azureRow + "2033-11-16 18:17:04,1,2\n", `conv.csv:3: TIMESTAMP: 2033-11-16 18:17:04 is more than 1e+08 s from the first row's 2023-11-16 18:17:03.97996`},
		{"azure fields", Azure, azureHead + "2023-11-16 18:17:04,1\n", `conv.csv:2: 2 fields, want 3 as in the header`},
		{"azure quote", Azure, azureHead + "2023-11-16 18:17:04,1\"2,3\n", `conv.csv:2: csv: bare " in non-quoted-field`},
		{"azure empty", Azure, "", `conv.csv:1: empty file, want the header TIMESTAMP,ContextTokens,GeneratedTokens`},
		{"azure wrong header", Azure, "Timestamp,Model\n", `conv.csv:1: header: unknown column "Timestamp", want TIMESTAMP,ContextTokens,GeneratedTokens`},
		{"azure missing column", Azure, "TIMESTAMP,ContextTokens\n", `conv.csv:1: header: missing column "GeneratedTokens", want TIMESTAMP,ContextTokens,GeneratedTokens`},
		{"azure duplicate column", Azure, "TIMESTAMP,ContextTokens,ContextTokens,GeneratedTokens\n", `conv.csv:1: header: column "ContextTokens" appears twice`},
		{"burstgpt bad time", BurstGPT, burstHead + "-5,ChatGPT,1,2,3,API log\n", `conv.csv:2: Timestamp: "-5" is not a non-negative number`},
		{"burstgpt NaN time", BurstGPT, burstHead + "NaN,ChatGPT,1,2,3,API log\n", `conv.csv:2: Timestamp: "NaN" is not a non-negative number`},
		{"burstgpt far time", BurstGPT, burstHead + "1e9,ChatGPT,1,2,3,API log\n", `conv.csv:2: Timestamp: "1e9" is more than 1e+08 s`},
		{"burstgpt bad response", BurstGPT, burstHead + "5,ChatGPT,1,2.5,3,API log\n", `conv.csv:2: Response tokens: "2.5" is not a non-negative integer`},
		{"burstgpt multi-line quoted row", BurstGPT, burstHead + "5,\"Chat\nGPT\",1,2,3,API log\n6,ChatGPT,x,2,3,API log\n", `conv.csv:4: Request tokens: "x" is not a non-negative integer`},
		{"mooncake not json", Mooncake, `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1]}` + "\nnope\n", `conv.csv:2: not a JSON object: invalid character 'o' in literal null (expecting 'u')`},
		{"mooncake array", Mooncake, "[1]\n", `conv.csv:1: not a JSON object: json: cannot unmarshal array into Go value of type map[string]json.RawMessage`},
		{"mooncake two values", Mooncake, "{} {}\n", `conv.csv:1: more than one JSON value on the line`},
		{"mooncake null", Mooncake, "null\n", `conv.csv:1: not a JSON object: null`},
		{"mooncake missing time", Mooncake, `{"input_length": 1, "output_length": 1, "hash_ids": [1]}`, `conv.csv:1: timestamp: missing`},
		{"mooncake string time", Mooncake, `{"timestamp": "1", "input_length": 1, "output_length": 1, "hash_ids": [1]}`, `conv.csv:1: timestamp: "1" is not a number`},
		{"mooncake float length", Mooncake, `{"timestamp": 1, "input_length": 1.5, "output_length": 1, "hash_ids": [1]}`, `conv.csv:1: input_length: "1.5" is not a non-negative integer`},
		{"mooncake missing hashes", Mooncake, `{"timestamp": 1, "input_length": 1, "output_length": 1}`, `conv.csv:1: hash_ids: missing`},
		{"mooncake bad hash", Mooncake, `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [-1]}`, `conv.csv:1: hash_ids[0]: -1 is not a non-negative integer`},
		{"mooncake hashes not array", Mooncake, `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": 3}`, `conv.csv:1: hash_ids: 3 is not an array of block ids`},
		{"mooncake block count", Mooncake, `{"timestamp": 1, "input_length": 513, "output_length": 1, "hash_ids": [1]}`, `conv.csv:1: hash_ids: 1 block ids for 513 input tokens, want 2 (one per 512 tokens)`},
		{"jsonl unknown field", JSONL, ownRow + `{"arrival_s": 1, "team": "a", "class": "batch", "prompt_tokens": 1, "output_tokens": 1, "prio": 2}`, `conv.csv:2: "prio": unknown field (known: arrival_s, team, class, prompt_tokens, output_tokens, blocks)`},
		{"jsonl unknown fields name the first in order", JSONL, `{"zz": 1, " a": 2, "arrival_s": 1, "team": "a", "class": "batch", "prompt_tokens": 1, "output_tokens": 1}`, `conv.csv:1: " a": unknown field (known: arrival_s, team, class, prompt_tokens, output_tokens, blocks)`},
		{"jsonl missing team", JSONL, `{"arrival_s": 1, "class": "batch", "prompt_tokens": 1, "output_tokens": 1}`, `conv.csv:1: team: missing`},
		{"jsonl team with space", JSONL, `{"arrival_s": 1, "team": "a b", "class": "batch", "prompt_tokens": 1, "output_tokens": 1}`, `conv.csv:1: team: "a b" is not a non-empty string without spaces`},
		{"jsonl bad class", JSONL, `{"arrival_s": 1, "team": "a", "class": "Batch", "prompt_tokens": 1, "output_tokens": 1}`, `conv.csv:1: class: "Batch" is not "interactive" or "batch"`},
		{"jsonl missing class", JSONL, `{"arrival_s": 1, "team": "a", "prompt_tokens": 1, "output_tokens": 1}`, `conv.csv:1: class: missing`},
		{"jsonl negative arrival", JSONL, `{"arrival_s": -1, "team": "a", "class": "batch", "prompt_tokens": 1, "output_tokens": 1}`, `conv.csv:1: arrival_s: -1 is not a non-negative number`},
		{"jsonl missing output", JSONL, `{"arrival_s": 1, "team": "a", "class": "batch", "prompt_tokens": 1}`, `conv.csv:1: output_tokens: missing`},
		{"jsonl too many blocks", JSONL, `{"arrival_s": 1, "team": "a", "class": "batch", "prompt_tokens": 1, "output_tokens": 1, "blocks": [1, 2]}`, `conv.csv:1: blocks: 2 block ids for 1 prompt tokens, want at most 1 (one per 512 tokens)`},
		{"jsonl long line", JSONL, ownRow + strings.Repeat(" ", maxLine+1), `conv.csv:2: line longer than 16 MiB`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.input), "conv.csv", Spec{File: "conv.csv", Format: c.format})
			if err == nil || err.Error() != c.want {
				t.Errorf("error\n got %v\nwant %s", err, c.want)
			}
		})
	}
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{File: "f.csv", Format: Azure}
	with := func(f func(*Spec)) Spec { s := ok; f(&s); return s }
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"minimal", ok, ""},
		{"all set", Spec{File: "f", Format: JSONL, Start: 10, Duration: 60, TimeScale: 2, RateScale: 0.5, Every: 3, Offset: 2}, ""},
		{"no file", with(func(s *Spec) { s.File = "" }), "trace.file: must not be empty"},
		{"bad format", with(func(s *Spec) { s.Format = "csv" }), `trace.format: must be one of azure, burstgpt, mooncake, jsonl, got "csv"`},
		{"negative start", with(func(s *Spec) { s.Start = -1 }), "trace.start_s: must be in [0, 1e+08], got -1"},
		{"negative duration", with(func(s *Spec) { s.Duration = -2 }), "trace.duration_s: must be in [0, 1e+08] (0: to the end), got -2"},
		{"negative time scale", with(func(s *Spec) { s.TimeScale = -1 }), "trace.time_scale: must be > 0, at most 20, got -1"},
		{"huge time scale", with(func(s *Spec) { s.TimeScale = 21 }), "trace.time_scale: must be > 0, at most 20, got 21"},
		{"negative rate scale", with(func(s *Spec) { s.RateScale = -0.5 }), "trace.rate_scale: must be > 0, at most 100, got -0.5"},
		{"huge rate scale", with(func(s *Spec) { s.RateScale = 101 }), "trace.rate_scale: must be > 0, at most 100, got 101"},
		{"negative every", with(func(s *Spec) { s.Every = -1 }), "trace.every: must be >= 1 (0: every row), got -1"},
		{"offset past every", with(func(s *Spec) { s.Every, s.Offset = 2, 2 }), "trace.offset: must be in [0, every) = [0, 2), got 2"},
		{"offset without every", with(func(s *Spec) { s.Offset = 1 }), "trace.offset: must be in [0, every) = [0, 1), got 1"},
		{"two problems", Spec{Format: Mooncake, Every: 2, Offset: -1}, "trace.file: must not be empty\ntrace.offset: must be in [0, every) = [0, 2), got -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.spec.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.want {
				t.Errorf("Validate\n got %q\nwant %q", got, c.want)
			}
		})
	}
	if err := (Spec{}).ValidateAt("workloads[2].trace"); err == nil || !strings.HasPrefix(err.Error(), "workloads[2].trace.file: ") {
		t.Errorf("ValidateAt prefix: %v", err)
	}
	if _, err := Read(strings.NewReader(""), "f", Spec{File: "f", Format: Azure, TimeScale: -1}); err == nil || err.Error() != "trace.time_scale: must be > 0, at most 20, got -1" {
		t.Errorf("Read with a bad spec: %v", err)
	}
}

func TestSpecJSON(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Spec
		err  string
	}{
		{
			name: "every key",
			in:   `{"file": "t.csv", "format": "azure", "start_s": 60, "duration_s": 900, "time_scale": 2, "rate_scale": 0.5, "every": 3, "offset": 1}`,
			want: Spec{File: "t.csv", Format: Azure, Start: 60, Duration: 900, TimeScale: 2, RateScale: 0.5, Every: 3, Offset: 1},
		},
		{name: "defaults", in: `{"file": "t.jsonl", "format": "jsonl"}`, want: Spec{File: "t.jsonl", Format: JSONL}},
		{name: "unknown key", in: `{"file": "t.csv", "format": "azure", "speed": 2}`, err: `json: unknown field "speed"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dec := json.NewDecoder(bytes.NewReader([]byte(c.in)))
			dec.DisallowUnknownFields()
			var got Spec
			err := dec.Decode(&got)
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("error %v, want %s", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("decoded %+v (error %v), want %+v", got, err, c.want)
			}
			out, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var back Spec
			if err := json.Unmarshal(out, &back); err != nil || back != got {
				t.Fatalf("round trip %s gave %+v (error %v)", out, back, err)
			}
		})
	}
}
