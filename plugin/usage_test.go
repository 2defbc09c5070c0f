package plugin

import (
	"bytes"
	"github.com/tidwall/gjson"
	"math/rand/v2"
	"strings"
	"testing"
)

const vllmJSON = `{"id":"chatcmpl-1","object":"chat.completion","created":1747650000,"model":"meta-llama/Llama-3.1-8B-Instruct",
 "choices":[{"index":0,"message":{"role":"assistant","content":"Hi!","refusal":null,"annotations":null,"audio":null,
   "function_call":null,"tool_calls":[],"reasoning":null},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}],
 "service_tier":null,"system_fingerprint":null,
 "usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}},
 "prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,"kv_transfer_params":null}`

// vllmStream is a vLLM chat stream (chat_completion/serving.py) with its usage
// chunk, and the same stream as the client sees it without the usage chunk.
const (
	streamHead = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1747650000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1747650000,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null,"token_ids":null}]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1747650000,"model":"m","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]}

`
	streamUsage = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1747650000,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2}}

`
	streamTail = "data: [DONE]\n\n"
	vllmStream = streamHead + streamUsage + streamTail
	clientView = streamHead + streamTail
)

func TestUsageCost(t *testing.T) {
	w := costWeights{prompt: 1, cachedPrompt: 0.25, completion: 2}
	tests := []struct {
		u    usage
		want float64
	}{
		{usage{prompt: 12, completion: 3}, 12 + 6},
		{usage{prompt: 12, cached: 8, completion: 3}, 4 + 2 + 6},
		{usage{prompt: 4, cached: 8}, 1},  // cached above prompt counts as prompt
		{usage{prompt: 4, cached: -1}, 4}, // never from the parser, still safe
	}
	for _, tt := range tests {
		if got := tt.u.cost(w); got != tt.want {
			t.Errorf("%+v.cost(%+v) = %v, want %v", tt.u, w, got, tt.want)
		}
	}
}

func TestJSONUsage(t *testing.T) {
	tests := []struct {
		body string
		want usage
	}{
		{vllmJSON, usage{prompt: 12, cached: 8, completion: 3, ok: true}},
		{`{"usage":{"prompt_tokens":5,"completion_tokens":0,"prompt_tokens_details":null}}`, usage{prompt: 5, ok: true}},
		{`{"error":{"message":"x","type":"BadRequestError","param":null,"code":400}}`, usage{}},
		{`{"usage":null}`, usage{}},
		{`{"usage":{"prompt_tokens":"5"}}`, usage{}},
		{`{"usage":{"prompt_tokens":5}`, usage{}}, // truncated
		{`not json`, usage{}},
	}
	for _, tt := range tests {
		if got := jsonUsage([]byte(tt.body)); got != tt.want {
			t.Errorf("jsonUsage(%.60s) = %+v, want %+v", tt.body, got, tt.want)
		}
	}
}

// feedSplit feeds s to a scanner in chunks cut at the given offsets and
// returns the concatenated output.
func feedSplit(s *sseScanner, in string, cuts []int) string {
	var out bytes.Buffer
	last := 0
	for _, c := range cuts {
		out.Write(s.feed([]byte(in[last:c]), false))
		last = c
	}
	out.Write(s.feed([]byte(in[last:]), true))
	return out.String()
}

func TestSSEEverySplit(t *testing.T) {
	want := usage{prompt: 12, completion: 2, ok: true}
	for _, hide := range []bool{false, true} {
		wantOut := vllmStream
		if hide {
			wantOut = clientView
		}
		for i := 0; i <= len(vllmStream); i++ {
			for _, j := range []int{i, i + 1, i + 7, len(vllmStream)} {
				if j < i || j > len(vllmStream) {
					continue
				}
				s := sseScanner{hide: hide}
				got := feedSplit(&s, vllmStream, []int{i, j})
				if got != wantOut {
					t.Fatalf("hide=%v split %d,%d: output\n%q\nwant\n%q", hide, i, j, got, wantOut)
				}
				if s.u != want || !s.done {
					t.Fatalf("hide=%v split %d,%d: usage %+v done %v, want %+v", hide, i, j, s.u, s.done, want)
				}
				if s.seen != 2 {
					t.Fatalf("hide=%v split %d,%d: seen %d, want 2", hide, i, j, s.seen)
				}
			}
		}
	}
}

func TestSSEPassThroughIsSame(t *testing.T) {
	// Without hiding the scanner returns each chunk itself.
	s := sseScanner{}
	chunk := []byte(vllmStream[:100])
	if out := s.feed(chunk, false); &out[0] != &chunk[0] || len(out) != len(chunk) {
		t.Error("feed without hide copied the chunk")
	}
}

func TestSSEHoldsOnlyPartialLine(t *testing.T) {
	// While hiding, the output of a chunk is all its complete lines: only
	// the incomplete trailing line is held back.
	s := sseScanner{hide: true}
	head := streamHead[:len(streamHead)-40]
	out := string(s.feed([]byte(head), false))
	if want := head[:strings.LastIndexByte(head, '\n')+1]; out != want {
		t.Errorf("held back more than the partial line: got %d bytes, want %d", len(out), len(want))
	}
}

func TestSSEContinuousUsageAndCRLF(t *testing.T) {
	in := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\r\n\r\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\r\n\r\n"
	s := sseScanner{}
	feedSplit(&s, in, []int{10, 50})
	if s.u != (usage{prompt: 7, completion: 2, ok: true}) || s.seen != 2 {
		t.Errorf("continuous usage = %+v seen %d", s.u, s.seen)
	}
}

