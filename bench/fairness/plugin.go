package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/bench/fairness/wasmgw"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/etcdtest"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// queueTime is max_queue_time of the flow-control columns: long enough
// that no request times out in any scenario, so every column serves the
// same requests.
const queueTime = 600 * time.Second

// flowOptions returns the options of the flow-control plugin column and
// of its ablations, in column order: `plugin` (holding on, kv_tokens from
// the engine, the scenario's lending limits), `plugin-noflow` (no
// flow-control field: the plugin before flow control), `plugin-nohold`
// (max_queue_time "0s"), `plugin-nokv` (no kv_tokens), `plugin-nolend`
// (no lending limit). Every flow-control column declares the scenario's
// plugin_throughput (the work resource) but the seats column
// (seatsVariant).
func flowOptions() (plugin wasmgw.Options, ablations []wasmgw.Options, notes []string) {
	plugin = wasmgw.Options{Flow: &wasmgw.Flow{MaxQueueTime: queueTime, KV: true, Lend: true, Work: true}}
	ablations = []wasmgw.Options{
		{Name: "plugin-noflow"},
		{Name: "plugin-nohold", Flow: &wasmgw.Flow{KV: true, Lend: true, Work: true}},
		{Name: "plugin-nokv", Flow: &wasmgw.Flow{MaxQueueTime: queueTime, Lend: true, Work: true}},
		{Name: "plugin-nolend", Flow: &wasmgw.Flow{MaxQueueTime: queueTime, KV: true, Work: true}},
	}
	notes = []string{
		"plugin.wasm without any flow-control field (its defaults: no holding, no kv_tokens, no lending limit): the plugin before flow control",
		"plugin.wasm with max_queue_time \"0s\": nothing is held, borrowers go to vLLM at once at their borrowing priority (kv_tokens and lending limits still set)",
		"plugin.wasm without kv_tokens: capacity in sequences only",
		"plugin.wasm without the scenario's lending limits (run only where the scenario has some)",
	}
	return plugin, ablations, notes
}

// engineOffOptions are the options of the fairbench.EngineOffColumn: the
// `plugin` column's flow control with engine_priority "off", in front of
// engines under --scheduling-policy fcfs (vLLM's default), so that
// holding at the gateway alone enforces the reservations.
func engineOffOptions() wasmgw.Options {
	p, _, _ := flowOptions()
	f := *p.Flow
	f.EnginePriority = "off"
	return wasmgw.Options{Name: fairbench.EngineOffColumn, Flow: &f, EngineFCFS: true}
}

// engineOffNote says what the fairbench.EngineOffColumn is, in the
// ablation tables.
const engineOffNote = "plugin.wasm with flow control as the `plugin` column and `engine_priority: \"off\"`, in front of vLLM engines under `--scheduling-policy fcfs` (vLLM's default): no forwarded body carries a priority (the run fails otherwise), so only holding at the gateway enforces the reservations. Its borrowing counts are 0: with no priority in the body the benchmark cannot see a request's standing"

// engineOffSummary introduces the engine-off table of the summary.
const engineOffSummary = "What holding alone buys in front of an engine that ignores priorities: the `" + fairbench.EngineOffColumn + "` column (the `plugin` column's flow control with `engine_priority: \"off\"`, engines under `--scheduling-policy fcfs`) on every scenario, in its ablation table; on the scenarios that set one, its target: every saturated team's share within a bound, in points, when only holding enforces the reservations."

// replicaBound is the overshoot over C of the borrowers in flight, and
// over a team's reservation of its within-share requests in flight, that
// the replicas column accepts: the plugin's stated bound without faults
// (RATIONALE.md, "The overshoot bound").
const replicaBound = 0

// replicasColumn is the name of the replicas column.
const replicasColumn = "plugin-3x"

// replicasNote says what the replicas column is, in the ablation tables.
const replicasNote = "plugin.wasm with flow control as the `plugin` column, run as three proxies (one host, one VM and one virtual clock each) with the cluster block against one real etcd embedded in the benchmark; 70/20/10 of the requests (the scenario's gateway_replicas); slices synced every second, each sync's calls to etcd completed before the simulation moves on"

// replicasSummary introduces the replicas table of the summary.
const replicasSummary = "The `plugin` column (one proxy) against `" + replicasColumn + "`: the same plugin.wasm run as three proxies sharing the pool through a real etcd (the `cluster` block), with 70/20/10 of the requests; the scenarios that set `gateway_replicas`. The targets: every team's share of the service within ±2 points of the single proxy's, the `alone` team's interactive p99 TTFT at most 1.2× the single proxy's, and the requests in flight bounded: checked after every submission (the run fails otherwise), borrowers at most C and every team's within-share requests at most its reservation. Within-share requests are never held, so the total in flight passes C by the within-share requests sent while the pool is full, on one proxy as on three (most in flight, reported). The last column is every team's mean within-share requests in flight over the window (submission to last token): how much of its reservation its own requests use, on one proxy and across the proxies."

