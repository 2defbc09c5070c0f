package vllmsim

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestHTTPPrefixCaching sends the same (or a related) request twice, one
// after the other, and checks the second's usage: cached tokens derived from
// token ids, text, chat messages or mock_hash_ids, reported as vLLM's
// prompt_tokens_details only with EnablePromptTokensDetails.
func TestHTTPPrefixCaching(t *testing.T) {
	ids := func(from, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, from+i)
		}
		return "[" + b.String() + "]"
	}
	text := strings.Repeat("abcd", 40) // 40 tokens
	sys := strings.Repeat("s", 200)
	chat := func(user string) string {
		return `{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + user + `"}],"max_tokens":2}`
	}
	tests := []struct {
		name          string
		chat          bool
		caching, info bool
		first, second string
		wantStatus    int
		wantUsage     string // the second response's usage
	}{
		{name: "token ids", caching: true, info: true,
			first:     `{"prompt":` + ids(0, 40) + `,"max_tokens":2}`,
			second:    `{"prompt":` + ids(0, 40) + `,"max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}`},
		{name: "token ids differing in the second block", caching: true, info: true,
			first:     `{"prompt":` + ids(0, 40) + `,"max_tokens":2}`,
			second:    `{"prompt":` + strings.TrimSuffix(ids(0, 20), "]") + "," + strings.TrimPrefix(ids(100, 20), "[") + `,"max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":16}}`},
		{name: "text", caching: true, info: true,
			first:     `{"prompt":"` + text + `","max_tokens":2}`,
			second:    `{"prompt":"` + text + `","max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}`},
		{name: "no hit is null", caching: true, info: true,
			first:     `{"prompt":"` + text + `","max_tokens":2}`,
			second:    `{"prompt":"x` + text + `","max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":41,"total_tokens":43,"completion_tokens":2,"prompt_tokens_details":null}`},
		// 16-byte headers and the system prompt: 58 shared tokens, 3 blocks.
		{name: "chat with a shared system prompt", chat: true, caching: true, info: true,
			first:     chat(strings.Repeat("u", 100)),
			second:    chat(strings.Repeat("v", 100)),
			wantUsage: `"usage":{"prompt_tokens":86,"total_tokens":88,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":48}}`},
		{name: "mock_hash_ids", caching: true, info: true,
			first:     `{"prompt":"a","mock_prompt_tokens":400,"mock_hash_ids":[7],"max_tokens":2}`,
			second:    `{"prompt":"b","mock_prompt_tokens":400,"mock_hash_ids":[7],"max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":400,"total_tokens":402,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":384}}`},
		{name: "mock_prompt_tokens past the text are the request's own", caching: true, info: true,
			first:     `{"prompt":"` + text + `","mock_prompt_tokens":100,"max_tokens":2}`,
			second:    `{"prompt":"` + text + `","mock_prompt_tokens":100,"max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":100,"total_tokens":102,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}`},
		{name: "without --enable-prompt-tokens-details", caching: true, info: false,
			first:     `{"prompt":` + ids(0, 40) + `,"max_tokens":2}`,
			second:    `{"prompt":` + ids(0, 40) + `,"max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":null}`},
		{name: "without prefix caching", caching: false, info: true,
			first:     `{"prompt":` + ids(0, 40) + `,"max_tokens":2}`,
			second:    `{"prompt":` + ids(0, 40) + `,"mock_hash_ids":"ignored","max_tokens":2}`,
			wantUsage: `"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":null}`},
		{name: "bad mock_hash_ids", caching: true, info: true,
			first:      `{"prompt":"a","max_tokens":2}`,
			second:     `{"prompt":"a","mock_hash_ids":[-1],"max_tokens":2}`,
			wantStatus: 400,
			wantUsage:  `"message":"mock_hash_ids must be a list of non-negative integers."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := TestConfig()
			cfg.EnablePrefixCaching = tt.caching
			_, hs := newTestServer(t, cfg, ServerOptions{EnablePromptTokensDetails: tt.info})
			path := "/v1/completions"
			if tt.chat {
				path = "/v1/chat/completions"
			}
			if code, _, body := post(t, hs.URL+path, "application/json", tt.first); code != 200 ||
				!strings.Contains(body, `"prompt_tokens_details":null`) {
				t.Fatalf("first: %d %s", code, body)
			}
			code, _, body := post(t, hs.URL+path, "application/json", tt.second)
			if want := max(tt.wantStatus, 200); code != want || !strings.Contains(body, tt.wantUsage) {
				t.Fatalf("second: %d %s\nwant %d and %s", code, body, want, tt.wantUsage)
			}
		})
	}
}

// TestHTTPPrefixCachingStream: the include_usage chunk carries
// prompt_tokens_details only when tokens were cached; continuous usage
// never does.
func TestHTTPPrefixCachingStream(t *testing.T) {
	cfg := TestConfig()
	cfg.EnablePrefixCaching = true
	_, hs := newTestServer(t, cfg, ServerOptions{EnablePromptTokensDetails: true})
	body := `{"prompt":"` + strings.Repeat("abcd", 40) + `","max_tokens":2,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`
	for i, want := range []string{
		`"choices":[],"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2}}`,
		`"choices":[],"usage":{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}}`,
	} {
		resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var events []string
		r := bufio.NewReader(resp.Body)
		for {
			ev := readEvent(t, r)
			events = append(events, ev)
			if ev == "[DONE]" {
				break
			}
		}
		resp.Body.Close()
		usage := events[len(events)-2]
		if !strings.Contains(usage, want) {
			t.Fatalf("request %d: usage chunk %s, want %s", i, usage, want)
		}
		for _, ev := range events[:len(events)-2] {
			if strings.Contains(ev, "prompt_tokens_details") {
				t.Fatalf("request %d: continuous usage with details: %s", i, ev)
			}
		}
	}
}

// TestMetricsPrefixCaching: the prefix-cache counters appear with caching
// on, and cache_config_info's enable_prefix_caching follows the config.
func TestMetricsPrefixCaching(t *testing.T) {
	for _, caching := range []bool{false, true} {
		t.Run(fmt.Sprint(caching), func(t *testing.T) {
			cfg := TestConfig()
			cfg.EnablePrefixCaching = caching
			_, hs := newTestServer(t, cfg, ServerOptions{})
			req := `{"prompt":"` + strings.Repeat("abcd", 40) + `","max_tokens":2}`
			post(t, hs.URL+"/v1/completions", "application/json", req)
			post(t, hs.URL+"/v1/completions", "application/json", req)
			resp, err := http.Get(hs.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			bufio.NewReader(resp.Body).WriteTo(&b)
			m := b.String()
			lines := []string{
				"# TYPE vllm:prefix_cache_queries_total counter\n",
				`vllm:prefix_cache_queries_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 80.0` + "\n",
				"# TYPE vllm:prefix_cache_hits_total counter\n",
				`vllm:prefix_cache_hits_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 32.0` + "\n",
			}
			for _, l := range lines {
				if strings.Contains(m, l) != caching {
					t.Errorf("metrics contain %q: %v, want %v", l, !caching, caching)
				}
			}
			flag := map[bool]string{false: "False", true: "True"}[caching]
			if !strings.Contains(m, `enable_prefix_caching="`+flag+`"`) {
				t.Errorf("cache_config_info without enable_prefix_caching=%q", flag)
			}
		})
	}
}

// FuzzParseRequestCaching: with prefix caching the parser also derives
// every prompt's token identities; it must not panic, and an accepted
// request has one identity source per prompt that names its tokens
// deterministically.
func FuzzParseRequestCaching(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"x"}]}]}`,
		`{"prompt":[[1,2],[3]],"n":3,"max_tokens":5}`, `{"prompt":["ab","cd"]}`, `{"prompt":[5,6,7]}`,
		`{"prompt":"x","mock_hash_ids":[1,2],"mock_prompt_tokens":100}`, `{"prompt":"x","mock_hash_ids":[1.5]}`,
		`{"prompt":"x","mock_hash_ids":{}}`, `{"messages":[{"content":null}],"mock_hash_ids":null}`,
	} {
		f.Add(true, s)
		f.Add(false, s)
	}
	o := parseOptions{model: "m", maxModelLen: 256, policy: Priority, caching: true}
	f.Fuzz(func(t *testing.T, chat bool, body string) {
		req, err := parseRequest(chat, "application/json", []byte(body), o)
		if err != nil {
			if err.status != 400 && err.status != 404 {
				t.Fatalf("status %d", err.status)
			}
			return
		}
		if len(req.idents) != len(req.prompts) {
			t.Fatalf("%d identity sources for %d prompts", len(req.idents), len(req.prompts))
		}
		again, _ := parseRequest(chat, "application/json", []byte(body), o)
		for i, id := range req.idents {
			if id == nil {
				t.Fatalf("prompt %d has no identity source", i)
			}
			for tok := range req.prompts[i] {
				a, okA := id(tok)
				b, okB := again.idents[i](tok)
				if a != b || okA != okB {
					t.Fatalf("prompt %d token %d: identities differ between parses", i, tok)
				}
			}
		}
	})
}