func TestSSEKeepsErrorChunks(t *testing.T) {
	in := "data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n"
	s := sseScanner{hide: true}
	if got := feedSplit(&s, in, []int{5}); got != in {
		t.Errorf("error stream = %q, want unchanged", got)
	}
	if s.u.ok {
		t.Error("usage from an error chunk")
	}
}

func TestSSELongLine(t *testing.T) {
	long := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", maxHoldLine*2) + `"}}]}` + "\n\n"
	in := long + streamUsage + streamTail
	for _, hide := range []bool{false, true} {
		s := sseScanner{hide: hide}
		var cuts []int
		for c := 4096; c < len(in); c += 4096 {
			cuts = append(cuts, c)
		}
		got := feedSplit(&s, in, cuts)
		want := in
		if hide {
			want = long + streamTail
		}
		if got != want {
			t.Errorf("hide=%v: long line stream changed (%d bytes, want %d)", hide, len(got), len(want))
		}
		if !s.u.ok || s.u.prompt != 12 {
			t.Errorf("hide=%v: usage %+v", hide, s.u)
		}
	}
}

// FuzzSSE checks, for any stream and any chunking, that the scanner never
// panics, passes the stream unchanged without hiding, and with hiding
// removes exactly the usage-only events while finding the same usage.
func FuzzSSE(f *testing.F) {
	f.Add([]byte(vllmStream), uint64(1))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\r\n\r\ndata: [DONE]"), uint64(7))
	f.Add([]byte(":comment\nevent: x\ndata: {}\n\n\n"), uint64(3))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 0))
		var cuts []int
		for c := r.IntN(len(in) + 1); c < len(in) && len(cuts) < 64; c += 1 + r.IntN(len(in)) {
			cuts = append(cuts, c)
		}
		plain := sseScanner{}
		if got := feedSplit(&plain, string(in), cuts); got != string(in) {
			t.Fatalf("scan changed the stream")
		}
		whole := sseScanner{}
		whole.feed(in, true)
		if plain.u != whole.u || plain.seen != whole.seen {
			t.Fatalf("chunked usage %+v/%d != whole %+v/%d", plain.u, plain.seen, whole.u, whole.seen)
		}
		hid := sseScanner{hide: true}
		got := feedSplit(&hid, string(in), cuts)
		one := sseScanner{hide: true}
		want := string(one.feed(in, true))
		if got != want {
			t.Fatalf("hidden output depends on chunking:\n%q\n%q", got, want)
		}
		if hid.u != plain.u {
			t.Fatalf("hide usage %+v != scan usage %+v", hid.u, plain.u)
		}
		if len(got) > len(in) {
			t.Fatalf("hiding grew the stream")
		}
	})
}

func TestTailUsage(t *testing.T) {
	u := usage{prompt: 12, cached: 4, completion: 3, ok: true}
	for _, tc := range []struct {
		tail string
		want usage
	}{
		{`"x"}]}],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}},"prompt_logprobs":null}`, u},
		{`"x"}]}], "usage" : {"prompt_tokens":12, "completion_tokens":3, "prompt_tokens_details":{"cached_tokens":4}}}`, u},
		// The last complete usage member wins; a truncated one is skipped.
		{`"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}},"kv":{"usage":{"prompt_tok`, u},
		// Quoted inside a string, "usage" is escaped: not a member.
		{`"content":"say \"usage\":{\"prompt_tokens\":1}"}]}`, usage{}},
		{`ge":{"prompt_tokens":12,"completion_tokens":3}}`, usage{}},
		{``, usage{}},
	} {
		if got := tailUsage([]byte(tc.tail)); got != tc.want {
			t.Errorf("tailUsage(%q) = %+v, want %+v", tc.tail, got, tc.want)
		}
	}
}

func TestKeepTail(t *testing.T) {
	var tail []byte
	var all []byte
	for i := 0; i < 5*maxTail; i += 1000 + i%7 {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i%7)
		all = append(all, chunk...)
		tail = keepTail(tail, chunk)
		want := all[max(0, len(all)-maxTail):]
		if !bytes.HasSuffix(all, tail) || len(tail) < len(want) || len(tail) > 2*maxTail {
			t.Fatalf("after %d bytes: tail of %d bytes is not a suffix of at least %d", len(all), len(tail), len(want))
		}
	}
	if tail = keepTail(tail, make([]byte, 3*maxTail)); len(tail) != maxTail {
		t.Errorf("a chunk larger than the tail kept %d bytes", len(tail))
	}
}

// FuzzReadUsage: the flat reader (vLLM's usage objects, without a callback
// per member) either leaves an input to the general one or reads it
// exactly as the general one does.
func FuzzReadUsage(f *testing.F) {
	for _, s := range []string{
		`{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10,"prompt_tokens_details":null}`,
		`{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":256}}`,
		`{"prompt_tokens":1,"prompt_tokens":2}`, `{}`, `{"completion_tokens":0}`, `{"prompt_tokens":012}`,
		`{"prompt_tokens":1.5}`, `{"prompt_tokens":1e3}`, `{"prompt_tokens":-1}`, `{"prompt_tokens":999999999999999}`,
		`{"prompt_tokens":9999999999999999}`, `{"prompt_tokens": 3}`, `{"prompt_tokens":3,}`, `{"prompt_tokens":3}}`,
		`{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens":4}`, `{"Prompt_tokens":4}`, `{"x":"y"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := readFlatUsage(raw)
		if !ok {
			return
		}
		if want := readUsageMembers(raw); got != want {
			t.Errorf("readFlatUsage(%q) = %+v, readUsageMembers = %+v", raw, got, want)
		}
		if !gjson.ValidBytes(raw) {
			t.Errorf("readFlatUsage accepted invalid JSON %q", raw)
		}
	})
}
