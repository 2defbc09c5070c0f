package main

import (
	"context"
	"math"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/bench/fairness/wasmgw"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
	fsplugin "github.com/fairshare-wasm/fairshare/plugin"
)

var (
	modOnce sync.Once
	mod     *host.Module
	modErr  error
)

// plugin returns the gateway constructor on the real plugin.wasm (built
// once per test binary; a module that does not build fails the test).
func plugin(t *testing.T) fairbench.NewGateway {
	t.Helper()
	wasm := wasmbuild.Plugin(t)
	modOnce.Do(func() { mod, modErr = host.Compile(context.Background(), wasm) })
	if modErr != nil {
		t.Fatalf("compile plugin.wasm: %v", modErr)
	}
	return wasmgw.New(mod, wasmgw.Options{})
}

// reduced loads a scenario of testdata/scenarios and scales its times by f.
func reduced(t *testing.T, name string, f float64) *fairbench.Scenario {
	t.Helper()
	s, err := fairbench.LoadScenario(filepath.Join("..", "..", "testdata", "scenarios", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return s.Scaled(f)
}

func runOne(t *testing.T, s *fairbench.Scenario, gw fairbench.Gateway, mode string) *fairbench.Result {
	t.Helper()
	res, err := fairbench.Run(s, gw, fairbench.RunOptions{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkUtilisation asserts that the plugin keeps the pool as busy as FCFS:
// sequence slots busy at least 95% of FCFS's and, under vLLM main, service
// (goodput) at least 95% of FCFS's. Under PR #45561 the preemptions that
// protect within-share requests recompute their victims' tokens, so goodput
// is reported by the benchmark but not asserted here.
func checkUtilisation(t *testing.T, mode string, plug, fcfs *fairbench.Result) {
	t.Helper()
	if plug.Pool.SlotUtil < 0.95*fcfs.Pool.SlotUtil {
		t.Errorf("%s: sequence slots busy %.3f, want >= 95%% of FCFS's %.3f", mode, plug.Pool.SlotUtil, fcfs.Pool.SlotUtil)
	}
	if mode == fairbench.ModeVLLM && plug.Pool.ServiceRate < 0.95*fcfs.Pool.ServiceRate {
		t.Errorf("%s: service rate %.0f units/s, want >= 95%% of FCFS's %.0f", mode, plug.Pool.ServiceRate, fcfs.Pool.ServiceRate)
	}
	t.Logf("%s: slots busy %.3f vs FCFS %.3f; service rate %.3f of FCFS's", mode, plug.Pool.SlotUtil, fcfs.Pool.SlotUtil, plug.Pool.ServiceRate/fcfs.Pool.ServiceRate)
}

// TestFloodProtectsWithinShareInteractive runs S1 at half length: team
// chat, within its share, must see at most half the interactive p99 TTFT
// that FCFS gives it while team flood floods the pool.
func TestFloodProtectsWithinShareInteractive(t *testing.T) {
	s := reduced(t, "s1-flood", 0.5)
	newPlugin := plugin(t)
	alone := runOne(t, s.AloneScenario(), fairbench.NewFCFS(), fairbench.ModeVLLM)
	a99 := alone.Team("chat").Class[fairbench.Interactive].TTFTp99
	for _, mode := range fairbench.Modes {
		fcfs := runOne(t, s, fairbench.NewFCFS(), mode)
		plug := runOne(t, s, newPlugin(), mode)
		f99 := fcfs.Team("chat").Class[fairbench.Interactive].TTFTp99
		p99 := plug.Team("chat").Class[fairbench.Interactive].TTFTp99
		if c := plug.Team("chat").Class[fairbench.Interactive]; c.Requests < 20 || c.Unfinished > 0 {
			t.Fatalf("%s: chat interactive requests %d, unfinished %d: the run is too short to judge", mode, c.Requests, c.Unfinished)
		}
		if p99 > f99/2 {
			t.Errorf("%s: chat interactive p99 TTFT %v under the plugin, want <= half of FCFS's %v", mode, p99, f99)
		}
		t.Logf("%s: chat interactive p99 TTFT: plugin %v, FCFS %v (ratio %.3f); alone %v (plugin %.1f× alone)",
			mode, p99, f99, float64(p99)/float64(f99), a99, float64(p99)/float64(a99))
		checkUtilisation(t, mode, plug, fcfs)
	}
}

// TestSaturationConvergesToShares runs S2 at half length: with every team
// backlogged, each team's share of the service must be within ±5
// percentage points (absolute: |measured − entitled| <= 0.05) of its
// configured share.
func TestSaturationConvergesToShares(t *testing.T) {
	s := reduced(t, "s2-saturate", 0.5)
	newPlugin := plugin(t)
	for _, mode := range fairbench.Modes {
		fcfs := runOne(t, s, fairbench.NewFCFS(), mode)
		plug := runOne(t, s, newPlugin(), mode)
		for _, tr := range plug.Teams {
			if math.Abs(tr.SatShare-tr.Entitled) > 0.05 {
				t.Errorf("%s: team %s got %.3f of the service, want %.3f ± 0.05", mode, tr.Team, tr.SatShare, tr.Entitled)
			}
			t.Logf("%s: team %s share %.3f (entitled %.3f; FCFS gives %.3f)", mode, tr.Team, tr.SatShare, tr.Entitled, fcfs.Team(tr.Team).SatShare)
		}
		checkUtilisation(t, mode, plug, fcfs)
	}
}

// TestSameSeedSameResults runs a short S1 twice through plugin.wasm, and a
// short S6 (replicas change: the lockstep path) twice under VTC: the
// results must be identical.
func TestSameSeedSameResults(t *testing.T) {
	newPlugin := plugin(t)
	s1 := reduced(t, "s1-flood", 0.2)
	a := runOne(t, s1, newPlugin(), fairbench.Mode45561)
	b := runOne(t, s1, newPlugin(), fairbench.Mode45561)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of %s with the plugin and the same seed differ", s1.Name)
	}
	s6 := reduced(t, "s6-capacity", 0.2)
	c := runOne(t, s6, fairbench.NewVTC(), fairbench.ModeVLLM)
	d := runOne(t, s6, fairbench.NewVTC(), fairbench.ModeVLLM)
	if !reflect.DeepEqual(c, d) {
		t.Errorf("two runs of %s under VTC with the same seed differ", s6.Name)
	}
	e, err := fairbench.Run(s1, newPlugin(), fairbench.RunOptions{Mode: fairbench.Mode45561, Seed: s1.Seed + 1})
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a, e) {
		t.Errorf("runs of %s with seeds %d and %d are identical: the seed is not used", s1.Name, s1.Seed, s1.Seed+1)
	}
}

// TestKVScenarioBindsOnKV checks that S7 is what it claims: under FCFS the
// KV cache is nearly full and the engine preempts for it while most
// sequence slots stay free, so KV blocks, not max_num_seqs, bind.
func TestKVScenarioBindsOnKV(t *testing.T) {
	s := reduced(t, "s7-kv", 0.5)
	for _, mode := range fairbench.Modes {
		fcfs := runOne(t, s, fairbench.NewFCFS(), mode)
		p := fcfs.Pool
		if p.KVUtil < 0.8 || p.SlotUtil > 0.6 || p.Preemptions == 0 {
			t.Errorf("%s: KV blocks busy %.3f, slots busy %.3f, %d preemptions: want KV >= 0.8, slots <= 0.6 and preemptions (KV binds first)",
				mode, p.KVUtil, p.SlotUtil, p.Preemptions)
		}
		t.Logf("%s: KV blocks busy %.3f, slots busy %.3f, %d preemptions", mode, p.KVUtil, p.SlotUtil, p.Preemptions)
	}
}

// flowPlugin returns the flow-control plugin column (the options of
// `make fairness -flow`) on the real plugin.wasm.
func flowPlugin(t *testing.T) fairbench.NewGateway {
	t.Helper()
	plugin(t) // compiles the module
	p, _, _ := flowOptions()
	return wasmgw.New(mod, p)
}

// TestFlowHoldsBorrowersOnly runs S1 at half length with flow control:
// some of flood's borrowers must be held at the gateway, none of chat's
// requests (within share) may be, and nothing may stay held after a long
// drain.
func TestFlowHoldsBorrowersOnly(t *testing.T) {
	s := reduced(t, "s1-flood", 0.5)
	for _, mode := range fairbench.Modes {
		gw := flowPlugin(t)().(*wasmgw.Gateway)
		// A drain long enough for the held backlog to clear: a request
		// still held after it has leaked.
		res, err := fairbench.Run(s, gw, fairbench.RunOptions{Mode: mode, Drain: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		f, c := res.Team("flood"), res.Team("chat")
		if n := f.Class[0].Held + f.Class[1].Held; n == 0 {
			t.Errorf("%s: no flood request held at the gateway, want its borrowers held while the pool is full", mode)
		}
		if n := c.Class[fairbench.Interactive].Held; n != 0 {
			t.Errorf("%s: %d of chat's requests held, want none (within share)", mode, n)
		}
		if gw.Held() != 0 {
			t.Errorf("%s: %d requests still held after the run", mode, gw.Held())
		}
	}
}

// flowKnownFailures are the acceptance targets that the flow-control
// plugin column misses today ("scenario/mode/target"), as measured by
// `make fairness` (docs/results/README.md). TestFlowControlAcceptance
// fails on any other target that misses, and on any of these that holds:
// the list can only shrink, and no target is weakened to pass.
var flowKnownFailures = map[string]bool{
	// S5, about 4 points off in service (owner 0.54) and borrower's p99
	// about 1.6× VTC's worst: owner, idle until 60 s, wakes with a full
	// work bucket (10 s of its rate, a few points of the 90 s window),
	// and what neither bucket covers goes by Fair Tree rank, owner first
	// by its lighter history (docs/fairness.md, RATIONALE.md "Where flow
	// control still loses").
	"s5-reclaim/vllm/worst p99 TTFT / VTC's worst":    true,
	"s5-reclaim/vllm/max share error (points)":        true,
	"s5-reclaim/pr45561/worst p99 TTFT / VTC's worst": true,
	"s5-reclaim/pr45561/max share error (points)":     true,
	// S10 (users within teams), measured at 27× (worst user ann) and
	// 20× (bob) of alone (0.02-0.03 s alone; 0.47-0.63 s with users on
	// vLLM main, 0.03-0.55 s with PR 45561; about 9 s with the team
	// flat): b and c fill every sequence search's light users leave, so
	// under vLLM main a light user's within-share request waits for one
	// to free behind a full engine (without script, the same run gives
	// them 0.41-0.75 s), and in either mode a few of their requests
	// arrive while their user is at its portion (2 of search's 8) with
	// no worse teammate's over sequence to take, and wait at the gateway;
	// and search's share moves by 1.18 points with users on vLLM main
	// (0.27 with PR 45561).
	"s10-users/vllm/interactive p99 TTFT of a light user / alone, worst user":    true,
	"s10-users/pr45561/interactive p99 TTFT of a light user / alone, worst user": true,
	"s10-users/vllm/team's service share with users − without (points)":          true,
}

// TestFlowControlAcceptance asserts the flow-control acceptance targets
// (fairbench.FlowTargets) on the flow-control plugin column, every
// synthetic scenario (S1–S7, S2b, S9, S10) at full length, both engine
// behaviours, as `make fairness` measures them (with the flat column
// plugin-nousers where a workload names a user, for S10's
// users_team_share_vs_flat_points); the targets in flowKnownFailures must
// still miss. The trace scenarios (several minutes each through
// plugin.wasm) are measured by `make fairness` and their targets tabled
// in docs/results/README.md and docs/fairness.md, not asserted here.
func TestFlowControlAcceptance(t *testing.T) {
	scenarios, err := fairbench.LoadScenarios(filepath.Join("..", "..", "testdata", "scenarios"))
	if err != nil {
		t.Fatal(err)
	}
	policies := append(fairbench.Baselines(), flowPlugin(t))
	p, _, _ := flowOptions()
	flat := []fairbench.Variant{noUsersVariant(mod, p)}
	seen := map[string]bool{}
	for _, s := range scenarios {
		if len(s.TraceWindows()) > 0 || s.Spill != nil {
			continue // spill scenarios: TestSpillAcceptance
		}
		rep, err := fairbench.RunScenario(s, fairbench.SuiteOptions{Policies: policies, Variants: flat})
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range fairbench.FlowTargets(rep, "plugin") {
			key := tg.Scenario + "/" + tg.Mode + "/" + tg.Name
			seen[key] = true
			switch {
			case tg.OK() && flowKnownFailures[key]:
				t.Errorf("%v: now holds: remove it from flowKnownFailures", tg)
			case !tg.OK() && !flowKnownFailures[key]:
				t.Error(tg)
			default:
				t.Log(tg)
			}
		}
	}
	for key := range flowKnownFailures {
		if !seen[key] {
			t.Errorf("flowKnownFailures: %q is no target", key)
		}
	}
}

// TestFlowSameSeedSameResults runs a short S6 (held requests, dispatch
// ticks, reconfigurations) twice through the flow-control plugin column:
// the results must be identical.
func TestFlowSameSeedSameResults(t *testing.T) {
	newPlugin := flowPlugin(t)
	s := reduced(t, "s6-capacity", 0.3)
	a := runOne(t, s, newPlugin(), fairbench.ModeVLLM)
	b := runOne(t, s, newPlugin(), fairbench.ModeVLLM)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of %s with flow control and the same seed differ", s.Name)
	}
	if n := a.Team("a").Class[0].Held + a.Team("a").Class[1].Held; n == 0 {
		t.Errorf("no request of team a held in %s: the run does not exercise holding", s.Name)
	}
}

// TestReplicasNoflowKeepReservations runs S1 and S2 at half length on
// three proxies without flow control (plugin-noflow-3x): a team's
// within-share requests across the proxies must never exceed its
// reservation (the gateway checks it after every submission and fails
// the run). The shares against one proxy are logged: without holding, a
// reservation slot freed at one proxy waits for the team's next arrival
// there, and small teams lose (RATIONALE.md, "Where slices lose").
func TestReplicasNoflowKeepReservations(t *testing.T) {
	one := plugin(t)
	many := replicasNoflowPlugin(mod, testEtcd(t))
	for _, name := range []string{"s1-flood", "s2-saturate"} {
		s := reduced(t, name, 0.5)
		for _, mode := range fairbench.Modes {
			o := runOne(t, s, one(), mode)
			r := runOne(t, s, many(), mode)
			for i, tr := range r.Teams {
				t.Logf("%s/%s: team %s share %.3f on three proxies, %.3f on one", name, mode, tr.Team, tr.ServiceShare, o.Teams[i].ServiceShare)
			}
		}
	}
}

// TestUsersPutLightUsersFirst runs S10 at a third of its length, both
// engine modes, through the flow-control plugin column (user_header
// x-user) and its flat column plugin-nousers (the same configuration
// without it): with users, the worst interactive p99 TTFT of search's
// light users ann, bob and cyd is at most a third of theirs with the team
// flat (where script's flood holds the team's seats and their requests
// borrow behind it), and neither column loses anything (the team counts,
// the users' counts and the tokens charged against the responses'). The
// full-length targets against running alone are `make fairness`'s.
func TestUsersPutLightUsersFirst(t *testing.T) {
	s := reduced(t, "s10-users", 1.0/3)
	newPlugin := flowPlugin(t)
	p, _, _ := flowOptions()
	flat := noUsersVariant(mod, p).New
	worst := func(r *fairbench.Result) time.Duration {
		var w time.Duration
		for _, u := range s.AloneUsers {
			c := r.User("search", u).Class[fairbench.Interactive]
			if c.Requests < 15 || c.Unfinished > 0 {
				t.Fatalf("%s: %s's interactive requests %d, unfinished %d: the run is too short to judge", r.Policy, u, c.Requests, c.Unfinished)
			}
			w = max(w, c.TTFTp99)
		}
		return w
	}
	for _, mode := range fairbench.Modes {
		u, f := runOne(t, s, newPlugin(), mode), runOne(t, s, flat(), mode)
		wu, wf := worst(u), worst(f)
		if wu > wf/3 {
			t.Errorf("%s: light users' worst interactive p99 TTFT %v with users, want <= a third of %v with the team flat", mode, wu, wf)
		}
		for _, r := range []*fairbench.Result{u, f} {
			if r.Ledger == nil || r.Ledger.Lost() != 0 || r.Ledger.Users != (r == u) {
				t.Errorf("%s/%s: ledger %+v, want nothing lost (users counted: %v)", mode, r.Policy, r.Ledger, r == u)
			}
		}
		t.Logf("%s: light users' worst p99 %v with users, %v flat; search's share %.3f / %.3f", mode, wu, wf, u.Team("search").ServiceShare, f.Team("search").ServiceShare)
	}
}

// TestNativeFlowAgesAsPlugin: the native flow ablation forecasts what
// plugin.wasm decides, so it ages batch requests as the plugin does by
// default (the plugin column runs with the default batch_aging).
func TestNativeFlowAgesAsPlugin(t *testing.T) {
	if fairbench.NativeBatchAging != fsplugin.DefaultBatchAging {
		t.Errorf("fairbench.NativeBatchAging = %v, want plugin.DefaultBatchAging %v", fairbench.NativeBatchAging, fsplugin.DefaultBatchAging)
	}
}

// testEtcd starts a real etcd embedded in the test (startEtcd) and
// returns its client URL.
func testEtcd(t *testing.T) string {
	t.Helper()
	url, stop, err := startEtcd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// TestReplicasActAsOnePool asserts the replicas targets on the scenarios
// with gateway_replicas (S1, S2), at full length as `make fairness`
// measures them, both engine modes: the flow-control plugin column run
// as three proxies of plugin.wasm sharing the pool through a real etcd,
// 70/20/10 of the requests, against the same plugin on one proxy: every
// team's share within ±2 points, the protected team's interactive p99
// TTFT within 1.2×, and never more borrowers in flight than C nor more
// within-share requests of a team than its reservation (the stated bound
// without faults is 0; the gateway checks both after every submission
// and fails the run). Not at half length: S1's p99 is then the worst of
// some 60 requests, and one request prefilled behind a burst of
// dispatches decides it (RATIONALE.md, "Where slices lose").
func TestReplicasActAsOnePool(t *testing.T) {
	one := flowPlugin(t)
	many := replicasPlugin(mod, testEtcd(t))
	for _, name := range []string{"s1-flood", "s2-saturate"} {
		s := reduced(t, name, 1)
		if len(s.GatewayReplicas) != 3 {
			t.Fatalf("%s: gateway_replicas %v, want three proxies", name, s.GatewayReplicas)
		}
		for _, mode := range fairbench.Modes {
			o := runOne(t, s, one(), mode)
			r := runOne(t, s, many(), mode)
			ts, err := fairbench.ReplicaTargets(s, mode, o, r, replicaBound)
			if err != nil {
				t.Fatal(err)
			}
			for _, tg := range ts {
				if !tg.OK() {
					t.Error(tg)
				} else {
					t.Log(tg)
				}
			}
			t.Logf("%s/%s: most in flight: %d on one proxy, %d on three; notes %q", name, mode, o.Pool.MaxInFlight, r.Pool.MaxInFlight, r.Notes)
			for i, tr := range r.Teams {
				t.Logf("%s/%s: team %s share %.3f on three proxies, %.3f on one", name, mode, tr.Team, tr.ServiceShare, o.Teams[i].ServiceShare)
			}
		}
	}
}

// TestReplicasSameSeedSameResults runs a short S1 twice through the
// replicas column (three proxies, one etcd): each sync's calls complete
// before the simulation moves on, so the results must be identical, and
// no sync may have failed (a call to etcd answered later than the 1 s
// timeout, which would make the runs differ).
func TestReplicasSameSeedSameResults(t *testing.T) {
	plugin(t) // compiles the module
	many := replicasPlugin(mod, testEtcd(t))
	s := reduced(t, "s1-flood", 0.2)
	a := runOne(t, s, many(), fairbench.Mode45561)
	b := runOne(t, s, many(), fairbench.Mode45561)
	// The notes: what the syncs cost (etcd's answers carry revisions, so
	// their bytes differ between runs on one etcd), then failed syncs.
	if len(a.Notes) != 1 || len(b.Notes) != 1 {
		t.Errorf("failed syncs: %q, %q", a.Notes, b.Notes)
	}
	t.Logf("notes: %q", a.Notes)
	a.Notes, b.Notes = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of %s on three proxies with the same seed differ", s.Name)
	}
	if a.Team("flood").Borrowing == 0 {
		t.Errorf("no borrower in %s on three proxies: the run does not exercise the slices", s.Name)
	}
}

// TestEngineOffHoldsSharesOnFCFS runs S2 through the engine-off column
// (engine_priority "off", engines under FCFS): no forwarded body carries a
// priority (the gateway fails the run otherwise) and the engine-off target,
// read from the scenario file, holds in every mode.
func TestEngineOffHoldsSharesOnFCFS(t *testing.T) {
	plugin(t) // compiles the module
	s := reduced(t, "s2-saturate", 1)
	rep, err := fairbench.RunScenario(s, fairbench.SuiteOptions{Policies: []fairbench.NewGateway{fairbench.NewFCFS, wasmgw.New(mod, engineOffOptions())}})
	if err != nil {
		t.Fatal(err)
	}
	ts := fairbench.EngineOffTargets(rep, fairbench.EngineOffColumn)
	if len(ts) != len(rep.Modes) {
		t.Fatalf("targets %v, want one per mode", ts)
	}
	for _, tg := range ts {
		if !tg.OK() {
			t.Error(tg)
		} else {
			t.Log(tg)
		}
	}
	if col := rep.Column(fairbench.ModeVLLM, fairbench.EngineOffColumn); col == nil || col.Pool.ServiceRate < 0.97*rep.Column(fairbench.ModeVLLM, "fcfs").Pool.ServiceRate {
		t.Errorf("engine-off column %+v: want at least 0.97 of FCFS's service", col)
	}
}

// TestElasticFollowsEngines runs S9 at a third of its length twice
// through the flow-control plugin column, which reads the engines over
// the host's http_call path and is never told C: the runs are identical
// (the reads wait for the simulation), C follows every change of the
// engines, and nothing is lost.
func TestElasticFollowsEngines(t *testing.T) {
	newPlugin := flowPlugin(t)
	s := reduced(t, "s9-elastic", 1.0/3)
	a := runOne(t, s, newPlugin(), fairbench.ModeVLLM)
	b := runOne(t, s, newPlugin(), fairbench.ModeVLLM)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of %s with the same seed differ", s.Name)
	}
	lag, n := a.CapacityLag()
	if n != len(s.CapacityChanges) || lag > 3*2*time.Second {
		t.Errorf("C followed %d changes of %d, worst lag %v; want every change within three 2 s intervals", n, len(s.CapacityChanges), lag)
	}
	if a.Ledger == nil || a.Ledger.Lost() != 0 {
		t.Errorf("ledger %+v: want nothing lost", a.Ledger)
	}
	t.Logf("worst lag %v over %d changes; ledger %+v", lag, n, *a.Ledger)
}

// TestSpillAcceptance runs S8 (two pools, spill-over) at full length
// through plugin.wasm with and without spill_to: every target of the
// scenario file holds in both engine modes (the gateway also fails the
// run if a pool ever has more than C borrowers, or a spilled request
// leaves its fallback past C, on the plugin's count after any
// submission), and the spill column moved requests while the no-spill
// column moved none.
func TestSpillAcceptance(t *testing.T) {
	s := reduced(t, "s8-spill", 1)
	plugin(t)
	sp, nsp := spillOptions()
	rep, err := fairbench.RunSpillScenario(s, wasmgw.New(mod, sp), wasmgw.New(mod, nsp), fairbench.Modes, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.Modes {
		ts := rep.SpillTargets(m)
		if len(ts) != 5 {
			t.Errorf("%s: %d targets, want 5", m, len(ts))
		}
		for _, tg := range ts {
			if !tg.OK() {
				t.Error(tg)
			} else {
				t.Log(tg)
			}
		}
		rs := rep.Results[m]
		if in := rs[0].Spill.Pools[1].SpilledIn; in == 0 {
			t.Errorf("%s: nothing spilled into ondemand", m)
		}
		for _, p := range rs[1].Spill.Pools {
			if p.SpilledIn != 0 || p.SpilledOut != 0 {
				t.Errorf("%s: the no-spill column moved requests: %+v", m, p)
			}
		}
	}
}

// TestFleetFollowsEngines asserts S9's targets on its fleets, at full
// length as `make fairness` measures them, both engine modes: the
// replicas column (three proxies, 70/20/10: gateway_replicas) and the
// fleet column of every gateway_fleets entry (ten proxies, split
// unevenly), every proxy reading the engines (capacity_from, engines
// "learned") and the fleet agreeing on one C from the readings its
// members publish in their reports. The targets are the scenario file's
// capacity_from targets on the fleet (fairbench.ReplicaTargets): C follows
// every change of the engines within capacity_follow_s, every phase's
// shares within phase_share_error_points, nothing lost; and never more
// borrowers in flight than the largest C of the run (the gateway also
// checks every team's within-share requests against its reservation after
// every submission and fails the run). About a minute on two cores, the
// ten proxies half of it.
func TestFleetFollowsEngines(t *testing.T) {
	one := flowPlugin(t)
	url := testEtcd(t)
	s := reduced(t, "s9-elastic", 1)
	if !s.CapacityFromEngines || len(s.GatewayReplicas) != 3 || len(s.GatewayFleets) == 0 || len(s.CapacityChanges) == 0 {
		t.Fatalf("%s: capacity_from_engines %v, gateway_replicas %v, gateway_fleets %v, %d capacity changes; want the engines read by three proxies and a larger fleet while they change",
			s.Name, s.CapacityFromEngines, s.GatewayReplicas, s.GatewayFleets, len(s.CapacityChanges))
	}
	type fleet struct {
		name string
		gw   fairbench.NewGateway
	}
	fs := []fleet{{replicasColumn, replicasPlugin(mod, url)}}
	for _, n := range s.GatewayFleets {
		fs = append(fs, fleet{fleetColumn(n), fleetPlugin(mod, url, n)})
	}
	// The targets each fleet must meet: the scenario's three
	// capacity_from targets and the borrowers' bound.
	const targets = 4
	for _, mode := range fairbench.Modes {
		o := runOne(t, s, one(), mode)
		for _, f := range fs {
			r := runOne(t, s, f.gw(), mode)
			ts, err := fairbench.ReplicaTargets(s, mode, o, r, replicaBound)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != targets {
				t.Errorf("%s/%s: %d targets %v, want %d", mode, f.name, len(ts), ts, targets)
			}
			for _, tg := range ts {
				if !tg.OK() {
					t.Errorf("%s: %v", f.name, tg)
				} else {
					t.Logf("%s: %v", f.name, tg)
				}
			}
		}
	}
}
