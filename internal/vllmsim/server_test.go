package vllmsim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newTestServer serves cfg 1000× faster than real time, with "created"
// fixed for the recordings.
func newTestServer(t *testing.T, cfg EngineConfig, opts ServerOptions) (*Server, *httptest.Server) {
	t.Helper()
	if opts.TimeScale == 0 {
		opts.TimeScale = 0.001
	}
	srv := NewServer(cfg, opts)
	srv.created = func() int64 { return 1747650000 }
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return srv, hs
}

func post(t *testing.T, url, contentType, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(url, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// tryPost posts a JSON body; it is safe in any goroutine.
func tryPost(url, body string) (string, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

// TestGolden compares bodies and streams with the recordings in
// testdata/vllm, written from vLLM's shapes (testdata/vllm/README.md).
func TestGolden(t *testing.T) {
	const hello = `"messages":[{"role":"user","content":"Hello there!"}]`
	tests := []struct {
		golden      string
		path        string
		contentType string
		body        string
		status      int
	}{
		{"chat.json", "/v1/chat/completions", "", `{"model":"meta-llama/Llama-3.1-8B-Instruct",` + hello + `,"mock_eos_after":3}`, 200},
		{"chat_n2.json", "/v1/chat/completions", "", `{` + hello + `,"n":2,"max_tokens":1}`, 200},
		{"completions.json", "/v1/completions", "", `{"prompt":"Say hi","max_tokens":2}`, 200},
		{"chat_stream.sse", "/v1/chat/completions", "", `{` + hello + `,"stream":true,"mock_eos_after":2}`, 200},
		{"chat_stream_usage.sse", "/v1/chat/completions", "", `{` + hello + `,"stream":true,"stream_options":{"include_usage":true},"mock_eos_after":2}`, 200},
		{"chat_stream_continuous.sse", "/v1/chat/completions", "", `{` + hello + `,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"mock_eos_after":2}`, 200},
		{"completions_stream_usage.sse", "/v1/completions", "", `{"prompt":[1,2,3,4,5],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`, 200},
		{"error_context_too_long.json", "/v1/completions", "", `{"prompt":"x","mock_prompt_tokens":9000,"max_tokens":100}`, 400},
		{"error_unknown_model.json", "/v1/chat/completions", "", `{"model":"gpt-4o",` + hello + `}`, 404},
		{"error_stream_options.json", "/v1/chat/completions", "", `{` + hello + `,"stream_options":{"include_usage":true}}`, 400},
		{"error_content_type.json", "/v1/chat/completions", "text/plain", `{` + hello + `}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			_, hs := newTestServer(t, DefaultConfig(), ServerOptions{})
			ct := tt.contentType
			if ct == "" {
				ct = "application/json"
			}
			status, hdr, got := post(t, hs.URL+tt.path, ct, tt.body)
			want, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vllm", tt.golden))
			if err != nil {
				t.Fatal(err)
			}
			if status != tt.status {
				t.Errorf("status = %d, want %d", status, tt.status)
			}
			wantCT := "application/json"
			if strings.HasSuffix(tt.golden, ".sse") {
				wantCT = "text/event-stream; charset=utf-8"
			}
			if hdr.Get("Content-Type") != wantCT {
				t.Errorf("Content-Type = %q, want %q", hdr.Get("Content-Type"), wantCT)
			}
			if strings.TrimRight(got, "\n") != strings.TrimRight(string(want), "\n") {
				t.Errorf("body =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestPriorityField(t *testing.T) {
	tests := []struct {
		value  string
		status int
		want   int64
	}{
		{`5`, 200, 5},
		{`"5"`, 200, 5},
		{`5.0`, 200, 5},
		{`-3`, 200, -3},
		{`9223372036854775807`, 200, 9223372036854775807},
		{`"-9223372036854775808"`, 200, -9223372036854775808},
		{`null`, 400, 0},
		{`1.5`, 400, 0},
		{`"high"`, 400, 0},
		{`"1.5"`, 400, 0},
		{`9223372036854775808`, 400, 0},
		{`"9223372036854775808"`, 400, 0},
		{`1e19`, 400, 0},
		{`[]`, 400, 0},
		{`{}`, 400, 0},
	}
	o := parseOptions{model: "m", maxModelLen: 100, policy: Priority}
	for _, tt := range tests {
		req, err := parseRequest(false, "application/json", []byte(`{"prompt":"hi","priority":`+tt.value+`}`), o)
		switch {
		case tt.status == 200 && (err != nil || req.priority != tt.want):
			t.Errorf("priority %s: got %+v, %v; want %d", tt.value, req, err, tt.want)
		case tt.status != 200 && (err == nil || err.status != tt.status || err.typ != "Bad Request"):
			t.Errorf("priority %s: error %+v, want %d Bad Request", tt.value, err, tt.status)
		}
	}
}

func TestParseRequest(t *testing.T) {
	o := parseOptions{model: "m", maxModelLen: 100, policy: FCFS}
	tests := []struct {
		name    string
		chat    bool
		body    string
		status  int
		prompts []int
		maxOut  []int
	}{
		{"chat-estimate", true, `{"messages":[{"role":"system","content":"12345678"},{"role":"user","content":[{"type":"text","text":"1234"}]}]}`, 0, []int{3 + 3 + 8}, []int{86}},
		{"max-completion-wins", true, `{"messages":[],"max_tokens":5,"max_completion_tokens":7}`, 0, []int{3}, []int{7}},
		{"capped-by-model-len", false, `{"prompt":[1,2,3],"max_tokens":1000}`, 0, []int{3}, []int{97}},
		{"completions-default-16", false, `{"prompt":"abcdefgh"}`, 0, []int{2}, []int{16}},
		{"prompt-list", false, `{"prompt":["abcd","abcdefgh"],"n":2}`, 0, []int{1, 2}, []int{16, 16}},
		{"token-lists", false, `{"prompt":[[1],[1,2]]}`, 0, []int{1, 2}, []int{16, 16}},
		{"mock-prompt", false, `{"prompt":"a","mock_prompt_tokens":40,"max_tokens":"8"}`, 0, []int{40}, []int{8}},
		{"not-json", false, `{"prompt":`, 400, nil, nil},
		{"array-body", false, `[1]`, 400, nil, nil},
		{"trailing", false, `{"prompt":"a"} x`, 400, nil, nil},
		{"no-prompt", false, `{}`, 400, nil, nil},
		{"empty-prompt", false, `{"prompt":""}`, 400, nil, nil},
		{"no-messages", true, `{}`, 400, nil, nil},
		{"n-zero", false, `{"prompt":"a","n":0}`, 400, nil, nil},
		{"max-tokens-zero", false, `{"prompt":"a","max_tokens":0}`, 400, nil, nil},
		{"too-long", false, `{"prompt":"a","mock_prompt_tokens":100}`, 400, nil, nil},
		{"model-404", false, `{"prompt":"a","model":"x"}`, 404, nil, nil},
		{"stream-string", false, `{"prompt":"a","stream":"yes"}`, 0, []int{1}, []int{16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseRequest(tt.chat, "application/json; charset=utf-8", []byte(tt.body), o)
			if tt.status != 0 {
				if err == nil || err.status != tt.status {
					t.Fatalf("parseRequest(%s) = %+v, %v; want status %d", tt.body, req, err, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseRequest(%s) error %v", tt.body, err)
			}
			if !equalInts(req.prompts, tt.prompts) || !equalInts(req.maxOut, tt.maxOut) {
				t.Errorf("parseRequest(%s) prompts %v maxOut %v, want %v %v", tt.body, req.prompts, req.maxOut, tt.prompts, tt.maxOut)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRequestID(t *testing.T) {
	srv, hs := newTestServer(t, TestConfig(), ServerOptions{})
	req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[],"max_tokens":1,"request_id":"from-body"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "abc")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(b), `{"id":"chatcmpl-abc",`) {
		t.Errorf("body %s, want id chatcmpl-abc", b)
	}
	if _, _, body := post(t, hs.URL+"/v1/completions", "application/json", `{"prompt":"a","max_tokens":1,"request_id":"b1"}`); !strings.HasPrefix(body, `{"id":"cmpl-b1",`) {
		t.Errorf("body %s, want id cmpl-b1", body)
	}
	recs := srv.Records()
	if len(recs) != 2 || recs[0].ID != "chatcmpl-abc" || recs[1].ID != "cmpl-b1" {
		t.Errorf("records %+v", recs)
	}
}

func TestLegacyV0PriorityError(t *testing.T) {
	cfg := TestConfig()
	cfg.Policy = FCFS
	_, hs := newTestServer(t, cfg, ServerOptions{LegacyV0PriorityError: true})
	status, _, body := post(t, hs.URL+"/v1/completions", "application/json", `{"prompt":"a","priority":10}`)
	if status != 400 || !strings.Contains(body, "Got priority 10 but Priority scheduling is not enabled.") {
		t.Errorf("legacy: %d %s", status, body)
	}
	_, hs = newTestServer(t, cfg, ServerOptions{})
	if status, _, body := post(t, hs.URL+"/v1/completions", "application/json", `{"prompt":"a","priority":10,"max_tokens":1}`); status != 200 {
		t.Errorf("V1 fcfs must ignore priority: %d %s", status, body)
	}
}

func TestEndpoints(t *testing.T) {
	srv, hs := newTestServer(t, TestConfig(), ServerOptions{Model: "m", Replicas: 2, Debug: true})
	get := func(path string) (int, string) {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get("/health"); st != 200 {
		t.Errorf("/health = %d", st)
	}
	if st, body := get("/v1/models"); st != 200 || !strings.Contains(body, `"id":"m"`) || !strings.Contains(body, `"max_model_len":512`) {
		t.Errorf("/v1/models = %d %s", st, body)
	}
	if st, _ := get("/v1/chat/completions"); st != 405 {
		t.Errorf("GET /v1/chat/completions = %d, want 405", st)
	}
	if st, _ := get("/nope"); st != 404 {
		t.Errorf("/nope = %d, want 404", st)
	}
	if st, _, body := post(t, hs.URL+"/v1/completions", "application/json", `{"model":"m","prompt":"hi","max_tokens":3,"priority":-2}`); st != 200 {
		t.Fatalf("completion: %d %s", st, body)
	}
	st, body := get("/metrics")
	for _, want := range []string{
		`vllm:num_requests_running{model_name="m",engine="0"} 0.0`,
		`vllm:num_requests_waiting{model_name="m",engine="1"} 0.0`,
		`vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.0`,
		`# TYPE vllm:num_preemptions_total counter`,
		`vllm:prompt_tokens_total{model_name="m",engine="0"} 1.0`,
		`vllm:generation_tokens_total{model_name="m",engine="0"} 3.0`,
		`vllm:request_success_total{model_name="m",engine="0",finished_reason="length"} 1.0`,
		`vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="0.001"}`,
		`vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="2560.0"} 1.0`,
		`vllm:time_to_first_token_seconds_count{model_name="m",engine="0"} 1.0`,
		`vllm:e2e_request_latency_seconds_bucket{model_name="m",engine="0",le="7680.0"} 1.0`,
		`vllm:request_queue_time_seconds_count{model_name="m",engine="0"} 1.0`,
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="False",engine="0",gpu_memory_utilization="0.92",kv_cache_max_concurrency="2.0",kv_cache_size_tokens="1024",num_gpu_blocks="64"} 1.0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if st != 200 {
		t.Errorf("/metrics = %d", st)
	}
	st, body = get("/debug/records")
	var recs []Record
	if err := json.Unmarshal([]byte(body), &recs); st != 200 || err != nil || len(recs) != 1 || recs[0].Priority != -2 || recs[0].CompletionTokens != 3 {
		t.Errorf("/debug/records = %d %s (%v)", st, body, err)
	}
	if got := srv.Records(); len(got) != 1 || got[0].ID != recs[0].ID {
		t.Errorf("Records() = %+v", got)
	}
	req, _ := http.NewRequest("POST", hs.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("endpoint-load-metrics-format", "TEXT")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("endpoint-load-metrics"), "TEXT named_metrics.kv_cache_usage_perc=0.0, named_metrics.num_requests_waiting=0.0"; got != want {
		t.Errorf("endpoint-load-metrics = %q, want %q", got, want)
	}
	if st, body := get("/load"); st != 200 || body != `{"server_load":0}` {
		t.Errorf("/load = %d %s", st, body)
	}
}

// readEvent reads one SSE data line.
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			return strings.TrimSpace(d)
		}
	}
}

// TestStreamingIsIncremental: the first token arrives while the request is
// still generating, and every token is its own event.
func TestStreamingIsIncremental(t *testing.T) {
	srv, hs := newTestServer(t, TestConfig(), ServerOptions{TimeScale: 0.05}) // 0.3 ms per decode step
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hi","max_tokens":400,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first := readEvent(t, r)
	if !strings.Contains(first, `"text":" tok"`) {
		t.Fatalf("first event %s", first)
	}
	if n := len(srv.Records()); n != 0 {
		t.Errorf("the request finished (%d records) before the client read its first token", n)
	}
	events := 1
	for {
		ev := readEvent(t, r)
		if ev == "[DONE]" {
			break
		}
		events++
	}
	if events != 400 {
		t.Errorf("%d token events, want 400", events)
	}
}

// TestDisconnectAborts: a client that goes away aborts its request, which
// frees its blocks and counts as finished_reason abort. The engine runs at
// most 50 steps, far fewer than the request's 500 tokens, so the request
// is still running when the client goes away however slow the machine.
func TestDisconnectAborts(t *testing.T) {
	for _, stream := range []bool{true, false} {
		name := "stream"
		if !stream {
			name = "non-stream"
		}
		t.Run(name, func(t *testing.T) {
			var steps atomic.Int64
			stop := make(chan struct{})
			gate := func() {
				if steps.Add(1) > 50 {
					<-stop
				}
			}
			srv := newServer(TestConfig(), ServerOptions{TimeScale: 0.05}, gate)
			hs := httptest.NewServer(srv)
			t.Cleanup(func() {
				close(stop)
				hs.Close()
				srv.Close()
			})
			ctx, cancel := context.WithCancel(context.Background())
			body := `{"prompt":"hi","max_tokens":500,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					r := bufio.NewReader(resp.Body)
					r.ReadString('\n')
					cancel()
					resp.Body.Close()
				}
			}()
			if !stream {
				// Wait until the engine runs it, then hang up.
				waitFor(t, func() bool { return srv.Running(0) == 1 })
				cancel()
			}
			<-done
			waitFor(t, func() bool { return len(srv.Records()) == 1 })
			rec := srv.Records()[0]
			if rec.FinishReason != FinishAbort || rec.CompletionTokens >= 500 {
				t.Errorf("record %+v, want an abort", rec)
			}
			if srv.Running(0) != 0 || srv.KVBlocksUsed(0) != 0 {
				t.Errorf("after abort: %d running, %d blocks used", srv.Running(0), srv.KVBlocksUsed(0))
			}
		})
	}
}

// waitFor polls cond until it holds, however long that takes; the
// 2-minute deadline only stops a hung test (a guard, not a speed check).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHTTPPriorityOrder: under the real clock, a high-priority request
// that arrives while the slots are full waits (no preemption) and is then
// admitted ahead of the low-priority requests queued before it. The
// engine is held between steps (the server's gate) while the requests
// arrive, so the order of arrivals and steps is the test's, not the
// clock's; the low requests have different lengths, so the slots free
// one at a time.
func TestHTTPPriorityOrder(t *testing.T) {
	var free atomic.Bool
	parked, step, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	gate := func() {
		if free.Load() {
			return
		}
		select {
		case parked <- struct{}{}:
			select {
			case <-step:
			case <-stop:
			}
		case <-stop:
		}
	}
	srv := newServer(TestConfig(), ServerOptions{TimeScale: 0.02}, gate)
	srv.created = func() int64 { return 1747650000 }
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		close(stop)
		hs.Close()
		srv.Close()
	})
	done := make(chan error, 7)
	send := func(body string) {
		go func() {
			_, err := tryPost(hs.URL+"/v1/completions", body)
			done <- err
		}()
	}
	// Six low-priority requests, one after the other (arrival order), while
	// the engine waits at its gate.
	for i := range 6 {
		send(fmt.Sprintf(`{"prompt":"low","max_tokens":%d,"priority":10,"request_id":"low%d"}`, 100+10*i, i))
		until(func() bool { return srv.Waiting(0) == i+1 })
	}
	// Step until four run and two wait (one step: four slots).
	for {
		<-parked
		if srv.Running(0) == 4 && srv.Waiting(0) == 2 {
			break
		}
		step <- struct{}{}
	}
	send(`{"prompt":"high","max_tokens":5,"priority":-5,"request_id":"high"}`)
	until(func() bool { return srv.Waiting(0) == 3 })
	free.Store(true)
	step <- struct{}{}
	for range 7 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	recs := srv.Records()
	var high Record
	for _, r := range recs {
		if r.ID == "cmpl-high" {
			high = r
		}
	}
	queued := 0
	for _, r := range recs {
		if r.Preemptions != 0 {
			t.Errorf("%s preempted", r.ID)
		}
		if r.ID == high.ID || !r.Admitted.After(high.Arrival) {
			continue
		}
		queued++
		if !r.Admitted.After(high.Admitted) {
			t.Errorf("%s (priority 10) admitted at %v, not after the high-priority request at %v", r.ID, r.Admitted, high.Admitted)
		}
	}
	if queued != 2 || high.Priority != -5 || high.CompletionTokens != 5 {
		t.Errorf("high %+v; %d low requests admitted after it arrived, want 2", high, queued)
	}
}

// until polls cond until it holds (the test's own timeout bounds it).
func until(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

// TestReplicasBalance: concurrent requests spread over the replicas.
func TestReplicasBalance(t *testing.T) {
	srv, hs := newTestServer(t, TestConfig(), ServerOptions{Replicas: 2, TimeScale: 0.01})
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			if _, err := tryPost(hs.URL+"/v1/completions", `{"prompt":"hi","max_tokens":200}`); err != nil {
				t.Error(err)
			}
		}()
	}
	for range 4 {
		<-done
	}
	per := map[int]int{}
	for _, r := range srv.Records() {
		per[r.Replica]++
	}
	if per[0] != 2 || per[1] != 2 {
		t.Errorf("records per replica = %v, want 2 and 2", per)
	}
}

// TestHTTPUsageExcludesRecompute: under preemption the usage counts each
// output token once.
func TestHTTPUsageExcludesRecompute(t *testing.T) {
	srv, hs := newTestServer(t, tightConfig(Priority, 20), ServerOptions{TimeScale: 0.001})
	type result struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	done := make(chan result)
	for i := range 6 {
		go func() {
			body, err := tryPost(hs.URL+"/v1/completions",
				`{"prompt":"x","mock_prompt_tokens":60,"max_tokens":60,"priority":`+string(rune('0'+i%3))+`}`)
			var r result
			if err == nil {
				err = json.Unmarshal([]byte(body), &r)
			}
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
	}
	for range 6 {
		if r := <-done; r.Usage.CompletionTokens != 60 {
			t.Errorf("completion_tokens = %d, want 60", r.Usage.CompletionTokens)
		}
	}
	pre := 0
	for _, r := range srv.Records() {
		pre += r.Preemptions
	}
	if pre == 0 {
		t.Errorf("no preemption happened")
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"priority":"5","stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":[[1,2],[3]],"n":3,"max_tokens":5.0,"mock_eos_after":2}`,
		`{"prompt":"x","priority":1.5}`, `{"model":"y","prompt":"x"}`, `[]`, `nul`, `{"prompt":"x","mock_prompt_tokens":1e300}`,
	} {
		f.Add(true, s)
		f.Add(false, s)
	}
	o := parseOptions{model: "m", maxModelLen: 256, policy: Priority}
	f.Fuzz(func(t *testing.T, chat bool, body string) {
		req, err := parseRequest(chat, "application/json", []byte(body), o)
		if err != nil {
			if err.status != 400 && err.status != 404 {
				t.Fatalf("status %d", err.status)
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal(err.body(), &e) != nil || e.Error.Code != err.status || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("bad error body %s", err.body())
			}
			return
		}
		if req.n < 1 || len(req.prompts) == 0 || len(req.prompts) != len(req.maxOut) {
			t.Fatalf("accepted %+v", req)
		}
		for i, p := range req.prompts {
			if p < 1 || p >= o.maxModelLen || req.maxOut[i] < 1 || p+req.maxOut[i] > o.maxModelLen {
				t.Fatalf("accepted prompt %d with output %d", p, req.maxOut[i])
			}
		}
	})
}

// TestServedModelNames: a server with several served names answers each of
// them and echoes the name asked for, refuses others with vLLM's 404, and
// lists every name; "*" answers to any name.
func TestServedModelNames(t *testing.T) {
	_, hs := newTestServer(t, TestConfig(), ServerOptions{Model: "a", Models: []string{"b", "a"}})
	for _, tc := range []struct {
		model  string
		status int
	}{{"a", 200}, {"b", 200}, {"c", 404}} {
		st, _, body := post(t, hs.URL+"/v1/completions", "application/json", `{"model":"`+tc.model+`","prompt":"hi","max_tokens":1}`)
		if st != tc.status {
			t.Errorf("model %q: status %d, want %d: %s", tc.model, st, tc.status, body)
			continue
		}
		if st == 200 && !strings.Contains(body, `"model":"`+tc.model+`"`) {
			t.Errorf("model %q: response does not echo the model: %s", tc.model, body)
		}
		if st == 404 && !strings.Contains(body, "The model `c` does not exist.") {
			t.Errorf("model %q: 404 body %s", tc.model, body)
		}
	}
	resp, err := http.Get(hs.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if got := strings.Count(string(b), `"object":"model"`); got != 2 || !strings.Contains(string(b), `"id":"b"`) {
		t.Errorf("/v1/models lists %d models, want a and b once each: %s", got, b)
	}
	_, wild := newTestServer(t, TestConfig(), ServerOptions{Model: "a", Models: []string{"*"}})
	if st, _, body := post(t, wild.URL+"/v1/completions", "application/json", `{"model":"zz","prompt":"hi","max_tokens":1}`); st != 200 || !strings.Contains(body, `"model":"zz"`) {
		t.Errorf("wildcard server, model zz: %d %s", st, body)
	}
}

// SetActive scales the server's engines: one out of service gets no new
// request and leaves /metrics (its cache_config_info series with it).
func TestServerSetActive(t *testing.T) {
	srv, hs := newTestServer(t, TestConfig(), ServerOptions{Model: "m", Replicas: 3})
	metrics := func() string {
		resp, err := http.Get(hs.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if n := strings.Count(metrics(), "vllm:cache_config_info{"); n != 3 {
		t.Fatalf("%d cache_config_info series with 3 engines, want 3", n)
	}
	if prev := srv.SetActive(1); prev != 3 || srv.Active() != 1 {
		t.Fatalf("SetActive(1) = %d, Active %d", prev, srv.Active())
	}
	if n := strings.Count(metrics(), "vllm:cache_config_info{"); n != 1 {
		t.Fatalf("%d cache_config_info series with 1 engine in service, want 1", n)
	}
	for range 4 {
		if st, _, body := post(t, hs.URL+"/v1/completions", "application/json", `{"model":"m","prompt":"hi","max_tokens":2}`); st != 200 {
			t.Fatalf("completion: %d %s", st, body)
		}
	}
	for _, r := range srv.Records() {
		if r.Replica != 0 {
			t.Errorf("a request went to replica %d, out of service", r.Replica)
		}
	}
	if srv.SetActive(9); srv.Active() != 3 {
		t.Errorf("SetActive(9): Active %d, want 3 (clamped)", srv.Active())
	}
}
