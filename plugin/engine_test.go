package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/tidwall/gjson"
)

// engineConfig is flowConfig with engine_priority set to mode.
func engineConfig(mode string) string {
	return strings.Replace(flowConfig, `"models":["m"]`, `"models":["m"],"engine_priority":"`+mode+`"`, 1)
}

// noPriority fails unless s forwarded a JSON object without any priority
// member (at any depth of the top level, duplicates included).
func noPriority(t *testing.T, what string, s *host.Stream) {
	t.Helper()
	b := s.ForwardedRequestBody()
	if len(b) == 0 {
		t.Fatalf("%s: nothing forwarded (held %v, local reply %+v)", what, held(s), s.LocalReply())
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: forwarded body is not a JSON object (%v): %s", what, err, b)
	}
	if strings.Contains(string(b), `"priority"`) {
		t.Errorf("%s: forwarded body carries a priority: %s", what, b)
	}
	if m["model"] == nil || m["messages"] == nil {
		t.Errorf("%s: forwarded body lost its members: %s", what, b)
	}
}

// vllmV0Refusal answers s as vLLM V0 under --scheduling-policy fcfs
// answers a request with a non-zero priority.
func vllmV0Refusal(s *host.Stream, prio int) {
	body := fmt.Sprintf(`{"object":"error","message":"Got priority %d but Priority scheduling is not enabled.","type":"BadRequestError","param":null,"code":400}`, prio)
	s.ResponseHeaders([][2]string{{":status", "400"}, {"content-type", "application/json"}, {"content-length", fmt.Sprint(len(body))}}, false)
	s.ResponseBody([]byte(body), true)
	s.Complete()
}

func criticalLogs(h *host.Host, substr string) int {
	n := 0
	for _, l := range h.Logs() {
		if l.Level == hostcalls.LogLevelCritical && strings.Contains(l.Message, substr) {
			n++
		}
	}
	return n
}

