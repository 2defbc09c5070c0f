package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

func TestInspect(t *testing.T) {
	type request struct {
		model                 string
		modelBad              bool
		prompt, completion, n int64
		stream, includeUsage  bool
		prompts               int64
	}
	tests := []struct {
		name string
		body string
		want request
	}{
		{"chat defaults", `{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
			request{model: "m", prompt: ceil4(len(`[{"role":"user","content":"hello"}]`)), completion: 512, n: 1}},
		{"max_completion_tokens wins", `{"model":"m","prompt":"abcdefgh","max_tokens":7,"max_completion_tokens":9,"n":3}`,
			request{model: "m", prompt: 2, completion: 9, n: 3}},
		{"max_tokens", `{"prompt":"abcdefghi","max_tokens":7}`, request{prompt: 3, completion: 7, n: 1}},
		{"token ids exact", `{"model":"m","prompt":[1,2,3,4,5]}`, request{model: "m", prompt: 5, completion: 512, n: 1}},
		{"batch of token ids", `{"prompt":[[1,2],[3,4,5]]}`, request{prompt: 5, completion: 512, n: 1, prompts: 2}},
		{"batch of strings", `{"prompt":["abcd","abcdefgh"],"n":2,"max_tokens":10}`, request{prompt: 3, completion: 10, n: 2, prompts: 2}},
		{"one string in a list", `{"prompt":["abcd"]}`, request{prompt: 1, completion: 512, n: 1}},
		{"stream", `{"stream":true,"stream_options":{"include_usage":true}}`, request{completion: 512, n: 1, stream: true, includeUsage: true}},
		{"include_usage as a lax bool", `{"stream":true,"stream_options":{"include_usage":"yes"}}`, request{completion: 512, n: 1, stream: true, includeUsage: true}},
		{"stream no usage", `{"stream":true,"stream_options":{"include_usage":false}}`, request{completion: 512, n: 1, stream: true}},
		{"bad numbers ignored", `{"max_tokens":-3,"n":1.5,"max_completion_tokens":"9x"}`, request{completion: 512, n: 1}},
		{"numeric strings as vLLM coerces them", `{"max_tokens":" 4_096 ","n":"8"}`, request{completion: 4096, n: 8}},
		{"numeric string with a zero fraction", `{"max_completion_tokens":"+4096.0","n":8.0}`, request{completion: 4096, n: 8}},
		{"true is one", `{"max_tokens":true}`, request{completion: 1, n: 1}},
		{"exponent strings refused as vLLM refuses them", `{"max_tokens":"1e3"}`, request{completion: 512, n: 1}},
		{"max_output_tokens (Responses)", `{"input":"abcdefgh","instructions":"abcd","max_output_tokens":7}`, request{prompt: 2 + 2, completion: 7, n: 1}},
		{"the estimate saturates", `{"prompt":["a","b"],"n":16384,"max_tokens":1e300}`, request{prompt: 2, completion: maxEstimateTokens, n: 16384, prompts: 2}},
		{"input_text parts count their bytes", `{"messages":[{"role":"user","content":[{"type":"input_text","text":"` + strings.Repeat("x", 4000) + `"}]}]}`,
			request{prompt: ceil4(len(`[{"role":"user","content":[{"type":"input_text","text":""}]}]`) + 4000), completion: 512, n: 1}},
		{"unknown part types count their bytes", `{"messages":[{"role":"user","content":[{"type":"thinking","thinking":"` + strings.Repeat("x", 4000) + `"}]}]}`,
			request{prompt: ceil4(len(`[{"role":"user","content":[{"type":"thinking","thinking":""}]}]`) + 4000), completion: 512, n: 1}},
		{"last include_usage wins", `{"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`, request{completion: 512, n: 1, stream: true}},
		{"null model", `{"model":null}`, request{completion: 512, n: 1}},
		{"model not a string", `{"model":3}`, request{modelBad: true, completion: 512, n: 1}},
		{"stream as a lax bool", `{"stream":"True"}`, request{completion: 512, n: 1, stream: true}},
		{"stream as 1", `{"stream":1}`, request{completion: 512, n: 1, stream: true}},
		{"stream as a false string", `{"stream":"false"}`, request{completion: 512, n: 1}},
		{"stream as another string", `{"stream":"sure"}`, request{completion: 512, n: 1}},
		{"image part counts a fixed estimate", `{"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("A", 4000) + `"}}]}]}`,
			request{prompt: ceil4(len(`[{"role":"user","content":[{"type":"text","text":"what?"},]}]`)) + mediaPartTokens, completion: 512, n: 1}},
		{"text parts count their bytes", `{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"}]}]}`,
			request{prompt: ceil4(len(`[{"role":"user","content":[{"type":"text","text":"abcd"}]}]`)), completion: 512, n: 1}},
		{"last duplicate wins", `{"model":"a","model":"b","stream":true,"stream":false}`, request{model: "b", completion: 512, n: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := inspect([]byte(tt.body), 512, false)
			if !ok {
				t.Fatalf("inspect(%s) not ok", tt.body)
			}
			got := request{r.model, r.modelBad, r.prompt, r.completion, r.n, r.stream, r.includeUsage, r.prompts}

			if tt.want.prompts == 0 {
				tt.want.prompts = 1 // one prompt unless the case says otherwise
			}
			if got != tt.want {
				t.Errorf("inspect(%s) = %+v, want %+v", tt.body, got, tt.want)
			}
		})
	}
}

func TestInspectValidates(t *testing.T) {
	for in, want := range map[string]bool{`{}`: true, ` {"a":1} `: true, `[]`: false, `"x"`: false, `{`: false, ``: false, `{"a":1}x`: false, `null`: false} {
		if _, got := inspect([]byte(in), 1, false); got != want {
			t.Errorf("inspect(%q) ok = %v, want %v", in, got, want)
		}
	}
}

func TestRewrite(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		prio     int
		addUsage bool
		want     string
	}{
		{"insert", `{"model":"m"}`, 10, false, `{"priority":10,"model":"m"}`},
		{"empty object", `{}`, 0, false, `{"priority":0}`},
		{"whitespace kept", " {\n \"model\" : \"m\"\n}\n", 1, false, " {\"priority\":1,\n \"model\" : \"m\"\n}\n"},
		{"overwrite", `{"model":"m","priority":-5}`, 11, false, `{"model":"m","priority":11}`},
		{"overwrite any type", `{"priority":"high","x":1}`, 0, false, `{"priority":0,"x":1}`},
		{"overwrite duplicates", `{"priority":-1,"a":1,"priority":-2}`, 20, false, `{"priority":20,"a":1,"priority":20}`},
		{"overwrite more duplicates than kept in place", `{"priority":-1,"priority":-2,"a":1,"priority":-3,"priority":4}`, 7, false,
			`{"priority":7,"priority":7,"a":1,"priority":7,"priority":7}`},
		{"nested priority untouched", `{"metadata":{"priority":-1}}`, 3, false, `{"priority":3,"metadata":{"priority":-1}}`},
		{"add usage", `{"stream":true}`, 0, true, `{"priority":0,"stream_options":{"include_usage":true},"stream":true}`},
		{"options replaced whole", `{"stream":true,"stream_options":{"x":1}}`, 0, true, `{"priority":0,"stream":true,"stream_options":{"include_usage":true}}`},
		{"duplicate include_usage replaced", `{"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`, 0, true, `{"priority":0,"stream":true,"stream_options":{"include_usage":true}}`},
		{"duplicate options replaced", `{"stream_options":{"include_usage":true},"stream":true,"stream_options":{}}`, 0, true, `{"priority":0,"stream_options":{"include_usage":true},"stream":true,"stream_options":{"include_usage":true}}`},
		{"three options replaced", `{"stream_options":{},"stream_options":1,"stream_options":{"a":2}}`, 0, true,
			`{"priority":0,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}`},
		{"empty options", `{"stream_options":{}}`, 0, true, `{"priority":0,"stream_options":{"include_usage":true}}`},
		{"flip usage off continuous", `{"stream_options":{"include_usage":false,"continuous_usage_stats":true},"priority":1}`, 2, true,
			`{"stream_options":{"include_usage":true},"priority":2}`},
		{"options not object", `{"stream_options":null}`, 0, true, `{"priority":0,"stream_options":{"include_usage":true}}`},
		{"unicode escaped key", `{"pr\u0069ority":-9}`, 4, false, `{"pr\u0069ority":4}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rewrite(nil, []byte(tt.body), tt.prio, tt.addUsage)
			if string(got) != tt.want {
				t.Errorf("rewrite(%s, %d, %v) = %s, want %s", tt.body, tt.prio, tt.addUsage, got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("rewrite(%s) is not valid JSON: %s", tt.body, got)
			}
		})
	}
}

// decodeLast decodes a JSON object as Python's json module does: the last
// of duplicate members wins (encoding/json does the same).
func decodeLast(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return m
}

// checkRewrite verifies the rewrite of a valid JSON object: the result is
// valid JSON, priority is prio, stream_options asks for one usage chunk
// when addUsage, and every other member is unchanged.
func checkRewrite(t *testing.T, body []byte, prio int, addUsage bool) {
	got := rewrite(nil, body, prio, addUsage)
	if !json.Valid(got) {
		t.Fatalf("rewrite(%q) = %q: invalid JSON", body, got)
	}
	before, after := decodeLast(t, body), decodeLast(t, got)
	if p := after["priority"]; fmt.Sprint(p) != fmt.Sprint(prio) {
		t.Fatalf("rewrite(%q) priority = %v, want %d", body, p, prio)
	}
	if addUsage {
		so, ok := after["stream_options"].(map[string]any)
		if !ok || so["include_usage"] != true || (so["continuous_usage_stats"] != nil && so["continuous_usage_stats"] != false) {
			t.Fatalf("rewrite(%q) stream_options = %v", body, after["stream_options"])
		}
		delete(after, "stream_options")
		delete(before, "stream_options")
	}
	delete(after, "priority")
	delete(before, "priority")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("rewrite(%q) changed other members: %v -> %v", body, before, after)
	}
}

func FuzzRewrite(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"priority":3}`), 10, true)
	f.Add([]byte(`{}`), 0, false)
	f.Add([]byte(`{"stream_options":{"continuous_usage_stats":true},"stream":true}`), 101, true)
	f.Add([]byte(`{"priority":1,"priority":2,"stream_options":1}`), 1, true)
	f.Fuzz(func(t *testing.T, body []byte, prio int, addUsage bool) {
		if _, ok := inspect(body, 1, false); !ok {
			// Not a request the plugin rewrites.
			return
		}
		var probe map[string]any
		if json.Unmarshal(body, &probe) != nil {
			return
		}
		checkRewrite(t, body, prio, addUsage)
		checkSend(t, body, prio, addUsage)
	})
}

// benchBody returns a chat request of about n bytes.
func benchBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":256,"stream":true,"messages":[`)
	msg := `{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 8) + `"}`
	for i := 0; b.Len() < n-len(msg)-8; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(msg)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// BenchmarkRewrite compares the plugin's inspect+rewrite with the
// encoding/json baseline (unmarshal into a map, set, marshal); report the
// ratio of the two in the same run.
func BenchmarkRewrite(b *testing.B) {
	for _, s := range benchSizes {
		body := benchBody(s.n)
		b.Run("plugin/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var dst []byte
			for b.Loop() {
				r, ok := inspect(body, 512, false)
				if !ok {
					b.Fatal("not an object")
				}
				dst = r.rewrite(dst[:0], body, 10, r.stream && !r.includeUsage)
			}
		})
		b.Run("encoding_json/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var m map[string]any
				if err := json.Unmarshal(body, &m); err != nil {
					b.Fatal(err)
				}
				m["priority"] = 10
				m["stream_options"] = map[string]any{"include_usage": true}
				if _, err := json.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestStrip(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"a":1}`, `{"a":1}`},
		{`{"priority":-9}`, `{             }`},
		{`{"a":1,"priority":-9}`, `{"a":1              }`},
		{`{"priority":-9,"a":1}`, `{              "a":1}`},
		{`{"a":1,"priority":-9,"b":2}`, `{"a":1              ,"b":2}`},
		{`{"priority":1,"priority":2,"b":3}`, `{                          "b":3}`},
		{`{"a":1,"priority":1,"priority":2}`, `{"a":1                          }`},
		{`{"priority":1,"a":1,"priority":2,"priority":3}`, `{             "a":1                          }`},
		{`{"priority":1 , "a":1 , "priority":2 }`, `{               "a":1                }`},
		{`{"pr\u0069ority":-9,"x":{"priority":1}}`, `{                   "x":{"priority":1}}`},
		{" {\n\"priority\" :\n-9\n}", " {\n               \n}"},
	}
	for _, tt := range tests {
		b := []byte(tt.body)
		r, ok := inspect(b, 1, true)
		if !ok {
			t.Fatalf("inspect(%s) not ok", tt.body)
		}
		r.strip(b)
		if string(b) != tt.want {
			t.Errorf("strip(%s) = %q, want %q", tt.body, b, tt.want)
		}
	}
}

func FuzzStrip(f *testing.F) {
	for _, s := range []string{`{"priority":1}`, `{"a":1,"priority":2,"priority":3,"b":[1,{"priority":4}]}`, `{"priority":1,"priority":2}`, `{}`, `{"\u0070riority":null, "x":"priority"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, ok := inspect(body, 1, true)
		if !ok {
			return
		}
		want, valid := decodeLastOK(body)
		if !valid {
			return // a body encoding/json refuses: nothing to compare with
		}
		out := append([]byte(nil), body...)
		r.strip(out)
		if len(out) != len(body) {
			t.Fatalf("strip changed the length of %q", body)
		}
		got, valid := decodeLastOK(out)
		if !valid {
			t.Fatalf("strip(%q) = %q: not valid JSON", body, out)
		}
		if _, has := got["priority"]; has {
			t.Fatalf("strip(%q) = %q still has a priority", body, out)
		}
		delete(want, "priority")
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("strip(%q) = %q: members changed", body, out)
		}
	})
}

