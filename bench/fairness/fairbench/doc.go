// Package fairbench is the library of the fairness benchmark
// (bench/fairness): a discrete-event simulation in virtual time of a shared
// vLLM pool behind a gateway, fed by per-team workload generators.
//
// A [Scenario] (a small JSON file under testdata/scenarios) names the pool
// (its capacity C, the engine knobs), the teams with their shares, one
// generator per stream of requests (open-loop Poisson, closed-loop
// concurrency or a burst; prompt and output length distributions; the share
// of interactive requests), capacity changes over time and a warm-up phase
// whose usage is history for the measured part.
//
// A [Gateway] sits between the generators and the engines: it receives each
// arrival, decides when to submit it and with which vLLM priority, and is
// told of every completion. The baselines are [NewFCFS] (pass-through, vLLM
// fcfs), [NewClassPriority] (priority 0 interactive / 1 batch), [NewQuota]
// (static per-team concurrency ceilings, not work-conserving) and [NewVTC]
// (a gateway-side fair queue on virtual token counters). The fairshare
// plugin runs either as the real plugin.wasm in the wazero host
// (package bench/fairness/wasmgw, also as several proxies sharing the pool
// through etcd for a scenario's gateway_replicas; [ReplicaTargets] and
// [WriteReplicas] compare them with one proxy) or natively on package
// fairshare.
//
// A scenario with a "spill" section ([SpillSpec], S8) has several pools,
// each with its teams and engine replicas; a request runs on the replicas
// of the pool its gateway names (the plugin's x-fairshare-pool), and
// [RunSpillScenario] runs only the plugin, with and without spill_to,
// reported by [WriteSpill].
//
// A workload with a "user" sends it in the x-user header (users within
// teams, S10, users.go): the plugin column divides each team among its
// users, [NoUsersColumn] runs it with the team flat, the report has a
// table per (team, user), and [UsersTargets] compares the light users
// with their alone-users run and the team's share with the flat
// column's.
//
// [Run] drives one scenario with one gateway in virtual time and returns a
// [Result]: per team and class, throughput, TTFT and end-to-end latency
// percentiles, preemptions; for the pool, utilisation, Jain's index on
// share-normalised throughput and the service gap between backlogged teams
// (VTC's measure). [WriteMarkdown] and the chart functions turn results into
// the tables and PNGs of docs/results.
//
// Everything is deterministic: every random stream is a PCG seeded from the
// scenario seed and the stream's identity, and the simulation has one event
// queue ordered by (time, sequence number).
package fairbench
