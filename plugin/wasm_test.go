package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
	"github.com/tidwall/gjson"
)

// The scenarios below run the built plugin.wasm in the project's wazero
// host (hostcalls/host), driving HTTP streams event by event as Envoy does.

const pluginName = "fairshare-test"

// hostProfile is the host profile (the cpp-host, and so the Envoy
// releases, emulated) the wasm tests run under: $FAIRSHARE_HOST_PROFILE
// (a host.Profile's String; make test runs the tests once more for each
// older profile), else the newest.
var hostProfile, hostProfileErr = host.ParseProfile(os.Getenv("FAIRSHARE_HOST_PROFILE"))

var (
	moduleOnce sync.Once
	module     *host.Module
	moduleErr  error
)

// compiled returns plugin.wasm compiled once per test binary; a module that
// cannot be built or compiled fails the test.
func compiled(t testing.TB) *host.Module {
	t.Helper()
	wasm := wasmbuild.Plugin(t)
	moduleOnce.Do(func() { module, moduleErr = host.Compile(context.Background(), wasm) })
	if moduleErr != nil {
		t.Fatalf("compile plugin.wasm: %v", moduleErr)
	}
	return module
}

// compiledFilter compiles the filter of plugin/internal/<name> (the
// pass-through, copybody or the call floor) for the benchmarks beside
// plugin.wasm; it is closed when t ends.
func compiledFilter(t testing.TB, name string) *host.Module {
	t.Helper()
	m, err := host.Compile(context.Background(), wasmbuild.Module(t, "./plugin/internal/"+name))
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// testConfig is a small pool: capacity 4, teams a (0.5) and b (0.25).
const testConfig = `{
  "default_max_tokens": 16,
  "tick": "1s",
  "status_token": "sesame",
  "pools": [
    {"name": "small", "capacity": 4, "models": ["m"], "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}}},
    {"name": "rest", "capacity": 2, "models": ["*"], "teams": {"a": {"share": 1}}}
  ]
}`

// start starts the plugin on vms VMs on a virtual clock, under
// hostProfile. At the end of the test it fails on any host error (a call
// Envoy would assert on, Host.HostErrors) and closes the host.
func start(t testing.TB, cfg string, vms int) (*host.Host, *host.VirtualClock) {
	t.Helper()
	return startAs(t, "", cfg, vms)
}

// startAs is start for a second host of the same test: name makes its VM
// id, and so its shared data, its own.
func startAs(t testing.TB, name, cfg string, vms int) (*host.Host, *host.VirtualClock) {
	t.Helper()
	if hostProfileErr != nil {
		t.Fatalf("FAIRSHARE_HOST_PROFILE: %v", hostProfileErr)
	}
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	h, err := compiled(t).Start(context.Background(), host.Options{
		VMs: vms, PluginName: pluginName, VMID: fmt.Sprintf("%s-%p%s", t.Name(), t, name), PluginConfig: []byte(cfg), Clock: clock, Seed: 7,
		Profile: hostProfile,
	})
	if err != nil {
		t.Fatalf("start under %s: %v", hostProfile, err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	noHostErrors(t, h)
	return h, clock
}

// noHostErrors makes t fail at its end on any host error of h (a call on
// which Envoy asserts, such as a continue_stream from the stream's own
// callback: host.Host.HostErrors).
func noHostErrors(t testing.TB, h *host.Host) {
	t.Cleanup(func() {
		for _, e := range h.HostErrors() {
			t.Errorf("host error under %s: %v", hostProfile, e)
		}
	})
}

// pool decodes a pool record from the host's shared data.
func pool(t testing.TB, h *host.Host, name string) *fairshare.Pool {
	t.Helper()
	v, _, ok := h.SharedData(pluginName + "/fairshare/pool/" + name + "/v" + strconv.Itoa(fairshare.RecordVersion))
	if !ok {
		t.Fatalf("no record for pool %s", name)
	}
	p := new(fairshare.Pool)
	if err := p.UnmarshalBinary(v); err != nil {
		t.Fatalf("decode pool %s: %v", name, err)
	}
	return p
}

// teamStats returns the snapshot of a pool by team.
func teamStats(t testing.TB, h *host.Host, name string) map[string]fairshare.TeamStat {
	p := pool(t, h, name)
	out := map[string]fairshare.TeamStat{}
	for _, s := range p.Snapshot(h.Now()) {
		out[s.Team] = s
	}
	return out
}

// checkIdle asserts that nothing is in flight in any pool.
func checkIdle(t testing.TB, h *host.Host, pools ...string) {
	t.Helper()
	for _, p := range pools {
		for team, s := range teamStats(t, h, p) {
			if s.InFlight != 0 || s.Phantoms != 0 {
				t.Errorf("pool %s team %s: in flight %d, phantoms %d; want 0", p, team, s.InFlight, s.Phantoms)
			}
		}
	}
}

func header(hdrs [][2]string, k string) (string, bool) {
	for _, kv := range hdrs {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}

// request sends the headers and body of a request on a new stream of VM vm.
func request(h *host.Host, vm int, path string, hdrs [][2]string, body string) *host.Stream {
	s := h.NewStream(vm)
	all := append([][2]string{{":method", "POST"}, {":path", path}, {":authority", "vllm"}, {"content-type", "application/json"},
		{"content-length", fmt.Sprint(len(body))}}, hdrs...)
	if s.RequestHeaders(all, body == "") == host.Ended || body == "" {
		return s
	}
	s.RequestBody([]byte(body), true)
	return s
}

func chat(model string, maxTokens int, extra string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello there"}],"max_tokens":%d%s}`, model, maxTokens, extra)
}

// priority returns the priority forwarded upstream.
func priority(t testing.TB, s *host.Stream) int {
	t.Helper()
	b := s.ForwardedRequestBody()
	p := gjson.GetBytes(b, "priority")
	if !p.Exists() {
		t.Fatalf("forwarded body has no priority: %s (local reply %+v)", b, s.LocalReply())
	}
	return int(p.Int())
}

// respondJSON answers a stream with a vLLM JSON body reporting usage.
func respondJSON(s *host.Stream, prompt, completion int) {
	body := fmt.Sprintf(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":null}}`,
		prompt, prompt+completion, completion)
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}, {"content-length", fmt.Sprint(len(body))}}, false)
	s.ResponseBody([]byte(body[:len(body)/2]), false)
	s.ResponseBody([]byte(body[len(body)/2:]), true)
	s.Complete()
}

func TestWasmWithinShareAndRelease(t *testing.T) {
	h, _ := start(t, testConfig, 2)
	s := request(h, 0, "/v1/chat/completions?x=1", [][2]string{{"x-team", "a"}, {"x-fairshare-team", "forged"}}, chat("m", 10, `,"priority":-100`))
	if got := priority(t, s); got != 0 {
		t.Errorf("within-share interactive priority = %d, want 0", got)
	}
	req := s.RequestHeaderMap()
	if _, ok := header(req, "content-length"); ok {
		t.Error("content-length forwarded with a rewritten body")
	}
	if _, ok := header(req, "x-fairshare-team"); ok {
		t.Error("client x-fairshare-team header forwarded")
	}
	if st := teamStats(t, h, "small")["a"]; st.InFlight != 1 {
		t.Errorf("in flight a = %d, want 1", st.InFlight)
	}
	respondJSON(s, 12, 3)
	resp := s.ResponseHeaderMap()
	for k, want := range map[string]string{"x-fairshare-team": "a", "x-fairshare-pool": "small", "x-fairshare-priority": "0", "x-fairshare-borrowing": "false"} {
		if v, _ := header(resp, k); v != want {
			t.Errorf("response header %s = %q, want %q", k, v, want)
		}
	}
	checkIdle(t, h, "small", "rest")
	// cost: 12 prompt × 1 + 3 completion × 2; the entry penalty is settled.
	if u := teamStats(t, h, "small")["a"].Usage; math.Abs(u-18) > 1e-9 {
		t.Errorf("usage a = %v, want 18", u)
	}
	// Batch class within share: priority 1; on another VM.
	s = request(h, 1, "/v1/completions", [][2]string{{"x-team", "a"}, {"x-request-class", "batch"}}, `{"model":"m","prompt":[1,2,3]}`)
	if got := priority(t, s); got != 1 {
		t.Errorf("within-share batch priority = %d, want 1", got)
	}
	respondJSON(s, 3, 16)
	checkIdle(t, h, "small")
}

func TestWasmBorrowersInLevelFairshareOrder(t *testing.T) {
	h, _ := start(t, testConfig, 3)
	// a has 2 reserved slots, b 1. a's requests are large, b's small, so
	// once both borrow a is the more over-served (lower level fairshare).
	var open []*host.Stream
	send := func(vm int, team string, maxTokens int) int {
		s := request(h, vm, "/v1/chat/completions", [][2]string{{"x-team", team}}, chat("m", maxTokens, ""))
		open = append(open, s)
		return priority(t, s)
	}
	for i, tc := range []struct {
		vm, max int
		team    string
	}{{0, 400, "a"}, {1, 400, "a"}, {2, 1, "b"}} {
		if p := send(tc.vm, tc.team, tc.max); p != 0 {
			t.Errorf("request %d of %s = %d, want 0 (within share)", i, tc.team, p)
		}
	}
	st := teamStats(t, h, "small")
	if !(st["a"].LevelFairshare < st["b"].LevelFairshare) {
		t.Fatalf("setup: LF a %v, b %v; want a < b", st["a"].LevelFairshare, st["b"].LevelFairshare)
	}
	pb := send(1, "b", 1)
	pa := send(0, "a", 1)
	pc := send(2, "c", 1) // unknown team: share 0, borrows last
	if pa < fairshare.BorrowBase || pb < fairshare.BorrowBase || pc < fairshare.BorrowBase {
		t.Fatalf("borrowers got a %d b %d c %d, want >= %d", pa, pb, pc, fairshare.BorrowBase)
	}
	if pb != fairshare.BorrowBase || pa <= pb {
		t.Errorf("borrowers: b (higher LF) got %d, a got %d; want b = %d < a", pb, pa, fairshare.BorrowBase)
	}
	if pc < pa {
		t.Errorf("unknown team got %d, before a's %d", pc, pa)
	}
	for _, s := range open {
		if v, _ := header(s.RequestHeaderMap(), "x-fairshare-borrowing"); v != "" {
			t.Error("x-fairshare-borrowing sent upstream")
		}
		respondJSON(s, 5, 5)
	}
	checkIdle(t, h, "small")
}

// jsonError checks a local reply: status and an OpenAI error body.
func jsonError(t *testing.T, s *host.Stream, status int) {
	t.Helper()
	lr := s.LocalReply()
	if lr == nil {
		t.Fatalf("no local reply, want %d", status)
	}
	if lr.Status != status {
		t.Errorf("local reply %d %s, want %d", lr.Status, lr.Body, status)
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(lr.Body, &e); err != nil || e.Error.Message == "" || e.Error.Code != status {
		t.Errorf("local reply body %s is not an OpenAI error (%v)", lr.Body, err)
	}
	if ct, _ := header(lr.Headers, "content-type"); ct != "application/json" {
		t.Errorf("local reply content-type %q", ct)
	}
}

// badInputConfig is testConfig with unknown teams refused and a small
// body limit, for badInputs.
var badInputConfig = strings.Replace(testConfig, `"tick"`, `"unknown_team":"reject","max_body_bytes":4096,"tick"`, 1)

// badInput is a request the plugin refuses under badInputConfig.
type badInput struct {
	name   string
	hdrs   [][2]string
	path   string
	body   string
	status int
	reason string // of rejected_<reason>_total
}

// badInputs are the requests TestWasmBadInputs refuses (and shadow mode
// forwards).
func badInputs() []badInput {
	return []badInput{
		{"no team", nil, "/v1/chat/completions", chat("m", 1, ""), 401, "no_team"},
		{"bad class", [][2]string{{"x-team", "a"}, {"x-request-class", "urgent"}}, "/v1/chat/completions", chat("m", 1, ""), 400, "bad_class"},
		{"array body", [][2]string{{"x-team", "a"}}, "/v1/chat/completions", `[1,2]`, 400, "bad_body"},
		{"invalid json", [][2]string{{"x-team", "a"}}, "/v1/completions", `{"model":`, 400, "bad_body"},
		{"no body", [][2]string{{"x-team", "a"}}, "/v1/completions", ``, 400, "bad_body"},
		{"model not a string", [][2]string{{"x-team", "a"}}, "/v1/completions", `{"model":1}`, 400, "bad_body"},
		{"too large", [][2]string{{"x-team", "a"}}, "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, "body_too_large"},
		{"unknown team", [][2]string{{"x-team", "z"}}, "/v1/completions", `{"model":"m","prompt":"x"}`, 403, "unknown_team"},
	}
}

func TestWasmBadInputs(t *testing.T) {
	h, _ := start(t, badInputConfig, 1)
	for _, tt := range badInputs() {
		t.Run(tt.name, func(t *testing.T) {
			before := h.Metrics()
			s := request(h, 0, tt.path, tt.hdrs, tt.body)
			jsonError(t, s, tt.status)
			if len(s.ForwardedRequestBody()) != 0 {
				t.Error("rejected request forwarded")
			}
			if r := counterDelta(before, h.Metrics(), "rejected_"); !slices.Equal(r, []string{tt.reason}) {
				t.Errorf("rejected counters %v, want [%s]", r, tt.reason)
			}
			s.Complete()
		})
	}
	checkIdle(t, h, "small", "rest")
	m := h.Metrics()
	for _, name := range []string{"fairshare.rejected_no_team_total", "fairshare.rejected_bad_class_total", "fairshare.rejected_bad_body_total",
		"fairshare.rejected_body_too_large_total", "fairshare.pool.small.rejected_unknown_team_total"} {
		if m[name].Value == 0 {
			t.Errorf("metric %s = 0", name)
		}
	}
}

func TestWasmUntouchedAndUnscheduled(t *testing.T) {
	h, _ := start(t, `{"pools":[{"name":"p","capacity":1,"models":["m"]}]}`, 1)
	// GET and other paths pass untouched.
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/v1/models"}, {"x-fairshare-pool", "keep"}, {"content-length", "0"}}, true)
	if _, ok := header(s.RequestHeaderMap(), "x-fairshare-pool"); !ok {
		t.Error("GET request was modified")
	}
	s.Complete()
	// A model of no pool is refused (unknown_model "reject", the default).
	s = request(h, 0, "/v1/completions", [][2]string{{"x-team", "a"}}, `{"model":"other","prompt":"x","priority":-1}`)
	jsonError(t, s, 404)
	s.Complete()
}

func TestWasmStreamHidesUsageChunk(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 10, `,"stream":true`))
	fwd := s.ForwardedRequestBody()
	if !gjson.GetBytes(fwd, "stream_options.include_usage").Bool() {
		t.Fatalf("forwarded %s without include_usage", fwd)
	}
	head := "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"total_tokens\":10,\"completion_tokens\":1}}\n\n"
	tail := "data: [DONE]\n\n"
	up := head + usage + tail
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	for i := 0; i < len(up); i += 13 {
		j := min(i+13, len(up))
		s.ResponseBody([]byte(up[i:j]), false)
	}
	s.ResponseBody(nil, true)
	s.Complete()
	if got := string(s.ResponseOut()); got != head+tail {
		t.Errorf("client stream =\n%q\nwant\n%q", got, head+tail)
	}
	checkIdle(t, h, "small")
	if u := teamStats(t, h, "small")["b"].Usage; math.Abs(u-11) > 1e-9 {
		t.Errorf("usage b = %v, want 9 + 2×1", u)
	}
}

func TestWasmAbortReleasesBestEstimate(t *testing.T) {
	h, _ := start(t, testConfig, 2)
	// A reset mid-stream: prompt estimate plus the tokens seen.
	body := chat("m", 10, `,"stream":true`)
	s := request(h, 1, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	s.ResponseBody([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"cho"), false)
	s.Reset()
	s.Complete()
	msgs := gjson.Get(body, "messages").Raw
	prompt := float64((len(msgs) + 3) / 4)
	st := teamStats(t, h, "small")["a"]
	if st.InFlight != 0 || math.Abs(st.Usage-(prompt+2*2)) > 1e-9 {
		t.Errorf("after reset: in flight %d usage %v, want 0 and %v", st.InFlight, st.Usage, prompt+4)
	}
	// An upstream 5xx without usage, a 4xx (vLLM refused the request: no
	// charge), and a stream that never got a response (reset before the
	// upstream answered).
	s = request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	s.ResponseHeaders([][2]string{{":status", "503"}, {"content-type", "application/json"}}, false)
	s.ResponseBody([]byte(`{"error":{"message":"overloaded"}}`), true)
	s.Complete()
	s = request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	s.ResponseHeaders([][2]string{{":status", "400"}, {"content-type", "application/json"}}, false)
	s.ResponseBody([]byte(`{"error":{"message":"too long","code":400}}`), true)
	s.Complete()
	s = request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, body)
	s.Reset()
	s.Complete()
	checkIdle(t, h, "small")
	st = teamStats(t, h, "small")["a"]
	if want := 3*prompt + 4; math.Abs(st.Usage-want) > 1e-9 {
		t.Errorf("usage = %v, want %v", st.Usage, want)
	}
}

func TestWasmStatus(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	get := func(auth string) *host.Stream {
		s := h.NewStream(0)
		hd := [][2]string{{":method", "GET"}, {":path", "/fairshare/status"}}
		if auth != "" {
			hd = append(hd, [2]string{"authorization", auth})
		}
		s.RequestHeaders(hd, true)
		return s
	}
	jsonError(t, get(""), 401)
	jsonError(t, get("Bearer wrong"), 401)
	jsonError(t, get("Bearer sesame2"), 401)
	jsonError(t, get("Basic sesame"), 401)
	jsonError(t, get("sesame"), 401)
	// The scheme is case-insensitive (RFC 7235); a query string is ignored.
	for _, auth := range []string{"bearer sesame", "BEARER  sesame"} {
		if lr := get(auth).LocalReply(); lr == nil || lr.Status != 200 {
			t.Errorf("status with %q = %+v, want 200", auth, lr)
		}
	}
	q := h.NewStream(0)
	q.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/fairshare/status?pretty=1"}, {"authorization", "Bearer sesame"}}, true)
	if lr := q.LocalReply(); lr == nil || lr.Status != 200 {
		t.Errorf("status with a query string = %+v, want 200", lr)
	}
	p := h.NewStream(0)
	p.RequestHeaders([][2]string{{":method", "POST"}, {":path", "/fairshare/status"}, {"authorization", "Bearer sesame"}}, true)
	jsonError(t, p, 405)
	open := request(h, 0, "/v1/completions", [][2]string{{"x-team", "a"}}, `{"model":"m","prompt":"abcd"}`)
	s := get("Bearer sesame")
	lr := s.LocalReply()
	if lr == nil || lr.Status != 200 {
		t.Fatalf("status reply = %+v", lr)
	}
	doc := gjson.ParseBytes(lr.Body)
	if !gjson.ValidBytes(lr.Body) || doc.Get("pools.#").Int() != 2 || doc.Get("pools.0.name").Str != "small" ||
		doc.Get("pools.0.in_flight").Int() != 1 || doc.Get(`pools.0.teams.#(team=="a").in_flight`).Int() != 1 ||
		doc.Get(`pools.0.teams.#(team=="a").reserved`).Int() != 2 {
		t.Errorf("status = %s", lr.Body)
	}
	respondJSON(open, 1, 1)
}

func TestWasmBadConfigFailsStart(t *testing.T) {
	_, err := compiled(t).Start(context.Background(), host.Options{
		Profile:      hostProfile,
		PluginName:   pluginName,
		PluginConfig: []byte(`{"tick":"soon","pools":[{"name":"a.b","capacity":0,"models":["m"],"teams":{"x":{"share":2}}}]}`),
	})
	if err == nil {
		t.Fatal("start with a bad configuration succeeded")
	}
}

func TestWasmTickAndGauges(t *testing.T) {
	h, clock := start(t, testConfig, 2)
	s := request(h, 0, "/v1/completions", [][2]string{{"x-team", "b"}}, `{"model":"m","prompt":"abcd"}`)
	h.Advance(2 * time.Second)
	m := h.Metrics()
	if v := m["fairshare.pool.small.team.b.in_flight"].Value; v != 1 {
		t.Errorf("gauge in_flight b = %v, want 1", v)
	}
	if v := m["fairshare.pool.small.team.a.reserved"].Value; v != 2 {
		t.Errorf("gauge reserved a = %v, want 2", v)
	}
	if v := m["fairshare.pool.small.team.b.class.interactive.standing.within.requests_total"].Value; v != 1 {
		t.Errorf("requests_total = %v, want 1", v)
	}
	respondJSON(s, 1, 1)
	_ = clock
	h.Advance(time.Second)
	if v := h.Metrics()["fairshare.pool.small.team.b.in_flight"].Value; v != 0 {
		t.Errorf("gauge in_flight b after release = %v, want 0", v)
	}
}

// TestWasmInterleavedStreamsKeepTheirTeam: the plugin reads every stream's
// headers into one buffer it reuses, so a team kept past its headers
// callback must not view it. Streams of configured teams and of unknown
// ones are opened on one VM before either is answered: each response
// names its own team, and the unknown ones the entry they are counted in,
// _unknown (a team kept viewing the buffer would read as another's).
func TestWasmInterleavedStreamsKeepTheirTeam(t *testing.T) {
	h, _ := start(t, testConfig, 1)
	sent := []string{"a", "unlisted-team", "b", "another-unlisted"}
	teams := []string{"a", "_unknown", "b", "_unknown"}
	var open []*host.Stream
	for _, team := range sent {
		open = append(open, request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", team}, {"x-padding", strings.Repeat("p", 64)}}, chat("m", 1, "")))
	}
	for i, s := range open {
		respondJSON(s, 3, 1)
		if v, _ := header(s.ResponseHeaderMap(), "x-fairshare-team"); v != teams[i] {
			t.Errorf("stream %d: x-fairshare-team = %q, want %q", i, v, teams[i])
		}
	}
	checkIdle(t, h, "small")
}
