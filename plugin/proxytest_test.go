package plugin_test

import (
	"bytes"
	"math"
	"sync"
	"testing"

	"github.com/fairshare-wasm/fairshare/internal/proxytestcompat"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"
)

// The basic scenarios also run in the SDK's emulator (tetratelabs
// proxy-wasm-go-sdk v0.24.0 proxytest), a second, independent host, so
// that one misreading of the ABI cannot hide in both our guest and our
// host. Its differences from Envoy that matter here: it starts modules
// with "_start" (renamed by internal/proxytestcompat), numbers shared-data cas per key (the
// create-if-absent protocol still creates a missing record; a concurrent
// creation cannot happen with its single VM), and calls only on_log at the
// end of a stream.

var (
	ptOnce sync.Once
	ptVM   proxytest.WasmVMContext
	ptErr  error
)

// proxytestVM returns one emulator VM per test binary (compiling the
// module is the slow part); each test starts its own plugin context in it.
func proxytestVM(t *testing.T) proxytest.WasmVMContext {
	t.Helper()
	wasm := wasmbuild.Plugin(t)
	ptOnce.Do(func() {
		var renamed []byte
		if renamed, ptErr = proxytestcompat.RenameInitialize(wasm); ptErr == nil {
			ptVM, ptErr = proxytest.NewWasmVMContext(renamed)
		}
	})
	if ptErr != nil {
		t.Fatalf("proxytest VM: %v", ptErr)
	}
	return ptVM
}

func startProxytest(t *testing.T, cfg string) proxytest.HostEmulator {
	t.Helper()
	h, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(proxytestVM(t)).WithPluginConfiguration([]byte(cfg)))
	t.Cleanup(reset)
	if st := h.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("StartPlugin = %v; critical logs %q", st, h.GetCriticalLogs())
	}
	return h
}

func TestProxytestScenarios(t *testing.T) {
	h := startProxytest(t, testConfig)
	post := func(team, body string) uint32 {
		id := h.InitializeHttpContext()
		hd := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"content-type", "application/json"}}
		if team != "" {
			hd = append(hd, [2]string{"x-team", team})
		}
		if h.CallOnRequestHeaders(id, hd, false) == types.ActionContinue {
			h.CallOnRequestBody(id, []byte(body), true)
		}
		return id
	}
	// Within share, then a borrower.
	ids := []uint32{post("b", chat("m", 4, ""))}
	if p := gjson.GetBytes(h.GetCurrentRequestBody(ids[0]), "priority"); !p.Exists() || p.Int() != 0 {
		t.Fatalf("first request of b: body %s", h.GetCurrentRequestBody(ids[0]))
	}
	ids = append(ids, post("b", chat("m", 4, "")))
	if p := gjson.GetBytes(h.GetCurrentRequestBody(ids[1]), "priority").Int(); p < 10 {
		t.Errorf("second request of b: priority %d, want a borrower's (>= 10)", p)
	}
	// No team: 401 JSON error.
	bad := post("", chat("m", 4, ""))
	if lr := h.GetSentLocalResponse(bad); lr == nil || lr.StatusCode != 401 || !gjson.ValidBytes(lr.Data) {
		t.Errorf("no team: local response %+v", lr)
	}
	h.CompleteHttpContext(bad)
	// Responses: JSON usage, then a stream whose usage chunk is hidden.
	body := `{"choices":[{"index":0,"message":{"content":"x"}}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`
	h.CallOnResponseHeaders(ids[0], [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	h.CallOnResponseBody(ids[0], []byte(body), true)
	if v := h.GetCurrentResponseHeaders(ids[0]); !hasHeader(v, "x-fairshare-pool", "small") {
		t.Errorf("response headers %v", v)
	}
	h.CompleteHttpContext(ids[0])

	s := post("a", chat("m", 4, `,"stream":true`))
	if !gjson.GetBytes(h.GetCurrentRequestBody(s), "stream_options.include_usage").Bool() {
		t.Errorf("stream request not asked for usage: %s", h.GetCurrentRequestBody(s))
	}
	h.CallOnResponseHeaders(s, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	var out bytes.Buffer
	for _, c := range []string{"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\nda", "ta: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"} {
		h.CallOnResponseBody(s, []byte(c), false)
		out.Write(h.GetCurrentResponseBody(s))
	}
	h.CallOnResponseBody(s, nil, true)
	out.Write(h.GetCurrentResponseBody(s))
	if want := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"; out.String() != want {
		t.Errorf("client stream %q, want %q", out.String(), want)
	}
	h.CompleteHttpContext(s)
	// The borrower ends without a response (on_log only): released too.
	h.CompleteHttpContext(ids[1])

	// The status endpoint shows nothing in flight and the charged usage.
	st := h.InitializeHttpContext()
	h.CallOnRequestHeaders(st, [][2]string{{":method", "GET"}, {":path", "/fairshare/status"}, {"authorization", "Bearer sesame"}}, true)
	lr := h.GetSentLocalResponse(st)
	if lr == nil || lr.StatusCode != 200 {
		t.Fatalf("status: %+v", lr)
	}
	doc := gjson.ParseBytes(lr.Data)
	if doc.Get("pools.0.in_flight").Int() != 0 {
		t.Errorf("in flight after every stream ended: %s", lr.Data)
	}
	// The emulator's WASI clock advances a little at every read: allow
	// for the decay over that time.
	if u := doc.Get(`pools.0.teams.#(team=="a").usage`).Float(); math.Abs(u-(3+2*1)) > 1e-6 {
		t.Errorf("usage a = %v, want 5: %s", u, lr.Data)
	}
	if u := doc.Get(`pools.0.teams.#(team=="b").usage`).Float(); u <= 10+2*2 {
		t.Errorf("usage b = %v, want 14 plus the aborted request's estimate", u)
	}
}

func TestProxytestBadConfig(t *testing.T) {
	h, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(proxytestVM(t)).
		WithPluginConfiguration([]byte(`{"pools":[{"name":"p","capacity":0,"models":["m"]}],"colour":"red"}`)))
	defer reset()
	if st := h.StartPlugin(); st != types.OnPluginStartStatusFailed {
		t.Fatalf("StartPlugin with a bad configuration = %v", st)
	}
	logs := h.GetCriticalLogs()
	joined := ""
	for _, l := range logs {
		joined += l + "\n"
	}
	for _, want := range []string{"pools[0].capacity", "colour: unknown field"} {
		if !bytes.Contains([]byte(joined), []byte(want)) {
			t.Errorf("critical logs %q do not name %q", logs, want)
		}
	}
}