// replicasNoflowColumn is the name of the replicas column without flow
// control.
const replicasNoflowColumn = "plugin-noflow-3x"

// replicasNoflowNote says what the replicas column without flow control
// is.
const replicasNoflowNote = "`plugin-noflow` (no flow-control field: nothing held) as three proxies, as `" + replicasColumn + "`"

// replicasNoflowSummary introduces the replicas table without flow
// control.
const replicasNoflowSummary = "The same comparison without flow control (`plugin-noflow` against `" + replicasNoflowColumn + "`): nothing is held, a request is within its team's share or borrows when it arrives, and borrowers go at once whatever the load (no bound on them, on one proxy as on three). A reservation slot freed at one proxy is taken only by the team's next arrival at that proxy, so small teams' reservations, split across three proxies, stay partly idle (RATIONALE.md, \"Where slices lose\"); the targets are shown, not asserted."

// costNote says what the cost ablation column is.
const costNote = "the `plugin` column with the plugin's default cost weights (prompt_token 1, cached_prompt_token 1, completion_token 2) instead of the scenario's plugin_cost (run only where the scenario sets one)"

// costVariant returns the plugin-cost1 ablation: the plugin column p with
// the default cost weights, skipped where the scenario sets no
// plugin_cost (it would be the plugin column itself).
func costVariant(mod *host.Module, p wasmgw.Options) fairbench.Variant {
	p.Name = fairbench.CostAblation
	p.DefaultCost = true
	return fairbench.Variant{New: wasmgw.New(mod, p), Note: costNote,
		Skip: func(s *fairbench.Scenario) bool { return s.PluginCost == nil }}
}

// seatsNote says what the seats ablation column is.
const seatsNote = "the `plugin` column without the scenario's plugin_throughput: reservations in sequences and KV tokens only, as every column was before the work resource (run only where the scenario declares one)"

// seatsVariant returns the plugin-seats ablation: the plugin column p
// without the throughput reservation, skipped where the scenario declares
// none (it would be the plugin column itself).
func seatsVariant(mod *host.Module, p wasmgw.Options) fairbench.Variant {
	p.Name = fairbench.SeatsAblation
	f := *p.Flow
	f.Work = false
	p.Flow = &f
	return fairbench.Variant{New: wasmgw.New(mod, p), Note: seatsNote,
		Skip: func(s *fairbench.Scenario) bool { return s.PluginThroughput == 0 }}
}

// noUsersNote says what the flat column (fairbench.NoUsersColumn) is.
const noUsersNote = "the `plugin` column without `user_header`: the requests still carry `x-user`, which the plugin ignores, so every team is flat (run only where a workload names a user)"

// noUsersVariant returns the fairbench.NoUsersColumn ablation: the plugin
// column p without user_header, skipped where no workload names a user
// (it would be the plugin column itself).
func noUsersVariant(mod *host.Module, p wasmgw.Options) fairbench.Variant {
	p.Name = fairbench.NoUsersColumn
	p.NoUsers = true
	return fairbench.Variant{New: wasmgw.New(mod, p), Note: noUsersNote,
		Skip: func(s *fairbench.Scenario) bool { return !s.HasUsers() }}
}

// replicasNoUsersNote says what the flat column of the replicas column is.
var replicasNoUsersNote = "`" + replicasColumn + "` without `user_header` (every team flat), run only where a workload names a user"

// replicasNoUsersPlugin returns the flat column of the replicas column
// (fairbench.FlatColumn): the replicas column without user_header.
func replicasNoUsersPlugin(mod *host.Module, url string) fairbench.NewGateway {
	p, _, _ := flowOptions()
	p.Name = fairbench.FlatColumn(replicasColumn)
	p.NoUsers = true
	p.Cluster = &wasmgw.Cluster{Etcd: url, Bound: replicaBound}
	return wasmgw.New(mod, p)
}

// replicasPlugin returns the replicas column: the flow-control plugin
// column run as the scenario's gateway_replicas proxies of plugin.wasm,
// each with the cluster block on the etcd at url.
func replicasPlugin(mod *host.Module, url string) fairbench.NewGateway {
	p, _, _ := flowOptions()
	p.Name = replicasColumn
	p.Cluster = &wasmgw.Cluster{Etcd: url, Bound: replicaBound}
	return wasmgw.New(mod, p)
}

