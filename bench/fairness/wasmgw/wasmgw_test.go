package wasmgw

import (
	"context"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
	"github.com/tidwall/gjson"
)

func TestConfigKeepsTeamOrderAndValues(t *testing.T) {
	s := &fairbench.Scenario{HalfLife: 90, Teams: []fairbench.TeamSpec{{Name: "zeta", Share: 0.7, Weight: 2}, {Name: "alpha", Share: 0.3}}}
	cfg, err := Config(s, 24, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !gjson.ValidBytes(cfg) {
		t.Fatalf("Config = %s: not JSON", cfg)
	}
	p := gjson.GetBytes(cfg, "pools.0")
	if got := p.Get("capacity").Int(); got != 24 {
		t.Errorf("capacity = %d, want 24", got)
	}
	var names []string
	p.Get("teams").ForEach(func(k, v gjson.Result) bool {
		names = append(names, k.String())
		return true
	})
	if len(names) != 2 || names[0] != "zeta" || names[1] != "alpha" {
		t.Errorf("teams in order %v, want [zeta alpha] (the scenario's order)", names)
	}
	if w := p.Get("teams.zeta.weight").Float(); w != 2 {
		t.Errorf("zeta weight = %v, want 2", w)
	}
	if p.Get("teams.alpha.weight").Exists() {
		t.Error("alpha has a weight, want none (default 1)")
	}
	if hl := gjson.GetBytes(cfg, "half_life").String(); hl != "1m30s" {
		t.Errorf("half_life = %q, want 1m30s", hl)
	}
	for _, k := range []string{"max_queue_time", "dispatch_tick", "pools.0.kv_tokens"} {
		if gjson.GetBytes(cfg, k).Exists() {
			t.Errorf("%s present without flow control: plugin.wasm without it rejects the field", k)
		}
	}
}

func TestConfigFlow(t *testing.T) {
	half := 0.5
	s := &fairbench.Scenario{Name: "f", Engine: fairbench.EngineSpec{Preset: "demo", NumBlocks: 2049, BlockSize: 16},
		Teams: []fairbench.TeamSpec{{Name: "flood", Share: 0.5}, {Name: "chat", Share: 0.5, LendingLimit: &half}}}
	all := &Flow{MaxQueueTime: 600 * time.Second, KV: true, Lend: true}
	for _, tt := range []struct {
		name      string
		flow      *Flow
		c         int
		queue     string
		kv        int64 // 0: absent
		lendLimit bool
	}{
		{"all", all, 16, "10m0s", 2049 * 16, true},
		{"two replicas", all, 32, "10m0s", 2 * 2049 * 16, true},
		{"nohold", &Flow{KV: true, Lend: true}, 16, "0s", 2049 * 16, true},
		{"nokv", &Flow{MaxQueueTime: time.Minute, Lend: true}, 16, "1m0s", 0, true},
		{"nolend", &Flow{MaxQueueTime: time.Minute, KV: true}, 16, "1m0s", 2049 * 16, false},
	} {
		cfg, err := Config(s, tt.c, tt.flow, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !gjson.ValidBytes(cfg) {
			t.Fatalf("%s: Config = %s: not JSON", tt.name, cfg)
		}
		if q := gjson.GetBytes(cfg, "max_queue_time").String(); q != tt.queue {
			t.Errorf("%s: max_queue_time = %q, want %q", tt.name, q, tt.queue)
		}
		if d := gjson.GetBytes(cfg, "dispatch_tick").String(); d != "20ms" {
			t.Errorf("%s: dispatch_tick = %q, want 20ms", tt.name, d)
		}
		if kv := gjson.GetBytes(cfg, "pools.0.kv_tokens"); kv.Int() != tt.kv || kv.Exists() != (tt.kv != 0) {
			t.Errorf("%s: kv_tokens = %s, want %d (num_gpu_blocks × block_size × replicas; 0: absent)", tt.name, kv.Raw, tt.kv)
		}
		l := gjson.GetBytes(cfg, "pools.0.teams.chat.lending_limit")
		if l.Exists() != tt.lendLimit || (tt.lendLimit && l.Float() != 0.5) {
			t.Errorf("%s: chat lending_limit = %q, want 0.5: %v", tt.name, l.Raw, tt.lendLimit)
		}
		if gjson.GetBytes(cfg, "pools.0.teams.flood.lending_limit").Exists() {
			t.Errorf("%s: flood has a lending_limit, want none (none in the scenario)", tt.name)
		}
	}
}

func TestBodies(t *testing.T) {
	b := requestBody("bench", 300, 77)
	if !gjson.ValidBytes(b) {
		t.Fatalf("requestBody is not JSON: %.80s", b)
	}
	if got := len(gjson.GetBytes(b, "messages.0.content").String()); got != 1200 {
		t.Errorf("content of %d bytes, want 1200 (4 per prompt token, the plugin's estimate)", got)
	}
	if got := gjson.GetBytes(b, "max_tokens").Int(); got != 77 {
		t.Errorf("max_tokens = %d, want 77", got)
	}
	if b := requestBody("bench", 10, 0); gjson.GetBytes(b, "max_tokens").Exists() {
		t.Errorf("requestBody(10, 0) = %.80s: has max_tokens, want none", b)
	}
	r := responseBody(5, 300, 40, 77, -1)
	u := gjson.GetBytes(r, "usage")
	if u.Get("prompt_tokens").Int() != 300 || u.Get("completion_tokens").Int() != 40 || u.Get("total_tokens").Int() != 340 {
		t.Errorf("usage = %s, want 300 / 40 / 340 (the real output, not max_tokens)", u.Raw)
	}
	if f := gjson.GetBytes(r, "choices.0.finish_reason").String(); f != "stop" {
		t.Errorf("finish_reason = %q for 40 of 77 tokens, want stop", f)
	}
	if f := gjson.GetBytes(responseBody(5, 300, 77, 77, -1), "choices.0.finish_reason").String(); f != "length" {
		t.Errorf("finish_reason = %q at max_tokens, want length", f)
	}
}

// record wraps a gateway and keeps every finished request.
type record struct {
	fairbench.Gateway
	done []*fairbench.Request
}

func (r *record) Finish(q *fairbench.Request) {
	r.done = append(r.done, q)
	r.Gateway.Finish(q)
}

func holdScenario() *fairbench.Scenario {
	return &fairbench.Scenario{Name: "hold", Seed: 11, Duration: 3, Capacity: 16, Engine: fairbench.EngineSpec{Preset: "demo"},
		Teams: []fairbench.TeamSpec{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
		Workloads: []fairbench.WorkloadSpec{
			{Team: "a", Kind: fairbench.KindPoisson, Rate: 20, Prompt: fairbench.LengthDist{Mean: 100}, Output: fairbench.LengthDist{Mean: 10}, MaxTokens: 64, Interactive: 1},
			{Team: "b", Kind: fairbench.KindClosed, Concurrency: 4, Prompt: fairbench.LengthDist{Mean: 200}, Output: fairbench.LengthDist{Mean: 20}, MaxTokens: 64},
		}}
}

// holdGateway is a gateway running the host package's hold filter
// (testdata/holdguest in "hold" mode) with a 1 ms dispatch tick, any
// priority accepted.
func holdGateway(t *testing.T) *Gateway {
	t.Helper()
	mod, err := host.Compile(context.Background(), wasmbuild.Module(t, "./hostcalls/host/testdata/holdguest"))
	if err != nil {
		t.Fatal(err)
	}
	g := New(mod, Options{Flow: &Flow{DispatchTick: time.Millisecond}})().(*Gateway)
	g.config = func(*fairbench.Scenario, int) ([]byte, error) { return []byte("hold"), nil }
	g.anyPriority = true
	return g
}

// TestHeldRequestsReachTheEngineWhenResumed runs the host package's hold
// filter (testdata/holdguest in "hold" mode: every request is held at the
// end of its body and resumed by the holding VM's next 1 ms tick) as the
// gateway: no request may reach the engine before its stream is resumed,
// each must reach it at the tick that resumes it (the first 1 ms boundary
// after its arrival), and every request must complete.
func TestHeldRequestsReachTheEngineWhenResumed(t *testing.T) {
	g := holdGateway(t)
	rec := &record{Gateway: g}
	s := holdScenario()
	if _, err := fairbench.Run(s, rec, fairbench.RunOptions{Mode: fairbench.ModeVLLM}); err != nil {
		t.Fatal(err)
	}
	if len(rec.done) < 40 {
		t.Fatalf("%d requests finished, want >= 40", len(rec.done))
	}
	for _, r := range rec.done {
		want := (r.Arrival/time.Millisecond + 1) * time.Millisecond
		if r.Submitted != want {
			t.Errorf("request %d arrived at %v, reached the engine at %v, want %v (the next tick of its VM)", r.ID, r.Arrival, r.Submitted, want)
		}
	}
	if g.Held() != 0 {
		t.Errorf("%d requests still held after the run", g.Held())
	}
}

// TestForwardedRequestsReachTheEngineAtOnce runs plugin.wasm (which
// forwards every request when it arrives, with or without flow control on
// an uncontended pool): each request reaches the engine at its arrival,
// with the priority the plugin wrote.
func TestForwardedRequestsReachTheEngineAtOnce(t *testing.T) {
	mod, err := host.Compile(context.Background(), wasmbuild.Plugin(t))
	if err != nil {
		t.Fatal(err)
	}
	g := New(mod, Options{})().(*Gateway)
	rec := &record{Gateway: g}
	if _, err := fairbench.Run(holdScenario(), rec, fairbench.RunOptions{Mode: fairbench.ModeVLLM}); err != nil {
		t.Fatal(err)
	}
	prios := map[int]int{}
	for _, r := range rec.done {
		if r.Submitted != r.Arrival {
			t.Errorf("request %d arrived at %v, reached the engine at %v: want at once", r.ID, r.Arrival, r.Submitted)
		}
		prios[r.Priority]++
	}
	if len(rec.done) < 40 || prios[0] == 0 {
		t.Errorf("%d requests, priorities %v: want >= 40 requests, some at priority 0 (team a's interactive, within share)", len(rec.done), prios)
	}
}

// TestClusterRouteAndConfig: requests go to the proxies by the
// scenario's weights, and each proxy's configuration is the scenario's
// with a cluster block of its own name on a key prefix of the run's.
func TestClusterRouteAndConfig(t *testing.T) {
	s := &fairbench.Scenario{Name: "r", Teams: []fairbench.TeamSpec{{Name: "a", Share: 0.5}}, GatewayReplicas: []int{7, 2, 1}}
	g := New(nil, Options{Cluster: &Cluster{Etcd: "http://127.0.0.1:1"}})().(*Gateway)
	g.s = s
	p := &proxies{g: g, split: s.GatewayReplicas, prefix: "/fairbench/run-1"}
	counts := make([]int, 3)
	for id := int64(1); id <= 1000; id++ {
		counts[p.route(id)]++
	}
	if counts[0] != 700 || counts[1] != 200 || counts[2] != 100 {
		t.Errorf("1000 requests routed %v, want [700 200 100]", counts)
	}
	cfg, err := p.clusterConfig(16, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !gjson.ValidBytes(cfg) {
		t.Fatalf("clusterConfig = %s: not JSON", cfg)
	}
	for k, want := range map[string]string{
		"cluster.etcd_cluster": "etcd", "cluster.replica": "r2", "cluster.key_prefix": "/fairbench/run-1",
		"cluster.lease_ttl": "1h0m0s", "cluster.sync_interval": "1s", "cluster.timeout": "1s", "pools.0.capacity": "16",
	} {
		if got := gjson.GetBytes(cfg, k).String(); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// TestEstimateMatchesBody checks that fairbench.PluginEstimateTokens, from
// which the reports compute the entry penalty's error, is the plugin's
// bytes/4 of the messages requestBody sends, also past the filler's length.
func TestEstimateMatchesBody(t *testing.T) {
	for _, p := range []int{1, 300, 6912, 9000, 30000} {
		msgs := gjson.GetBytes(requestBody("bench", p, 0), "messages").Raw
		want := (len(msgs) + 3) / 4
		in, out := fairbench.PluginEstimateTokens(p, 0)
		if in != want || out != 512 {
			t.Errorf("prompt %d: estimate %d / %d, want %d (bytes/4 of %d bytes) / 512", p, in, out, want, len(msgs))
		}
		if c := gjson.Get(msgs, "0.content").String(); len(c) != 4*p {
			t.Errorf("prompt %d: content of %d bytes, want %d", p, len(c), 4*p)
		}
	}
	r := responseBody(5, 3000, 40, 77, 2048)
	if c := gjson.GetBytes(r, "usage.prompt_tokens_details.cached_tokens"); c.Int() != 2048 {
		t.Errorf("usage = %s: want prompt_tokens_details.cached_tokens 2048", gjson.GetBytes(r, "usage").Raw)
	}
}

// TestEngineOffOptions: Flow.EnginePriority is written as the pool's
// engine_priority (absent otherwise), and EngineFCFS puts the engines
// under FCFS.
func TestEngineOffOptions(t *testing.T) {
	s := &fairbench.Scenario{Name: "f", Engine: fairbench.EngineSpec{Preset: "demo"}, Teams: []fairbench.TeamSpec{{Name: "a", Share: 1}}}
	cfg, err := Config(s, 16, &Flow{MaxQueueTime: time.Minute, EnginePriority: "off"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(cfg, "pools.0.engine_priority").String(); got != "off" {
		t.Errorf("engine_priority %q in %s, want off", got, cfg)
	}
	if cfg, _ = Config(s, 16, &Flow{MaxQueueTime: time.Minute}, nil); gjson.GetBytes(cfg, "pools.0.engine_priority").Exists() {
		t.Errorf("engine_priority written without EnginePriority: %s", cfg)
	}
	if p := (&Gateway{opt: Options{EngineFCFS: true}}).EnginePolicy(); p != fairbench.EngineFCFS {
		t.Errorf("EngineFCFS: policy %q, want %q", p, fairbench.EngineFCFS)
	}
	if p := (&Gateway{}).EnginePolicy(); p != fairbench.EnginePriority {
		t.Errorf("default policy %q, want %q", p, fairbench.EnginePriority)
	}
}

// TestUsersHeaderAndConfig: a request of a workload with a user carries
// it in x-user (and one without carries none), through the host package's
// hold filter; the configuration has user_header where a workload names a
// user, except with NoUsers.
func TestUsersHeaderAndConfig(t *testing.T) {
	g := holdGateway(t)
	seen := map[string]map[string]int{} // team → x-user value ("" none) → requests
	rec := &userRecord{Gateway: g, g: g, seen: seen}
	s := holdScenario()
	s.Workloads[0].User = "ann"
	if _, err := fairbench.Run(s, rec, fairbench.RunOptions{Mode: fairbench.ModeVLLM}); err != nil {
		t.Fatal(err)
	}
	if len(seen["a"]) != 1 || seen["a"]["ann"] < 20 || len(seen["b"]) != 1 || seen["b"][""] < 10 {
		t.Errorf("x-user by team: %v, want every request of a with ann, every one of b with none", seen)
	}
	for _, c := range []struct {
		name   string
		users  bool
		opt    Options
		header string // "": absent
	}{
		{"users", true, Options{}, UserHeader},
		{"users, flat", true, Options{NoUsers: true}, ""},
		{"no users", false, Options{}, ""},
	} {
		s := &fairbench.Scenario{Name: "u", Engine: fairbench.EngineSpec{Preset: "demo"}, Teams: []fairbench.TeamSpec{{Name: "a", Share: 1}},
			Workloads: []fairbench.WorkloadSpec{{Team: "a", Kind: fairbench.KindPoisson, Rate: 1}}}
		if c.users {
			s.Workloads[0].User = "ann"
		}
		cfg, err := New(nil, c.opt)().(*Gateway).config(s, 16)
		if err != nil {
			t.Fatal(err)
		}
		if h := gjson.GetBytes(cfg, "user_header"); h.String() != c.header || h.Exists() != (c.header != "") || !gjson.ValidBytes(cfg) {
			t.Errorf("%s: user_header %s in %s, want %q", c.name, h.Raw, cfg, c.header)
		}
	}
}

// userRecord wraps a gateway and counts, per team, the x-user values of
// the request headers of every finished request's stream.
type userRecord struct {
	fairbench.Gateway
	g    *Gateway
	seen map[string]map[string]int
}

func (r *userRecord) Finish(q *fairbench.Request) {
	u := ""
	for _, h := range r.g.open[q.ID].RequestHeaderMap() {
		if h[0] == UserHeader {
			u = h[1]
		}
	}
	if r.seen[q.Team] == nil {
		r.seen[q.Team] = map[string]int{}
	}
	r.seen[q.Team][u]++
	r.g.Finish(q)
}

// clock is a fairbench.Dispatcher that only tells the time.
type clock time.Duration

func (c clock) Now() time.Duration           { return time.Duration(c) }
func (clock) Submit(*fairbench.Request, int) {}
func (clock) InFlight() int                  { return 0 }
func (clock) After(time.Duration, func())    {}

// TestClusterWithinBound: a team's within-share requests past its
// reservation fail a cluster run, except with the user level on, where
// the excess is reported with its team and time; borrowers past C fail
// it either way.
func TestClusterWithinBound(t *testing.T) {
	for _, c := range []struct {
		name           string
		users          bool
		within, borrow int
		fails          bool
		excess         int
	}{
		{"within the reservation", false, 2, 0, false, 0},
		{"one past the reservation", false, 3, 0, true, 1},
		{"one past, users", true, 3, 0, false, 1},
		{"borrowers past C, users", true, 0, 5, true, 0},
	} {
		g := &Gateway{opt: Options{Flow: &Flow{MaxQueueTime: time.Minute}, Cluster: &Cluster{}}, d: clock(1500 * time.Millisecond), c: 4}
		p := &proxies{g: g, within: map[string]int{}, reserved: map[string]int{"a": 2}, bound: 4, users: c.users}
		for i := range c.within + c.borrow {
			p.checkBound(&fairbench.Request{ID: int64(i), Team: "a", Borrowing: i >= c.within})
		}
		if (g.err != nil) != c.fails || p.excess != c.excess {
			t.Errorf("%s: err %v, excess %d; want failing %v, excess %d", c.name, g.err, p.excess, c.fails, c.excess)
		}
		if c.excess > 0 && (p.excessTeam != "a" || p.excessAt != 1500*time.Millisecond) {
			t.Errorf("%s: excess of %q at %v, want a at 1.5s", c.name, p.excessTeam, p.excessAt)
		}
	}
}
