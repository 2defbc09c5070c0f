package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// startRun starts the runner (proxy and simulator, no load) with the
// configuration in file cfg ("" for the embedded demo), as make run does.
// A demo run on it loads for -duration 1s, or until its end condition if
// the test sets one (r.opts.minDone, r.opts.pending), and drains for up to
// 2 minutes, so every request sent ends however slow the machine (a guard
// against a hang, not a speed check).
func startRun(t *testing.T, cfg string, extra ...string) (*runner, *syncBuffer) {
	t.Helper()
	args := []string{"-wasm", pluginFile(t), "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-view", "lines", "-duration", "1s", "-drain", "2m"}
	if cfg != "" {
		args = append(args, "-config", cfg)
	}
	o, err := parseFlags(append(args, extra...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out, stderr syncBuffer
	r, err := start(context.Background(), o, &out, &stderr)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(r.close)
	return r, &out
}

// post sends a non-streaming chat request for model as team through the
// runner's proxy, with pad bytes in the body's "user" field (which vLLM
// does not read), and returns the status and the body.
func post(t *testing.T, r *runner, model, team string, pad int) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"user":%q}`, model, strings.Repeat("x", pad))
	req, _ := http.NewRequest(http.MethodPost, r.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(r.cfg.TeamHeader, team)
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writeConfig writes a configuration to a temporary file.
func writeConfig(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLargeBody: a 6 MiB body gets through the local proxy to the simulator
// with the default max_body_bytes (8 MiB): the proxy's buffer limit follows
// it, not Envoy's 1 MiB default. With max_body_bytes 2 MiB the same body
// gets the plugin's JSON 413, not the proxy's plain-text one.
func TestLargeBody(t *testing.T) {
	const sixMiB = 6 << 20
	r, _ := startRun(t, "")
	status, body := post(t, r, "meta-llama/Llama-3.1-8B-Instruct", "search", sixMiB)
	if status != 200 || gjson.Get(body, "object").String() != "chat.completion" {
		t.Errorf("6 MiB body with max_body_bytes 8 MiB: %d %s", status, truncate(body, 300))
	}
	if r.upstream.finished.Load() != 1 {
		t.Errorf("the simulator finished %d requests, want 1", r.upstream.finished.Load())
	}

	small := writeConfig(t, `{"max_body_bytes": 2097152, "pools": [{"name": "p", "capacity": 4, "models": ["m"], "teams": {"a": {"share": 1}}}]}`)
	r2, out := startRun(t, small)
	if !strings.Contains(out.String(), "buffer limit 2097152 bytes") {
		t.Errorf("banner does not state the 2 MiB buffer limit:\n%s", out.String())
	}
	status, body = post(t, r2, "m", "a", sixMiB)
	if status != 413 || gjson.Get(body, "error.message").String() != "request body too large" {
		t.Errorf("6 MiB body with max_body_bytes 2 MiB: %d %s, want the plugin's JSON 413", status, truncate(body, 300))
	}
}

// TestTwoPools: with testdata/plugin/two-pools.json every model of both
// pools is served (200 through the proxy), each pool by its own engine with
// the pool's capacity as max_num_seqs; the banner lists both pools, the demo
// drives teams in both (its load runs until every team has completed a
// request), and the live view has rows for both.
func TestTwoPools(t *testing.T) {
	r, out := startRun(t, "../../testdata/plugin/two-pools.json")
	for _, tc := range []struct{ model, team, pool string }{
		{"meta-llama/Llama-3.1-8B-Instruct", "search", "llama-8b"},
		{"Qwen/Qwen2.5-32B-Instruct", "eval", "qwen-32b"},
		{"qwen-32b", "research", "qwen-32b"},
	} {
		status, body := post(t, r, tc.model, tc.team, 0)
		if status != 200 || gjson.Get(body, "model").String() != tc.model {
			t.Errorf("model %s: %d %s", tc.model, status, truncate(body, 300))
		}
	}
	if status, body := post(t, r, "nope", "search", 0); status != 404 {
		t.Errorf("unknown model: %d %s, want the simulator's 404", status, truncate(body, 300))
	}
	for _, want := range []string{
		"pool:     llama-8b, capacity 16, models meta-llama/Llama-3.1-8B-Instruct: search 50%, chat 30% weight 2, research 20%\n",
		"pool:     qwen-32b, capacity 8, models Qwen/Qwen2.5-32B-Instruct, qwen-32b: research 60%, eval 40%\n",
		"llama-8b: max_num_seqs 16, 1024 KV blocks × 16 tokens; qwen-32b: max_num_seqs 8, 512 KV blocks × 16 tokens)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
	if len(r.plans) != 2 || r.plans[1].model != "Qwen/Qwen2.5-32B-Instruct" || len(r.plans[1].teams) != 2 {
		t.Fatalf("demo plans = %+v, want both pools, the second with its 2 teams", r.plans)
	}
	r.opts.minDone = 1
	s, text := runDemo(t, r, out)
	for _, want := range []string{
		"demo:     llama-8b: search ", "demo:     qwen-32b: research ",
		"] pool llama-8b: ", "] pool qwen-32b: ",
		"] llama-8b/search ", "] qwen-32b/research ", "] qwen-32b/eval ",
		"plugin at the end: pool llama-8b", "plugin at the end: pool qwen-32b",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, v := range s.Teams {
		if v.Done == 0 || v.Status == nil {
			t.Errorf("team %s: %d requests done, status %v; want requests and the plugin's view", v.label(), v.Done, v.Status)
		}
	}
}

// TestBannerMatchesConfig: every field the banner prints is the parsed
// configuration's (read here with encoding/json, independently of the
// runner): the settings line (with the user header when one is set), one line per pool with its capacity, models,
// teams, shares and weights, and the buffer limit.
func TestBannerMatchesConfig(t *testing.T) {
	type team struct {
		Share  float64 `json:"share"`
		Weight float64 `json:"weight"`
	}
	type pool struct {
		Name     string          `json:"name"`
		Capacity int             `json:"capacity"`
		Models   []string        `json:"models"`
		Teams    json.RawMessage `json:"teams"`
	}
	type config struct {
		TeamHeader   string `json:"team_header"`
		ClassHeader  string `json:"class_header"`
		UserHeader   string `json:"user_header"`
		UnknownTeam  string `json:"unknown_team"`
		HalfLife     string `json:"half_life"`
		MaxBodyBytes int    `json:"max_body_bytes"`
		MaxQueueTime string `json:"max_queue_time"`
		Pools        []pool `json:"pools"`
	}
	for _, file := range []string{"", "../../testdata/plugin/two-pools.json", "../../testdata/plugin/example.json", "../../testdata/plugin/users.json"} {
		raw := demoConfig
		if file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			raw = b
		}
		var c config
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		_, out := startRun(t, file)
		var want []string
		flow := "flow control OFF (max_queue_time 0s: nothing is held)"
		if d, _ := time.ParseDuration(c.MaxQueueTime); d > 0 {
			flow = "flow control on (max_queue_time " + d.String() + ")"
		}
		users := ""
		if c.UserHeader != "" {
			users = ", user header " + c.UserHeader
		}
		want = append(want, fmt.Sprintf("settings: team header %s, class header %s%s, unknown teams %s, half_life %s, max_body_bytes %d, %s\n",
			c.TeamHeader, c.ClassHeader, users, c.UnknownTeam, c.HalfLife, c.MaxBodyBytes, flow))
		for _, p := range c.Pools {
			var teams []string
			gjson.ParseBytes(p.Teams).ForEach(func(k, v gjson.Result) bool {
				var tm team
				json.Unmarshal([]byte(v.Raw), &tm)
				s := fmt.Sprintf("%s %.0f%%", k.String(), 100*tm.Share)
				if tm.Weight != 0 {
					s += fmt.Sprintf(" weight %g", tm.Weight)
				}
				teams = append(teams, s)
				return true
			})
			want = append(want, fmt.Sprintf("pool:     %s, capacity %d, models %s: %s\n", p.Name, p.Capacity, strings.Join(p.Models, ", "), strings.Join(teams, ", ")))
		}
		want = append(want, fmt.Sprintf("buffer limit %d bytes = max_body_bytes)\n", c.MaxBodyBytes))
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: banner lacks %q:\n%s", orDash(file), w, out.String())
			}
		}
		if got := strings.Count(out.String(), "\npool:     "); got != len(c.Pools) {
			t.Errorf("%s: banner lists %d pools, the configuration has %d", orDash(file), got, len(c.Pools))
		}
	}
}