// fleets are the numbers of proxies of the fleet columns (plugin-<n>x):
// a scenario runs those its gateway_fleets lists.
var fleets = []int{10, 50}

// fleetColumn is the name of the fleet column of n proxies.
func fleetColumn(n int) string { return fmt.Sprintf("plugin-%dx", n) }

// fleetNote says what the fleet column of n proxies is.
func fleetNote(n int) string {
	return fmt.Sprintf("the `%s` column as %d proxies (the scenario's gateway_fleets), split unevenly: proxy i gets 12/(i+1) parts of the requests, rounded, at least 1 (%v)",
		replicasColumn, n, fairbench.FleetSplit(n))
}

// fleetSummary introduces the fleet table of n proxies in the summary.
func fleetSummary(n int) string {
	return fmt.Sprintf("The `plugin` column (one proxy) against `%s`: the same plugin.wasm as %d proxies sharing the pool through the same etcd, the requests split unevenly (%v parts), so that every team's requests reach more proxies than most teams have reserved slots; the scenarios whose gateway_fleets lists %d. The same targets and bound as for three proxies.",
		fleetColumn(n), n, fairbench.FleetSplit(n), n)
}

// fleetPlugin returns the fleet column of n proxies: the replicas column
// with n proxies split by fairbench.FleetSplit.
func fleetPlugin(mod *host.Module, url string, n int) fairbench.NewGateway {
	p, _, _ := flowOptions()
	p.Name = fleetColumn(n)
	p.Cluster = &wasmgw.Cluster{Etcd: url, Bound: replicaBound, Split: fairbench.FleetSplit(n)}
	return wasmgw.New(mod, p)
}

// replicasNoflowPlugin returns the replicas column without flow control:
// the plugin-noflow column as the scenario's gateway_replicas proxies.
func replicasNoflowPlugin(mod *host.Module, url string) fairbench.NewGateway {
	return wasmgw.New(mod, wasmgw.Options{Name: replicasNoflowColumn, Cluster: &wasmgw.Cluster{Etcd: url, Bound: replicaBound}})
}

// needsEtcd reports whether a scenario to run (all, or those named in
// only) runs the replicas column.
func needsEtcd(scenarios []*fairbench.Scenario, only string) bool {
	for _, s := range scenarios {
		if len(s.GatewayReplicas) > 0 && (only == "" || contains(strings.Split(only, ","), s.Name)) {
			return true
		}
	}
	return false
}

// startEtcd starts a real single-node etcd in this process
// (internal/etcdtest), with its data in a temporary directory, and
// returns its client URL and a function that stops it and removes the
// directory.
func startEtcd() (string, func(), error) {
	dir, err := os.MkdirTemp("", "fairness-etcd-")
	if err != nil {
		return "", nil, err
	}
	e, err := etcdtest.New(dir)
	if err == nil {
		err = e.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("embedded etcd: %w", err)
	}
	return e.URL(), func() { e.Stop(); os.RemoveAll(dir) }, nil
}

// nativeFlowVariants are the ablation columns while plugin.wasm has no
// flow control: the core's flow control run natively, with and without
// kv_tokens and lending limits, as a forecast of the plugin column.
func nativeFlowVariants() []fairbench.Variant {
	return []fairbench.Variant{
		fairbench.AblationVariant(fairbench.AblationNativeFlow),
		fairbench.AblationVariant(fairbench.AblationNativeFlowNoKV),
		nolend(fairbench.AblationVariant(fairbench.AblationNativeFlowNoLend)),
		fairbench.AblationVariant(fairbench.AblationNativeFlowMaxTokens),
	}
}

// nolend marks a no-lending-limit variant to be skipped where no team has
// a lending limit.
func nolend(v fairbench.Variant) fairbench.Variant {
	v.Skip = fairbench.NoLendingLimits
	return v
}

// spillOptions are the two columns of a spill scenario (S8): the `plugin`
// column's flow control with the pools' spill_to, and without.
func spillOptions() (spill, noSpill wasmgw.Options) {
	p, _, _ := flowOptions()
	spill = p
	spill.Name = fairbench.SpillColumn
	noSpill = p
	noSpill.Name = fairbench.NoSpillColumn
	noSpill.NoSpill = true
	return spill, noSpill
}

