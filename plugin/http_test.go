package plugin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/tidwall/gjson"
)

// The scenarios below run the proxy path over real HTTP: a client, the
// host's Handler (plugin.wasm on several VMs) and the vLLM simulator's
// http.Handler, each behind httptest.

// httpConfig schedules the simulator's model in one pool of capacity 4.
var httpConfig = `{
  "tick": "100ms",
  "default_max_tokens": 32,
  "unknown_team": "borrow",
  "max_body_bytes": 65536,
  "pools": [{"name": "llama", "capacity": 4, "models": ["` + vllmsim.DefaultModel + `"],
    "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}, "r": {"share": 0.25}}}]
}`

type proxyEnv struct {
	h     *host.Host
	url   string
	sim   *vllmsim.Server
	mu    sync.Mutex
	recs  []vllmsim.Record
	httpc *http.Client
}

func (e *proxyEnv) records() []vllmsim.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]vllmsim.Record(nil), e.recs...)
}

// startProxy starts the simulator (time scale ts), the plugin on vms VMs
// under the real clock, and the proxy.
func startProxy(t *testing.T, cfg string, vms int, ts float64) *proxyEnv {
	t.Helper()
	return startProxyWith(t, cfg, vms, ts, nil)
}

// startProxyWith is startProxy with the simulator's configuration and
// options changed by engine (nil: none).
func startProxyWith(t *testing.T, cfg string, vms int, ts float64, engine func(*vllmsim.EngineConfig, *vllmsim.ServerOptions)) *proxyEnv {
	t.Helper()
	e := &proxyEnv{}
	ec := vllmsim.TestConfig()
	ec.MaxNumSeqs = 64
	ec.NumBlocks = 4096
	opts := vllmsim.ServerOptions{TimeScale: ts, OnRecord: func(r vllmsim.Record) {
		e.mu.Lock()
		e.recs = append(e.recs, r)
		e.mu.Unlock()
	}}
	if engine != nil {
		engine(&ec, &opts)
	}
	e.sim = vllmsim.NewServer(ec, opts)
	t.Cleanup(e.sim.Close)
	up := httptest.NewServer(e.sim)
	t.Cleanup(up.Close)
	h, err := compiled(t).Start(context.Background(), host.Options{
		Profile: hostProfile,
		VMs:     vms, PluginName: pluginName, VMID: fmt.Sprintf("%s-%p", t.Name(), t), PluginConfig: []byte(cfg),
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	noHostErrors(t, h)
	e.h = h
	u, _ := url.Parse(up.URL)
	px := httptest.NewServer(proxy.New(h, u))
	t.Cleanup(px.Close)
	e.url = px.URL
	e.httpc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return e
}

// post sends body to path as team (none if ""), with more headers.
func (e *proxyEnv) post(ctx context.Context, t *testing.T, path, team string, body string, headers ...[2]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	if team != "" {
		req.Header.Set("x-team", team)
	}
	for _, h := range headers {
		req.Header.Set(h[0], h[1])
	}
	resp, err := e.httpc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

// waitIdle waits until no request is in flight in pool (the host ends
// streams of disconnected clients asynchronously), however long that
// takes, and fails if that does not happen within 2 minutes (a guard
// against a hang, not a speed check).
func (e *proxyEnv) waitIdle(t *testing.T, pool string) {
	t.Helper()
	hang := time.Now().Add(2 * time.Minute)
	for {
		busy := 0
		for _, s := range teamStats(t, e.h, pool) {
			busy += s.InFlight + s.Phantoms
		}
		if busy == 0 {
			return
		}
		if time.Now().After(hang) {
			checkIdle(t, e.h, pool)
			t.FailNow()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func completions(ids int, maxTokens int, stream bool, extra string) string {
	var b strings.Builder
	for i := 0; i < ids; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(100 + i))
	}
	return fmt.Sprintf(`{"model":%q,"prompt":[%s],"max_tokens":%d,"stream":%v%s}`, vllmsim.DefaultModel, b.String(), maxTokens, stream, extra)
}

// TestHTTPPriorities: within-share requests get 0 (interactive) / 1
// (batch), borrowers 10 and up in level-fairshare order, and vLLM receives
// exactly the priority the response header reports.
func TestHTTPPriorities(t *testing.T) {
	e := startProxy(t, httpConfig, 3, 1)
	ctx := context.Background()
	var open []*http.Response
	send := func(team, class string, maxTokens int) int {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/completions", strings.NewReader(completions(8, maxTokens, true, "")))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("x-team", team)
		if class != "" {
			req.Header.Set("x-request-class", class)
		}
		resp, err := e.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
		p, err := strconv.Atoi(resp.Header.Get("x-fairshare-priority"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, priority header %q", team, resp.StatusCode, resp.Header.Get("x-fairshare-priority"))
		}
		return p
	}
	// a: 2 slots, b and r: 1 each. The first three streams are long (about
	// 1 to 2.5 s of model time) so that they are still in flight when the
	// next requests arrive.
	if p := send("a", "", 400); p != 0 {
		t.Errorf("a#1 = %d, want 0", p)
	}
	if p := send("a", "batch", 400); p != 1 {
		t.Errorf("a#2 batch = %d, want 1", p)
	}
	if p := send("b", "", 200); p != 0 {
		t.Errorf("b#1 = %d, want 0", p)
	}
	// b borrows; a has used far more for its share, so it borrows later
	// (r, with a share and no usage yet, holds the best level fairshare:
	// rank 0); unknown teams (share 0) come last.
	pb := send("b", "", 2)
	pa := send("a", "", 2)
	pu := send("nobody", "", 2)
	if pb < 10 || pa <= pb || pu < pa {
		t.Errorf("borrowers b %d, a %d, unknown %d; want 10 <= b < a <= unknown", pb, pa, pu)
	}
	if pr := send("r", "", 2); pr != 0 {
		t.Errorf("r#1 = %d, want 0 (its slot is free while others borrow)", pr)
	}
	for i, resp := range open {
		if i >= 3 {
			io.Copy(io.Discard, resp.Body) // short streams: read to the end
		}
		resp.Body.Close() // the long ones disconnect mid-stream
	}
	e.waitIdle(t, "llama")
	// vLLM saw each priority.
	seen := map[int64]int{}
	for _, r := range e.records() {
		seen[r.Priority]++
	}
	for _, p := range []int64{0, 1, int64(pb), int64(pa), int64(pu)} {
		if seen[p] == 0 {
			t.Errorf("vLLM never received priority %d (saw %v)", p, seen)
		}
	}
}

// TestHTTPUsageAccounting runs a mixed load through the proxy: JSON and
// SSE responses, usage asked for or not, clients that disconnect
// mid-stream, requests vLLM refuses, and checks that afterwards nothing is
// in flight and the charged usage is what vLLM reported.
func TestHTTPUsageAccounting(t *testing.T) {
	e := startProxy(t, httpConfig, 3, 0.05)
	type outcome struct {
		aborted  bool
		id       string // X-Request-Id of a client that disconnects
		prompt   int
		seenMin  int // completion tokens the client saw
		refused  bool
		reported float64 // cost of the usage the client received (-1: hidden)
	}
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	teams := []string{"a", "b", "r", "x"}
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			team := teams[i%len(teams)]
			ids := 4 + i%9
			o := outcome{prompt: ids, reported: -1}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			switch i % 6 {
			case 0: // JSON response
				resp := e.post(ctx, t, "/v1/completions", team, completions(ids, 5+i%7, false, ""))
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				u := gjson.GetBytes(b, "usage")
				if resp.StatusCode != 200 || !u.Exists() {
					t.Errorf("JSON response %d %s", resp.StatusCode, b)
				}
				o.reported = float64(u.Get("prompt_tokens").Int() + 2*u.Get("completion_tokens").Int())
			case 1, 2: // SSE, usage hidden (1) or asked for (2)
				extra := ""
				if i%6 == 2 {
					extra = `,"stream_options":{"include_usage":true}`
				}
				resp := e.post(ctx, t, "/v1/completions", team, completions(ids, 3+i%5, true, extra))
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				hasUsage := strings.Contains(string(b), `"usage"`)
				if hasUsage != (extra != "") || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
					t.Errorf("stream (include_usage %v): usage chunk present %v:\n%s", extra != "", hasUsage, b)
				}
			case 3: // chat stream
				body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi %d"}],"max_tokens":4,"stream":true}`, vllmsim.DefaultModel, i)
				resp := e.post(ctx, t, "/v1/chat/completions", team, body)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				o.prompt = -1
			case 4: // client disconnects after two events
				o.aborted = true
				o.id = fmt.Sprint("disconnect-", i)
				resp := e.post(ctx, t, "/v1/completions", team, completions(ids, 480, true, ""), [2]string{"x-request-id", o.id})
				r := bufio.NewReader(resp.Body)
				for o.seenMin < 2 {
					line, err := r.ReadString('\n')
					if err != nil {
						break
					}
					if strings.HasPrefix(line, "data: {") {
						o.seenMin++
					}
				}
				cancel()
				resp.Body.Close()
			case 5: // refused by vLLM: prompt longer than max_model_len
				o.refused = true
				resp := e.post(ctx, t, "/v1/completions", team, completions(600, 4, false, ""))
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 || !gjson.GetBytes(b, "error.message").Exists() {
					t.Errorf("refused request: %d %s", resp.StatusCode, b)
				}
			}
			mu.Lock()
			outs = append(outs, o)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	e.waitIdle(t, "llama")
	// Wait for the engines to record every disconnected client's request
	// (aborted, or finished if the engine was quicker than the client: the
	// sums below take each as it ended, so the machine's speed does not
	// matter); the 2 minutes only stop a hung test.
	ended := func() map[string]vllmsim.Record {
		byID := map[string]vllmsim.Record{}
		for _, r := range e.records() {
			byID[r.ID] = r
		}
		return byID
	}
	var byID map[string]vllmsim.Record
	for hang := time.Now().Add(2 * time.Minute); ; time.Sleep(25 * time.Millisecond) {
		byID = ended()
		missing := 0
		for _, o := range outs {
			if _, ok := byID["cmpl-"+o.id]; o.aborted && !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(hang) {
			t.Fatalf("%d disconnected requests never recorded by vLLM", missing)
		}
	}
	var exact, abortedMax, abortedMin float64
	for _, r := range e.records() {
		c := float64(r.PromptTokens + 2*r.CompletionTokens)
		if r.FinishReason == vllmsim.FinishAbort {
			abortedMax += c
			abortedMin += float64(r.PromptTokens)
			continue
		}
		exact += c
	}
	aborts := 0
	for _, o := range outs {
		if o.aborted && byID["cmpl-"+o.id].FinishReason == vllmsim.FinishAbort {
			abortedMin += 2 * float64(o.seenMin)
			aborts++
		}
	}
	charged := 0.0
	for _, s := range teamStats(t, e.h, "llama") {
		charged += s.Usage
	}
	// half_life 168h: decay over the test is below 1e-5 relative.
	lo, hi := (exact+abortedMin)*(1-1e-4), (exact+abortedMax)*(1+1e-4)
	if charged < lo || charged > hi {
		t.Errorf("charged usage %v, want in [%v, %v] (exact %v, aborted %v..%v)", charged, lo, hi, exact, abortedMin, abortedMax)
	}
	if math.IsNaN(charged) || exact == 0 || abortedMax == 0 {
		t.Errorf("charged %v, exact %v, aborted up to %v: the load did not run", charged, exact, abortedMax)
	}
	t.Logf("charged %.1f; reported by vLLM: %.1f complete + %.1f..%.1f aborted (%d of 8 disconnected clients' requests aborted)",
		charged, exact, abortedMin, abortedMax, aborts)
}

// TestHTTPBadInputs: every bad input gets its JSON error and leaks nothing.
func TestHTTPBadInputs(t *testing.T) {
	e := startProxy(t, strings.Replace(httpConfig, `"unknown_team": "borrow"`, `"unknown_team": "reject"`, 1), 2, 0.05)
	ctx := context.Background()
	big := completions(20000, 1, false, "")
	tests := []struct {
		name, path, team, class, ctype, body string
		status                               int
	}{
		{"no team", "/v1/completions", "", "", "application/json", completions(3, 1, false, ""), 401},
		{"unknown team", "/v1/completions", "zz", "", "application/json", completions(3, 1, false, ""), 403},
		{"bad class", "/v1/completions", "a", "gold", "application/json", completions(3, 1, false, ""), 400},
		{"not an object", "/v1/completions", "a", "", "application/json", `"hello"`, 400},
		{"broken json", "/v1/chat/completions", "a", "", "application/json", `{"model":"x",`, 400},
		{"too large", "/v1/completions", "a", "", "application/json", big, 413},
		{"vllm refuses content type", "/v1/completions", "a", "", "text/plain", completions(3, 1, false, ""), 400},
		{"vllm refuses stream_options without stream", "/v1/completions", "a", "", "application/json", completions(3, 1, false, `,"stream_options":{"include_usage":true}`), 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, "POST", e.url+tt.path, strings.NewReader(tt.body))
			req.Header.Set("content-type", tt.ctype)
			if tt.team != "" {
				req.Header.Set("x-team", tt.team)
			}
			if tt.class != "" {
				req.Header.Set("x-request-class", tt.class)
			}
			resp, err := e.httpc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var v struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if resp.StatusCode != tt.status || json.Unmarshal(b, &v) != nil || v.Error.Message == "" {
				t.Errorf("%s: %d %s, want %d with an OpenAI error", tt.name, resp.StatusCode, b, tt.status)
			}
		})
	}
	e.waitIdle(t, "llama")
	for team, s := range teamStats(t, e.h, "llama") {
		if s.Usage != 0 {
			t.Errorf("team %s charged %v for refused requests", team, s.Usage)
		}
	}
}