// decodeLastOK decodes a JSON object with the last of duplicate members
// winning; ok is false if b is not a JSON object.
func decodeLastOK(b []byte) (m map[string]any, ok bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

func FuzzEstimate(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"input_text","text":"abc"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":"4096","n":"8"}`,
		`{"prompt":[[1,2],[3]],"n":16384,"max_tokens":1099511627776}`,
		`{"input":[{"type":"message","content":[{"type":"input_image"}]}],"instructions":"x","max_output_tokens":7}`,
		`{"max_tokens":" 1_000 ","max_completion_tokens":true,"n":-1}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, pooling bool) {
		r, ok := inspect(body, DefaultMaxTokens, pooling)
		if !ok {
			if _, valid := decodeLastOK(body); valid && json.Valid(body) && bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
				t.Fatalf("inspect refused %q, a JSON object", body)
			}
			return
		}
		prompt, completion := r.tokens()
		if prompt < 0 || prompt > maxEstimateTokens || completion < 0 || completion > maxEstimateTokens {
			t.Fatalf("tokens(%q) = %d, %d: outside [0, 2^40]", body, prompt, completion)
		}
		if r.n < 1 || r.n > maxN || r.prompts < 1 || r.prompts > maxN {
			t.Fatalf("inspect(%q): n %d, prompts %d outside [1, %d]", body, r.n, r.prompts, maxN)
		}
		if pooling && completion != 0 {
			t.Fatalf("pooling request %q estimated %d completion tokens", body, completion)
		}
		if !pooling && completion == 0 {
			t.Fatalf("generation request %q estimated no completion", body)
		}
	})
}

// TestMessagesTypeHint checks that inspect, which skips the search for
// typed content parts when the scan saw no key that may be "type", counts
// messages exactly as messagesTokens does on its own.
func TestMessagesTypeHint(t *testing.T) {
	tests := []string{
		`[{"role":"user","content":"hi"}]`,
		`[{"role":"user","content":"say \"type"}]`,
		`[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:x"}}]}]`,
		`[{"role":"user","content":[{"t\u0079pe":"image_url","image_url":{"url":"data:xxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}]}]`,
		`[{"role":"user","content":[{"\u0074\u0079\u0070\u0065":"input_audio","input_audio":{"data":"xxxxxxxxxxxxxxxxxxxx"}}]}]`,
		`[{"type":"input_image","image_url":"data:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]`,
		`[{"role":"user","content":[{"typ":"image_url","types":"image_url"}]}]`,
		`[{"role":"user","content":{"nested":{"type":"image"}}}]`,
		`[]`,
		`"plain"`,
	}
	for _, msgs := range tests {
		body := []byte(`{"model":"m","messages":` + msgs + `}`)
		r, ok := inspect(body, 1, false)
		if !ok {
			t.Fatalf("inspect(%s) not ok", body)
		}
		if want := messagesTokens([]byte(msgs)); r.prompt != want {
			t.Errorf("inspect(%s).prompt = %d, want messagesTokens = %d", body, r.prompt, want)
		}
	}
}

// envoyBody applies proxy_set_buffer_bytes calls to a buffered body as
// Envoy's Buffer::copyFrom does: start 0 and size 0 prepends, start 0 and
// size ≥ len replaces, start ≥ len appends; anything else is refused.
type envoyBody struct{ b []byte }

func (e *envoyBody) set(start, size int, data []byte) error {
	switch {
	case start == 0 && size == 0:
		e.b = append(append([]byte(nil), data...), e.b...)
	case start == 0 && size >= len(e.b):
		e.b = append([]byte(nil), data...)
	case start >= len(e.b):
		e.b = append(e.b, data...)
	default:
		return errors.New("BAD_ARGUMENT")
	}
	return nil
}

// checkSend checks that send leaves in a host buffer holding body exactly
// what rewrite returns, through calls Envoy accepts, and that no piece of
// sendDirect bytes or more was copied by the module.
func checkSend(t *testing.T, body []byte, prio int, addUsage bool) {
	t.Helper()
	r, ok := inspect(body, 1, false)
	if !ok {
		t.Fatalf("inspect(%q) not ok", body)
	}
	want := r.rewrite(nil, body, prio, addUsage)
	host := &envoyBody{b: append([]byte(nil), body...)}
	calls, copied := 0, 0
	count := func(b []byte) {
		calls++
		if !within(b, body) {
			copied += len(b)
		}
	}
	replace := func(b []byte) error { count(b); return host.set(0, math.MaxInt32, b) }
	add := func(b []byte) error { count(b); return host.set(math.MaxInt32, 0, b) }
	if _, err := r.send(nil, nil, body, prio, addUsage, replace, add); err != nil {
		t.Fatalf("send(%q) = %v", body, err)
	}
	if !bytes.Equal(host.b, want) {
		t.Errorf("send(%q, %d, %v) left %q, rewrite gives %q", body, prio, addUsage, host.b, want)
	}
	// Only the short runs between edits, and the edits, are copied.
	if limit := (r.priorities.len() + r.options.len() + 2) * (sendDirect + insertMax); copied > limit {
		t.Errorf("send(%q): %d bytes copied by the module, want at most %d", body, copied, limit)
	}
	if calls == 0 {
		t.Errorf("send(%q) made no host call", body)
	}
}

// within reports whether b is a slice of body's memory.
func within(b, body []byte) bool {
	if len(b) == 0 || len(body) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&body[0]))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(body))
}

func TestSend(t *testing.T) {
	long := strings.Repeat("lorem ipsum ", 200)
	tests := []struct {
		body     string
		prio     int
		addUsage bool
	}{
		{`{}`, 3, false},
		{`{}`, 3, true},
		{`{"model":"m"}`, -7, false},
		{`{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`, 10, false},
		{` {"model":"m","messages":[{"role":"user","content":"` + long + `"}],"stream":true}`, 10, true},
		{`{"priority":1,"messages":[{"content":"` + long + `"}],"priority":2,"stream_options":{"x":1},"m":"` + long + `"}`, 5, true},
		{`{"messages":[{"content":"` + long + `"}],"priority":9}`, 0, false},
	}
	for _, tt := range tests {
		checkSend(t, []byte(tt.body), tt.prio, tt.addUsage)
	}
}