// TestWasmEngineOffWritesNoPriority: with engine_priority "off" no
// forwarded body carries a priority, neither the plugin's nor the
// client's (duplicates, streams whose usage the plugin asks for, requests
// held then dispatched included), while borrowers are still held at the
// gateway; status and the gauge show the mode.
func TestWasmEngineOffWritesNoPriority(t *testing.T) {
	h, _ := start(t, engineConfig("off"), 2)
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, `,"priority":-5`))
	a2 := request(h, 1, "/v1/chat/completions", append(team("a"), [2]string{"x-request-class", "batch"}), chat("m", 4, `,"priority":3,"priority":4`))
	noPriority(t, "a1 (within share)", a1)
	noPriority(t, "a2 (borrowing, duplicate client priorities)", a2)
	if b, _ := header(a2.ResponseHeaderMap(), "x-fairshare-borrowing"); b != "" {
		t.Fatalf("response headers before the response: %q", b)
	}
	// The pool is full: a's next request borrows and is held, as with
	// engine priorities.
	a3 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, `,"stream":true,"priority":9`))
	if !held(a3) {
		t.Fatalf("a3 not held with engine_priority off (forwarded %s, reply %+v)", a3.ForwardedRequestBody(), a3.LocalReply())
	}
	respondJSON(a2, 3, 2)
	if held(a3) {
		t.Fatal("a3 still held after a2 finished")
	}
	noPriority(t, "a3 (held, dispatched)", a3)
	if !gjson.GetBytes(a3.ForwardedRequestBody(), "stream_options.include_usage").Bool() {
		t.Errorf("a3: the plugin's include_usage is gone: %s", a3.ForwardedRequestBody())
	}
	// Only a priority: the body stays an object.
	b1 := request(h, 1, "/v1/chat/completions", team("b"), `{"priority":2,"model":"m","messages":[{"role":"user","content":"x"}]}`)
	noPriority(t, "b1 (priority first)", b1)
	st := statusBody(t, h)
	if !strings.Contains(st, `"engine_priority":"off","engine_priority_in_force":"off"`) {
		t.Errorf("status %s: want engine_priority off in force", st)
	}
	if g, ok := h.Metrics()["fairshare.pool.p.engine_priority"]; !ok || g.Value != 0 {
		t.Errorf("engine_priority gauge %+v (defined %v), want 0", g, ok)
	}
	for _, s := range []*host.Stream{a1, b1} {
		respondJSON(s, 3, 2)
	}
	a3.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	a3.ResponseBody([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\ndata: [DONE]\n\n"), true)
	a3.Complete()
	checkIdle(t, h, "p")
}

// TestWasmEngineAutoSwitchesOnRefusal: with engine_priority "auto" (the
// default) the engine's first refusal switches the pool to no priorities
// on every VM; the refused client gets an error saying what to change;
// no later request carries a priority, so none is refused; the switch is
// logged once at critical level and shown in status and metrics.
func TestWasmEngineAutoSwitchesOnRefusal(t *testing.T) {
	h, _ := start(t, flowConfig, 2)
	if st := statusBody(t, h); !strings.Contains(st, `"engine_priority":"auto","engine_priority_in_force":"on"`) {
		t.Fatalf("status %s: want auto, on in force", st)
	}
	if g := h.Metrics()["fairshare.pool.p.engine_priority"]; g.Value != 1 {
		t.Fatalf("engine_priority gauge %d before any refusal, want 1", g.Value)
	}
	// A batch request within share goes at priority 1, and a borrower
	// sent before the switch at 10 or more.
	a1 := request(h, 0, "/v1/chat/completions", append(team("a"), [2]string{"x-request-class", "batch"}), chat("m", 4, ""))
	a2 := request(h, 1, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	p1, p2 := priority(t, a1), priority(t, a2)
	if p1 != 1 || p2 < fairshare.BorrowBase {
		t.Fatalf("priorities %d, %d: want 1 (batch within share) and borrowing", p1, p2)
	}
	vllmV0Refusal(a1, p1)
	out := a1.ResponseOut()
	var e struct {
		Error struct {
			Message, Type, Param string
			Code                 int
		}
	}
	if err := json.Unmarshal(out, &e); err != nil || e.Error.Code != 400 || e.Error.Param != "priority" ||
		!strings.Contains(e.Error.Message, "--scheduling-policy priority") || !strings.Contains(e.Error.Message, `engine_priority "off"`) {
		t.Errorf("refused client got %s (%v): want the plugin's error naming --scheduling-policy priority and engine_priority \"off\"", out, err)
	}
	if cl, ok := header(a1.ResponseHeaderMap(), "content-length"); ok {
		t.Errorf("content-length %s kept on a replaced body", cl)
	}
	// The request sent before the switch is refused too: counted, not
	// logged again.
	vllmV0Refusal(a2, p2)
	// From now on, on both VMs, nothing carries a priority: an engine that
	// refuses priorities refuses none of them.
	var later []*host.Stream
	for i := range 6 {
		cls := "interactive"
		if i%2 == 1 {
			cls = "batch"
		}
		s := request(h, i%2, "/v1/chat/completions", append(team([]string{"a", "b"}[i%3%2]), [2]string{"x-request-class", cls}), chat("m", 4, `,"priority":7`))
		if held(s) {
			t.Fatalf("request %d held with the pool idle", i)
		}
		noPriority(t, fmt.Sprintf("request %d after the switch", i), s)
		later = append(later, s)
		if i%2 == 1 {
			for _, s := range later {
				respondJSON(s, 3, 2)
			}
			later = later[:0]
		}
	}
	if n := criticalLogs(h, "refused a priority"); n != 1 {
		t.Errorf("%d critical logs of the refusal, want 1", n)
	}
	m := h.Metrics()
	if v := m["fairshare.pool.p.engine_priority_refused_total"].Value; v != 2 {
		t.Errorf("engine_priority_refused_total %d, want 2 (the two requests sent before the switch)", v)
	}
	if g := m["fairshare.pool.p.engine_priority"]; g.Value != 0 {
		t.Errorf("engine_priority gauge %d after the switch, want 0", g.Value)
	}
	if st := statusBody(t, h); !strings.Contains(st, `"engine_priority":"auto","engine_priority_in_force":"off"`) {
		t.Errorf("status %s: want auto, off in force", st)
	}
	// The mark outlives a reconfiguration: the new VMs write no priority.
	if err := h.Reconfigure([]byte(flowConfig)); err != nil {
		t.Fatal(err)
	}
	h.Advance(time.Second)
	s := request(h, 0, "/v1/chat/completions", append(team("a"), [2]string{"x-request-class", "batch"}), chat("m", 4, ""))
	noPriority(t, "after reconfiguration", s)
	respondJSON(s, 3, 2)
	// Deploying "on" clears it: priorities again, and auto re-armed.
	if err := h.Reconfigure([]byte(engineConfig("on"))); err != nil {
		t.Fatal(err)
	}
	if err := h.Reconfigure([]byte(flowConfig)); err != nil {
		t.Fatal(err)
	}
	s = request(h, 1, "/v1/chat/completions", append(team("a"), [2]string{"x-request-class", "batch"}), chat("m", 4, ""))
	if p := priority(t, s); p != 1 {
		t.Errorf("after on then auto: priority %d, want 1", p)
	}
	respondJSON(s, 3, 2)
	checkIdle(t, h, "p")
}

// TestWasmEngineAutoOtherErrorsDoNotSwitch: a 400 that is not the
// refusal, and a request at priority 0, leave the pool writing priorities.
func TestWasmEngineAutoOtherErrorsDoNotSwitch(t *testing.T) {
	h, _ := start(t, flowConfig, 1)
	s := request(h, 0, "/v1/chat/completions", append(team("a"), [2]string{"x-request-class", "batch"}), chat("m", 4, ""))
	body := `{"object":"error","message":"This model's maximum context length is 8 tokens.","type":"BadRequestError","param":null,"code":400}`
	s.ResponseHeaders([][2]string{{":status", "400"}, {"content-type", "application/json"}, {"content-length", fmt.Sprint(len(body))}}, false)
	s.ResponseBody([]byte(body), true)
	s.Complete()
	if got := string(s.ResponseOut()); got != body {
		t.Errorf("another 400 was rewritten: %s", got)
	}
	s = request(h, 0, "/v1/chat/completions", append(team("a"), [2]string{"x-request-class", "batch"}), chat("m", 4, ""))
	if p := priority(t, s); p != 1 {
		t.Errorf("priority %d after an unrelated 400, want 1", p)
	}
	respondJSON(s, 3, 2)
	if v := h.Metrics()["fairshare.pool.p.engine_priority_refused_total"].Value; v != 0 {
		t.Errorf("engine_priority_refused_total %d, want 0", v)
	}
}

// engineHTTPConfig is httpConfig with flow control, and engine_priority
// mode unless "".
func engineHTTPConfig(mode string) string {
	cfg := strings.Replace(httpConfig, `"tick": "100ms",`, `"tick": "100ms", "max_queue_time": "30s",`, 1)
	if mode != "" {
		cfg = strings.Replace(cfg, `"models":`, `"engine_priority": "`+mode+`", "models":`, 1)
	}
	return cfg
}

// TestHTTPEngineAutoAgainstVLLMV0: through real HTTP, in front of the
// simulator run as vLLM V0 under FCFS (400 on any non-zero priority), the
// default engine_priority "auto" turns the first refusal into the
// plugin's error and no later request, on any VM, is refused.
func TestHTTPEngineAutoAgainstVLLMV0(t *testing.T) {
	e := startProxyWith(t, engineHTTPConfig(""), 2, 0.01, func(c *vllmsim.EngineConfig, o *vllmsim.ServerOptions) {
		c.Policy = vllmsim.FCFS
		o.LegacyV0PriorityError = true
	})
	ctx := context.Background()
	post := func(team, class string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/completions", strings.NewReader(completions(1, 4, false, "")))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("x-team", team)
		req.Header.Set("x-request-class", class)
		resp, err := e.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A batch request within share goes at priority 1: refused.
	status, body := post("a", "batch")
	if status != 400 || !strings.Contains(body, "--scheduling-policy priority") || !strings.Contains(body, `"param":"priority"`) {
		t.Fatalf("first request: %d %s, want the plugin's 400 naming --scheduling-policy priority", status, body)
	}
	for i := range 12 {
		team, class := []string{"a", "b", "r", "nobody"}[i%4], []string{"interactive", "batch"}[i%2]
		if status, body := post(team, class); status != 200 {
			t.Fatalf("request %d (%s, %s) after the switch: %d %s, want 200", i, team, class, status, body)
		}
	}
	for _, r := range e.records() {
		if r.Priority != 0 {
			t.Errorf("the engine received priority %d after the switch", r.Priority)
		}
	}
	if v := e.h.Metrics()["fairshare.pool.llama.engine_priority_refused_total"].Value; v != 1 {
		t.Errorf("engine_priority_refused_total %d, want 1", v)
	}
	e.waitIdle(t, "llama")
}

// TestHTTPEngineOffAgainstVLLMV1FCFS: with engine_priority "off" in front
// of the simulator run as vLLM V1 under FCFS, the engine receives no
// priority at all, not even a client's.
func TestHTTPEngineOffAgainstVLLMV1FCFS(t *testing.T) {
	e := startProxyWith(t, engineHTTPConfig("off"), 2, 0.01, func(c *vllmsim.EngineConfig, o *vllmsim.ServerOptions) {
		c.Policy = vllmsim.FCFS
		o.LegacyV0PriorityError = true // any priority that reached it would be refused
	})
	ctx := context.Background()
	for i := range 8 {
		resp := e.post(ctx, t, "/v1/completions", []string{"a", "b", "nobody"}[i%3], completions(1, 4, i%2 == 1, `,"priority":-3`))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	recs := e.records()
	if len(recs) != 8 {
		t.Fatalf("%d engine records, want 8", len(recs))
	}
	for _, r := range recs {
		if r.Priority != 0 {
			t.Errorf("the engine received priority %d with engine_priority off", r.Priority)
		}
	}
	e.waitIdle(t, "llama")
}
