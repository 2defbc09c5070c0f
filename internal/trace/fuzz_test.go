package trace

import (
	"bytes"
	"reflect"
	"regexp"
	"strconv"
	"testing"
)

// fuzzName is the file name the fuzz targets read under.
const fuzzName = "in.trace"

// rowErr matches an error that names the file and a line.
var rowErr = regexp.MustCompile(`^in\.trace:([1-9][0-9]*): \S`)

// fuzzSpecs are the option seeds every target starts from.
var fuzzSpecs = []Spec{
	{},
	{Start: 0.05, Duration: 1.5, TimeScale: 2, RateScale: 0.5, Every: 2, Offset: 1},
	{RateScale: 3.3, Every: 3},
	{Start: -1, TimeScale: -1},
}

// fuzzRead checks Read on one input: no panic; an invalid spec gives
// Validate's error; any other error names the file and a line within the
// input; a success is sorted, in range, and the same when read again.
func fuzzRead(t *testing.T, format Format, data []byte, spec Spec) {
	spec.File, spec.Format = fuzzName, format
	if spec.RateScale > 5 {
		spec.RateScale = 5 // keep big inputs quick; Validate's bounds have their own tests
	}
	tr, err := Read(bytes.NewReader(data), fuzzName, spec)
	if verr := spec.Validate(); verr != nil {
		if err == nil || err.Error() != verr.Error() {
			t.Fatalf("invalid spec: Read returned %v, want %v", err, verr)
		}
		return
	}
	lines := bytes.Count(data, []byte("\n")) + 1
	if err != nil {
		_, again := Read(bytes.NewReader(data), fuzzName, spec)
		if again == nil || again.Error() != err.Error() {
			t.Fatalf("second read: error %v, first %v", again, err)
		}
		m := rowErr.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("error without file:line: %q", err)
		}
		if n, _ := strconv.Atoi(m[1]); n > lines {
			t.Fatalf("error names line %s of an input of %d lines: %q", m[1], lines, err)
		}
		return
	}
	if tr.Window > tr.Rows-tr.Failed || tr.Failed > tr.Rows || tr.Span < 0 {
		t.Fatalf("rows %d failed %d window %d span %v", tr.Rows, tr.Failed, tr.Window, tr.Span)
	}
	for i, q := range tr.Requests {
		if q.Line < 1 || q.Line > lines {
			t.Fatalf("request %d from line %d of %d", i, q.Line, lines)
		}
		if q.Arrival < 0 || q.Prompt < 0 || q.Prompt > maxTokens || q.Output < 0 || q.Output > maxTokens {
			t.Fatalf("request %d out of range: %+v", i, q)
		}
		if len(q.Blocks) > blocksFor(q.Prompt) {
			t.Fatalf("request %d: %d blocks for %d tokens", i, len(q.Blocks), q.Prompt)
		}
		if spec.Duration > 0 && q.Arrival >= tr.Span {
			t.Fatalf("request %d arrives at %v, past the span %v", i, q.Arrival, tr.Span)
		}
		if i > 0 {
			p := tr.Requests[i-1]
			if p.Arrival > q.Arrival || p.Arrival == q.Arrival && (p.Line > q.Line || p.Line == q.Line && p.Copy >= q.Copy) {
				t.Fatalf("requests %d and %d out of order: %+v, %+v", i-1, i, p, q)
			}
		}
	}
	again, err := Read(bytes.NewReader(data), fuzzName, spec)
	if err != nil || !reflect.DeepEqual(tr, again) {
		t.Fatalf("second read differs (error %v)", err)
	}
}

// fuzzFormat runs fuzzRead for format over the seeds.
func fuzzFormat(f *testing.F, format Format, seeds []string) {
	for _, s := range seeds {
		for _, sp := range fuzzSpecs {
			f.Add([]byte(s), sp.Start, sp.Duration, sp.TimeScale, sp.RateScale, sp.Every, sp.Offset)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, start, duration, timeScale, rateScale float64, every, offset int) {
		fuzzRead(t, format, data, Spec{Start: start, Duration: duration, TimeScale: timeScale, RateScale: rateScale, Every: every, Offset: offset})
	})
}

func FuzzAzure(f *testing.F) {
	fuzzFormat(f, Azure, []string{
		"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n2023-11-16 18:17:05,0,0\n",
		"TIMESTAMP,ContextTokens,GeneratedTokens\r\n2024-05-10 00:00:00.009930+00:00,1,2\r\n2023-11-16 18:17:04,1,2\r\n",
		"TIMESTAMP,ContextTokens,GeneratedTokens\n\"2023-11-16 18:17:04\",1,\"2\"\n2023-11-16 18:17:04,1,x\n",
		"TIMESTAMP,ContextTokens\n",
		"",
	})
}

func FuzzBurstGPT(f *testing.F) {
	fuzzFormat(f, BurstGPT, []string{
		"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n118.5,GPT-4,417,276,693,API log\n",
		"Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n10,,1.5,ChatGPT,4,5,9,API log\n1e3,s,2,GPT-4,6,7,13,API log\n",
		"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,\"Chat\nGPT\",1,2,3,API log\nNaN,x,1,1,2,API log\n",
	})
}

func FuzzMooncake(f *testing.F) {
	fuzzFormat(f, Mooncake, []string{
		`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}` + "\n" +
			`{"timestamp": 30535, "input_length": 512, "output_length": 26, "hash_ids": [46]}` + "\n\n" +
			`{"timestamp": 30535.5, "input_length": 0, "output_length": 1, "hash_ids": []}`,
		`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [18446744073709551615]}` + "\n" + `{"timestamp": 1e3}`,
		"[1]\nnull\n{} {}\n",
	})
}

func FuzzJSONL(f *testing.F) {
	fuzzFormat(f, JSONL, []string{
		`{"arrival_s": 0.5, "team": "a", "class": "interactive", "prompt_tokens": 900, "output_tokens": 120, "blocks": [7, 8]}` + "\n" +
			`{"arrival_s": 2, "team": "b", "class": "batch", "prompt_tokens": 10, "output_tokens": 0}` + "\r\n" +
			`{"arrival_s": 0.2, "team": "a", "class": "batch", "prompt_tokens": 10, "output_tokens": 1, "blocks": null}`,
		`{"arrival_s": 1, "team": "a", "class": "batch", "prompt_tokens": 1, "output_tokens": 1, "prio": 2}`,
		`{"arrival_s": "1", "team": 3, "class": "Batch", "prompt_tokens": -1, "output_tokens": 1.5, "blocks": [1, "x"]}`,
	})
}