func hasHeader(h [][2]string, k, v string) bool {
	for _, kv := range h {
		if kv[0] == k && kv[1] == v {
			return true
		}
	}
	return false
}

// TestProxytestUsers is TestWasmUsersLightUserBeforeFlooder's core in the
// emulator: a flooding user's requests beyond its portion go over, a
// teammate's within share, a malformed user is refused.
func TestProxytestUsers(t *testing.T) {
	h := startProxytest(t, usersConfig)
	post := func(user string) uint32 {
		id := h.InitializeHttpContext()
		hd := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"content-type", "application/json"}, {"x-team", "a"}, {"x-user", user}}
		if h.CallOnRequestHeaders(id, hd, false) == types.ActionContinue {
			h.CallOnRequestBody(id, []byte(chat("m", 4, "")), true)
		}
		return id
	}
	prio := func(id uint32) int64 {
		p := gjson.GetBytes(h.GetCurrentRequestBody(id), "priority")
		if !p.Exists() {
			t.Fatalf("no priority forwarded: %s (local reply %+v)", h.GetCurrentRequestBody(id), h.GetSentLocalResponse(id))
		}
		return p.Int()
	}
	first := post("alice")
	if p := prio(first); p != 0 {
		t.Fatalf("alice's first request %d, want 0", p)
	}
	h.CompleteHttpContext(first)
	// Each body is read before the next request: the emulator keeps a
	// view of the plugin's body buffer, which the next rewrite reuses.
	var ids []uint32
	var prios []int64
	for range 3 {
		ids = append(ids, post("bulk"))
		prios = append(prios, prio(ids[len(ids)-1]))
	}
	if prios[0] != 0 || prios[1] != 0 || prios[2] < 2 || prios[2] > 9 {
		t.Errorf("bulk's requests %v; want 0, 0 and over (2 to 9)", prios)
	}
	light := post("alice")
	if p := prio(light); p != 0 {
		t.Errorf("alice's request beside the flooder %d, want 0", p)
	}
	h.CallOnResponseHeaders(ids[2], [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	if v := h.GetCurrentResponseHeaders(ids[2]); !hasHeader(v, "x-fairshare-user", "bulk") || !hasHeader(v, "x-fairshare-over", "true") {
		t.Errorf("over request's response headers %v", v)
	}
	bad := post("al ice")
	if lr := h.GetSentLocalResponse(bad); lr == nil || lr.StatusCode != 400 || gjson.GetBytes(lr.Data, "error.param").Str != "x-user" {
		t.Errorf("malformed user: local response %+v", lr)
	}
	for _, id := range append(ids, light, bad) {
		h.CompleteHttpContext(id)
	}
}