// pluginGateways returns the constructor of the plugin column, the extra
// plugin columns of the ablation tables, the column's label and the spill
// scenarios' two columns (spillOptions; nil unless wasm with flow): "wasm"
// builds ./cmd/plugin for wasip1 and runs it in the wazero host, "native"
// runs package fairshare directly. With flow (wasm only) the plugin runs
// with flow control and its ablations are plugin-noflow, plugin-nohold,
// plugin-nokv, plugin-nolend, native-flow, plugin-cost1, plugin-seats and
// plugin-nousers (each where the scenario calls for it); without, the
// ablations are the native flow-control forecasts (nativeFlowVariants). A
// prebuilt module can be named by wasmFile or the FAIRSHARE_WASM
// environment variable (as make test does). With flow and etcdURL, the
// ablations end with the replicas columns (plugin-3x, plugin-nousers-3x
// where a workload names a user, plugin-noflow-3x, and the fleet columns
// plugin-10x, plugin-50x where gateway_fleets lists them) on the
// scenarios that set gateway_replicas, its proxies syncing through the
// etcd at etcdURL. With
// flow the last ablation is fairbench.EngineOffColumn (engine_priority
// "off" in front of FCFS engines).
func pluginGateways(kind, wasmFile string, flow bool, etcdURL string) (fairbench.NewGateway, []fairbench.Variant, string, []fairbench.NewGateway, error) {
	switch kind {
	case "native":
		if flow {
			return nil, nil, "", nil, fmt.Errorf("-flow needs -plugin wasm")
		}
		return fairbench.NewNativePlugin, nativeFlowVariants(), "native (package fairshare, no Wasm)", nil, nil
	case "wasm":
		if wasmFile == "" {
			wasmFile = os.Getenv("FAIRSHARE_WASM")
		}
		var wasm []byte
		var err error
		if wasmFile != "" {
			wasm, err = os.ReadFile(wasmFile)
		} else {
			wasm, err = wasmbuild.Build(wasmbuild.PluginPackage)
		}
		if err != nil {
			return nil, nil, "", nil, err
		}
		mod, err := host.Compile(context.Background(), wasm)
		if err != nil {
			return nil, nil, "", nil, fmt.Errorf("compile plugin.wasm: %w", err)
		}
		label := fmt.Sprintf("wasm (plugin.wasm in the wazero host, %d VMs, virtual clock", wasmgw.DefaultVMs)
		if !flow {
			return wasmgw.New(mod, wasmgw.Options{}), nativeFlowVariants(), label + ", no flow control)", nil, nil
		}
		p, abl, notes := flowOptions()
		var vs []fairbench.Variant
		for i, o := range abl {
			v := fairbench.Variant{New: wasmgw.New(mod, o), Note: notes[i]}
			if o.Flow != nil && !o.Flow.Lend {
				v.Skip = fairbench.NoLendingLimits // the same as the plugin column there
			}
			vs = append(vs, v)
		}
		vs = append(vs, fairbench.AblationVariant(fairbench.AblationNativeFlow))
		vs = append(vs, costVariant(mod, p), seatsVariant(mod, p), noUsersVariant(mod, p))
		if etcdURL != "" {
			noReplicas := func(s *fairbench.Scenario) bool { return len(s.GatewayReplicas) == 0 }
			vs = append(vs, fairbench.Variant{New: replicasPlugin(mod, etcdURL), Note: replicasNote, Skip: noReplicas},
				fairbench.Variant{New: replicasNoUsersPlugin(mod, etcdURL), Note: replicasNoUsersNote,
					Skip: func(s *fairbench.Scenario) bool { return noReplicas(s) || !s.HasUsers() }},
				fairbench.Variant{New: replicasNoflowPlugin(mod, etcdURL), Note: replicasNoflowNote, Skip: noReplicas})
			for _, n := range fleets {
				vs = append(vs, fairbench.Variant{New: fleetPlugin(mod, etcdURL, n), Note: fleetNote(n),
					Skip: func(s *fairbench.Scenario) bool { return !slices.Contains(s.GatewayFleets, n) }})
			}
		}
		vs = append(vs, fairbench.Variant{New: wasmgw.New(mod, engineOffOptions()), Note: engineOffNote})
		sp, nsp := spillOptions()
		spill := []fairbench.NewGateway{wasmgw.New(mod, sp), wasmgw.New(mod, nsp)}
		return wasmgw.New(mod, p), vs, fmt.Sprintf("%s, flow control: max_queue_time %v, dispatch_tick %v, batch_aging %v (the default), kv_tokens, lending limits)",
			label, queueTime, wasmgw.DefaultDispatchTick, fairbench.NativeBatchAging), spill, nil
	}
	return nil, nil, "", nil, fmt.Errorf("-plugin: unknown %q (wasm, native)", kind)
}
