// Package wasmgw runs the real plugin.wasm as a gateway of the fairness
// benchmark: the module runs in the project's wazero host
// (hostcalls/host) with several worker VMs on a virtual clock that follows
// the simulation's time. Every request goes through an HTTP stream of the
// host exactly as Envoy would drive it (request headers, the JSON body, and
// on completion the response headers, a vLLM JSON response with usage, and
// the end of the stream), and the priority the plugin wrote into the
// forwarded body is what the simulated vLLM engine receives.
//
// A request the plugin holds (its body callback pauses the stream) reaches
// the engine only when the host has resumed the stream and passed the body
// upstream, from a tick or a queue wake-up of the holding VM; the gateway
// learns of it from the stream's state (Stream.RequestDone, LocalReply)
// after every host event and at every dispatch tick of virtual time, and
// submits the request then, with the priority of the body as forwarded.
//
// In a spill scenario (fairbench.SpillSpec) the configuration has one pool
// per scenario pool with hold_headers "on", and a request runs on the
// engines of the pool the plugin named in the request headers it released
// (spill.go).
//
// With Options.Cluster the gateway is several proxies, each its own host,
// sharing the pool through a real etcd with the plugin's cluster block
// (cluster.go has the picture and how virtual time meets etcd's wall
// clock).
package wasmgw

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/tidwall/gjson"
)

// DefaultVMs is the number of worker VMs of the host (Envoy's
// --concurrency): requests are spread over them round-robin, so the VMs
// share the pool's state through shared data as Envoy's workers do.
const DefaultVMs = 4

// UserHeader is the header a request names its user within its team in
// (fairbench.Request.User), the plugin's user_header in a scenario with
// users.
const UserHeader = "x-user"

// Tick is the plugin's tick period in the benchmark's configuration.
const Tick = time.Second

// DefaultDispatchTick is the plugin's dispatch_tick in the benchmark's
// flow-control configuration (the plugin's default).
const DefaultDispatchTick = 20 * time.Millisecond

// vmIDs makes every host's vm_id unique, so that parallel runs in one
// process never share a shared-data store.
var vmIDs atomic.Uint64

// Flow is the flow-control part of the plugin configuration
// (max_queue_time, dispatch_tick, per pool kv_tokens, per team
// lending_limit). Only a plugin.wasm with flow control accepts these
// fields.
type Flow struct {
	// MaxQueueTime is max_queue_time: how long a borrower may be held at
	// the gateway before a 429; 0 writes "0s", which turns holding off.
	MaxQueueTime time.Duration
	// DispatchTick is dispatch_tick, and the period at which the gateway
	// moves the host's clock while it holds requests (0:
	// DefaultDispatchTick).
	DispatchTick time.Duration
	// KV writes kv_tokens = num_gpu_blocks × block_size of the engine,
	// times the number of replicas (C / max_num_seqs).
	KV bool
	// Lend writes each team's lending_limit from the scenario.
	Lend bool
	// Work writes the pool's throughput (and throughput_burst) from the
	// scenario's plugin_throughput, when it declares one.
	Work bool
	// BatchAging, if not "", is written as batch_aging (else the plugin's
	// default applies).
	BatchAging string
	// EnginePriority, if not "", is written as the pool's engine_priority
	// ("off": the plugin writes no priority, and the gateway fails a run
	// in which a forwarded body carries one).
	EnginePriority string
}

// tick returns the dispatch tick.
func (f *Flow) tick() time.Duration {
	if f == nil || f.DispatchTick <= 0 {
		return DefaultDispatchTick
	}
	return f.DispatchTick
}

// Options configure a plugin gateway.
type Options struct {
	// VMs is the number of worker VMs (0: DefaultVMs); with Cluster each
	// proxy has ClusterVMs instead.
	VMs int
	// Name is the column name (default "plugin").
	Name string
	// Flow, if set, adds the flow-control fields to the configuration.
	Flow *Flow
	// Cluster, if set, runs the gateway as several proxies sharing the
	// pool through etcd (see Cluster).
	Cluster *Cluster
	// DefaultCost, if true, leaves the scenario's plugin_cost out of the
	// configuration: the plugin runs with its default cost weights (the
	// plugin-cost1 ablation).
	DefaultCost bool
	// EngineFCFS runs the engines under --scheduling-policy fcfs (vLLM's
	// default: the priority is ignored) instead of priority.
	EngineFCFS bool
	// NoSpill leaves the pools' spill_to out of a spill scenario's
	// configuration (spill.go): the no-spill column.
	NoSpill bool
	// NoUsers leaves user_header out of the configuration of a scenario
	// with users within teams: the x-user header is sent and ignored, each
	// team is flat (the fairbench.NoUsersColumn ablation).
	NoUsers bool
}

// Gateway is the plugin policy on plugin.wasm. Create one per run with New.
type Gateway struct {
	mod   *host.Module
	opt   Options
	d     fairbench.Dispatcher
	s     *fairbench.Scenario
	clock *host.VirtualClock
	h     *host.Host
	next  int
	c     int      // the pool's capacity C now
	cl    *proxies // the proxies of a cluster run (nil: one proxy)
	open  map[int64]*host.Stream
	held  []heldRequest
	wake  bool // a dispatch-tick wake-up is scheduled
	err   error
	spill *spillState // a spill scenario's bounds (spill.go), nil otherwise

	// engines and servers: the replicas' /metrics when the plugin reads
	// them (elastic.go).
	engines fairbench.EngineView
	servers []*engineServer

	// config builds the plugin configuration (tests replace it).
	config func(s *fairbench.Scenario, c int) ([]byte, error)
	// anyPriority accepts a forwarded body without priority (tests on a
	// module that is not the plugin).
	anyPriority bool

	// Logger, if set, receives the plugin's log lines (warnings and
	// above).
	Logger *slog.Logger
}

// heldRequest is a request whose stream the plugin has paused.
type heldRequest struct {
	r *fairbench.Request
	s *host.Stream
}

// New returns a constructor of plugin gateways on the compiled module mod.
// The module is shared; each run starts its own host.
func New(mod *host.Module, opt Options) fairbench.NewGateway {
	if opt.VMs <= 0 {
		opt.VMs = DefaultVMs
	}
	if opt.Name == "" {
		opt.Name = "plugin"
	}
	return func() fairbench.Gateway {
		g := &Gateway{mod: mod, opt: opt}
		g.config = func(s *fairbench.Scenario, c int) ([]byte, error) {
			cost := s.PluginCost
			if opt.DefaultCost {
				cost = nil
			}
			if s.Spill != nil {
				return spillConfig(s, opt.Flow, cost, !opt.NoSpill, !opt.NoUsers)
			}
			return config(s, c, opt.Flow, cost, !opt.NoUsers)
		}
		return g
	}
}

// Name implements fairbench.Gateway.
func (g *Gateway) Name() string { return g.opt.Name }

// EnginePolicy implements fairbench.Gateway: vLLM's priority scheduler,
// which the plugin's priorities need, unless Options.EngineFCFS.
func (g *Gateway) EnginePolicy() string {
	if g.opt.EngineFCFS {
		return fairbench.EngineFCFS
	}
	return fairbench.EnginePriority
}

// KVTokens returns the KV capacity in tokens of a pool of capacity c in
// scenario s: num_gpu_blocks × block_size of one engine, times c /
// max_num_seqs replicas.
func KVTokens(s *fairbench.Scenario, c int) (int, error) {
	e, err := fairbench.EngineConfig(s, fairbench.EnginePriority, fairbench.ModeVLLM)
	if err != nil {
		return 0, err
	}
	return e.NumBlocks * e.BlockSize * c / e.MaxNumSeqs, nil
}

// Config returns the plugin configuration of scenario s for capacity c: one
// pool matching every model, with the scenario's teams, half-life and
// entry penalty, and cost's weights (nil: the plugin's defaults, prompt 1,
// cached prompt 1, completion 2); with flow, the flow-control fields too;
// user_header UserHeader if a workload of s names a user.
func Config(s *fairbench.Scenario, c int, flow *Flow, cost *fairbench.CostSpec) ([]byte, error) {
	return config(s, c, flow, cost, true)
}

// config is Config, with user_header only if users (Options.NoUsers).
func config(s *fairbench.Scenario, c int, flow *Flow, cost *fairbench.CostSpec, users bool) ([]byte, error) {
	var b strings.Builder
	configHead(&b, s, cost, users)
	if flow != nil {
		fmt.Fprintf(&b, `"max_queue_time":%q,"dispatch_tick":%q,`, flow.MaxQueueTime.String(), flow.tick().String())
		if flow.BatchAging != "" {
			fmt.Fprintf(&b, `"batch_aging":%q,`, flow.BatchAging)
		}
	}
	fmt.Fprintf(&b, `"pools":[{"name":"bench","capacity":%d,`, c)
	if s.CapacityFromEngines {
		cf, err := capacityFromJSON(s)
		if err != nil {
			return nil, err
		}
		b.WriteString(cf)
	}
	if flow != nil && flow.KV {
		kv, err := KVTokens(s, c)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, `"kv_tokens":%d,`, kv)
	}
	if flow != nil && flow.Work && s.PluginThroughput > 0 {
		fmt.Fprintf(&b, `"throughput":%d,`, s.PluginThroughput)
		if s.PluginThroughputBurst > 0 {
			fmt.Fprintf(&b, `"throughput_burst":%q,`, (time.Duration(s.PluginThroughputBurst * float64(time.Second))).String())
		}
	}
	if flow != nil && flow.EnginePriority != "" {
		fmt.Fprintf(&b, `"engine_priority":%q,`, flow.EnginePriority)
	}
	b.WriteString(`"models":["*"],"teams":{`)
	for i, t := range s.Teams {
		if i > 0 {
			b.WriteString(",")
		}
		name, _ := json.Marshal(t.Name)
		fmt.Fprintf(&b, `%s:{"share":%s`, name, strconv.FormatFloat(t.Share, 'g', -1, 64))
		if t.Weight > 0 {
			fmt.Fprintf(&b, `,"weight":%s`, strconv.FormatFloat(t.Weight, 'g', -1, 64))
		}
		if flow != nil && flow.Lend && t.LendingLimit != nil {
			fmt.Fprintf(&b, `,"lending_limit":%s`, strconv.FormatFloat(*t.LendingLimit, 'g', -1, 64))
		}
		b.WriteString("}")
	}
	b.WriteString("}}]}")
	return []byte(b.String()), nil
}

// Start implements fairbench.Gateway: it starts a host with the scenario's
// configuration on a virtual clock at fairbench.Epoch.
func (g *Gateway) Start(d fairbench.Dispatcher, s *fairbench.Scenario, c int) error {
	g.d, g.s, g.c = d, s, c
	g.open = map[int64]*host.Stream{}
	if g.opt.Cluster != nil {
		if s.Spill != nil {
			return fmt.Errorf("wasmgw: spill scenario %s on several proxies: not supported", s.Name)
		}
		return g.startCluster()
	}
	if s.Spill != nil && s.CapacityFromEngines {
		return fmt.Errorf("wasmgw: scenario %s: spill and capacity_from_engines together: not supported", s.Name)
	}
	if s.Spill != nil {
		if err := g.startSpill(); err != nil {
			return fmt.Errorf("wasmgw: %w", err)
		}
	}
	var originalDst map[string]string
	if s.CapacityFromEngines {
		ev, ok := d.(fairbench.EngineView)
		if !ok {
			return fmt.Errorf("wasmgw: capacity_from_engines: the dispatcher shows no engines")
		}
		g.engines = ev
		g.syncEngines()
		originalDst = map[string]string{EnginesCluster: ""}
	}
	g.clock = host.NewVirtualClock(fairbench.Epoch.Add(d.Now()))
	cfg, err := g.config(s, c)
	if err != nil {
		return fmt.Errorf("wasmgw: %w", err)
	}
	h, err := g.mod.Start(context.Background(), host.Options{
		OriginalDst:     originalDst,
		HTTPCallsOnWait: originalDst != nil,
		VMs:             g.opt.VMs,
		VMID:            "fairness-bench-" + strconv.FormatUint(vmIDs.Add(1), 10),
		PluginName:      "fairshare",
		RootID:          "fairshare",
		PluginConfig:    cfg,
		Clock:           g.clock,
		Seed:            s.Seed + 1,
		LogLevel:        hostcalls.LogLevelWarn,
		Logger:          g.Logger,
		// hold_headers "on" in spill scenarios, as envoy.yaml sets it.
		AllowOnHeadersStopIteration: s.Spill != nil,
	})
	if err != nil {
		if g.opt.Flow != nil {
			return fmt.Errorf("wasmgw: start plugin with flow control (max_queue_time, dispatch_tick, kv_tokens, lending_limit: a plugin.wasm without flow control rejects them): %w", err)
		}
		return fmt.Errorf("wasmgw: start plugin: %w", err)
	}
	g.h = h
	return nil
}

// sync moves the host's clock to the simulation's time, running the ticks
// due on the way.
func (g *Gateway) sync() {
	if g.cl != nil {
		if g.engines != nil {
			g.syncEngines()
		}
		g.cl.stepTo(fairbench.Epoch.Add(g.d.Now()))
		return
	}
	if g.engines != nil {
		g.syncEngines()
		g.stepTo(fairbench.Epoch.Add(g.d.Now()))
		return
	}
	if d := fairbench.Epoch.Add(g.d.Now()).Sub(g.clock.Now()); d > 0 {
		g.h.Advance(d)
	}
}

// filler is repeated to build prompts of a given length (4 bytes a token,
// the plugin's estimate).
var filler = strings.Repeat("lorem ipsum dolor sit amet ", 1024)

// requestBody returns a chat completion request of about prompt tokens
// (by the plugin's bytes/4 estimate) with the client's max_tokens (none if
// 0): what a client sends, not how long the answer will be.
func requestBody(model string, prompt, maxTokens int) []byte {
	n := 4 * prompt
	var b strings.Builder
	b.Grow(n + 128)
	b.WriteString(`{"model":"` + model + `","messages":[{"role":"user","content":"`)
	for ; n > len(filler); n -= len(filler) {
		b.WriteString(filler)
	}
	b.WriteString(filler[:n])
	b.WriteString(`"}]`)
	if maxTokens > 0 {
		b.WriteString(`,"max_tokens":`)
		b.WriteString(strconv.Itoa(maxTokens))
	}
	b.WriteString(`}`)
	return []byte(b.String())
}

// responseBody returns a vLLM chat completion response with usage; its
// finish_reason is "length" if the output reached maxTokens, else "stop".
// cached < 0 writes "prompt_tokens_details":null (vLLM without
// --enable-prompt-tokens-details), else {"cached_tokens":cached}.
func responseBody(id int64, prompt, output, maxTokens, cached int) []byte {
	reason := "stop"
	if maxTokens > 0 && output >= maxTokens {
		reason = "length"
	}
	details := "null"
	if cached >= 0 {
		details = fmt.Sprintf(`{"cached_tokens":%d}`, cached)
	}
	return fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1767225600,"model":"bench",`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"logprobs":null,"finish_reason":%q,"stop_reason":null}],`+
		`"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":%s}}`,
		id, reason, prompt, prompt+output, output, details)
}

func (g *Gateway) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// Arrive implements fairbench.Gateway: it runs the request through a stream
// of the next VM; a request the plugin forwards at once is submitted now,
// one it holds when its stream is resumed.
func (g *Gateway) Arrive(r *fairbench.Request) {
	g.sync()
	var s *host.Stream
	if g.cl != nil {
		s = g.cl.newStream(r.ID)
	} else {
		s = g.h.NewStream(g.next % g.opt.VMs)
		g.next++
	}
	hs := [][2]string{
		{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "vllm"}, {":scheme", "http"},
		{"content-type", "application/json"}, {"x-team", r.Team}, {"x-request-class", r.Class.String()},
	}
	if r.User != "" {
		hs = append(hs, [2]string{UserHeader, r.User})
	}
	s.RequestHeaders(hs, false)
	model := "bench"
	if sp := g.s.Spill; sp != nil {
		model = spillModel(sp.Pools[sp.PoolOf(r.Team)].Name)
	}
	s.RequestBody(requestBody(model, r.Prompt, r.MaxTokens), true)
	g.held = append(g.held, heldRequest{r, s})
	g.poll()
}

// poll submits every held request whose stream the host has resumed (its
// body passed upstream), in arrival order, and fails the run on a local
// reply or a reset. If requests are still held it makes sure a wake-up at
// the next dispatch tick is scheduled.
func (g *Gateway) poll() {
	kept := g.held[:0]
	for _, p := range g.held {
		switch {
		case p.s.LocalReply() != nil:
			lr := p.s.LocalReply()
			g.fail(fmt.Errorf("wasmgw: request %d (team %s): local reply %d %s after %v at the gateway", p.r.ID, p.r.Team, lr.Status, lr.Body, g.d.Now()-p.r.Arrival))
		case p.s.RequestDone():
			g.submit(p.r, p.s)
		case p.s.Ended():
			g.fail(fmt.Errorf("wasmgw: request %d: stream reset while held: %s", p.r.ID, p.s.ResetReason()))
		default:
			kept = append(kept, p)
		}
	}
	clear(g.held[len(kept):])
	g.held = kept
	if len(g.held) > 0 && !g.wake {
		g.wake = true
		dt := g.opt.Flow.tick()
		now := g.d.Now()
		g.d.After(dt-now%dt, g.dispatchTick)
	}
}

// dispatchTick runs at the plugin's dispatch_tick (aligned on the run's
// start) while requests are held: the host's clock moves to now, running
// the holding VMs' ticks, and resumed requests are submitted.
func (g *Gateway) dispatchTick() {
	g.wake = false
	g.sync()
	g.poll()
}

// submit sends r to the engine with the priority of its forwarded body.
func (g *Gateway) submit(r *fairbench.Request, s *host.Stream) {
	prio := 0
	off := g.opt.Flow != nil && g.opt.Flow.EnginePriority == "off"
	if p := gjson.GetBytes(s.ForwardedRequestBody(), "priority"); p.Exists() {
		prio = int(p.Int())
		if off {
			g.fail(fmt.Errorf("wasmgw: request %d: forwarded body with priority %d under engine_priority \"off\"", r.ID, prio))
		}
	} else if !g.anyPriority && !off {
		g.fail(fmt.Errorf("wasmgw: request %d: forwarded body without priority", r.ID))
	}
	r.Borrowing = prio >= 10
	g.open[r.ID] = s
	if g.spill != nil {
		g.spillRouted(r, s)
	}
	g.d.Submit(r, prio)
	if g.engines != nil {
		s.SetUpstreamAddress(g.engineAddr(r.Replica))
	}
	if g.cl != nil {
		g.cl.checkBound(r)
	}
	if g.spill != nil {
		g.spillCheck(r)
	}
}

// Finish implements fairbench.Gateway: the stream gets vLLM's response with
// the usage and ends, so the plugin releases the grant and charges the
// team (and may dispatch held requests, on this VM or, through a shared
// queue, on the holder's).
func (g *Gateway) Finish(r *fairbench.Request) {
	s, ok := g.open[r.ID]
	if !ok {
		return
	}
	delete(g.open, r.ID)
	if g.cl != nil {
		g.cl.finish(r)
	}
	g.sync()
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	cached := -1
	if g.s.Engine.PromptTokensDetails {
		cached = r.CachedTokens
	}
	s.ResponseBody(responseBody(r.ID, r.Prompt, r.Output, r.MaxTokens, cached), true)
	s.Complete()
	g.poll()
}

// SetCapacity implements fairbench.Gateway: the plugin is reconfigured
// with the new capacity, as an operator (or a controller) would.
//
// With capacity_from_engines the plugin is not told: it reads the
// engines (elastic.go).
func (g *Gateway) SetCapacity(c int) {
	g.sync()
	g.c = c
	if g.engines != nil {
		if g.cl != nil {
			g.cl.capacityChanged(c)
		}
		g.poll()
		return
	}
	var err error
	if g.cl != nil {
		err = g.cl.reconfigure(c)
	} else {
		var cfg []byte
		cfg, err = g.config(g.s, c)
		if err == nil {
			err = g.h.Reconfigure(cfg)
		}
	}
	if err != nil {
		g.fail(fmt.Errorf("wasmgw: reconfigure: %w", err))
	}
	g.poll()
}

// Tick implements fairbench.Gateway: it advances the host's clock, which
// runs the plugin's ticks that are due.
func (g *Gateway) Tick() {
	g.sync()
	g.poll()
}

// Held returns the number of requests the plugin holds now.
func (g *Gateway) Held() int { return len(g.held) }

// Err returns the first failure of the plugin path (a local reply, a body
// without priority, a failed reconfiguration), or nil.
func (g *Gateway) Err() error { return g.err }

// Notes implements fairbench.Noter: for a cluster run, what the syncs
// cost (etcd calls per proxy and second, bytes per sync) and the loans'
// over-admission (proxies.stats), and the syncs that could not reach etcd (the plugin's cluster_failures_total: a call to
// etcd timed out on the wall clock; the proxy went on with its slice and
// synced at its next interval, as it would in production).
func (g *Gateway) Notes() []string {
	if g.cl == nil {
		return nil
	}
	out := []string{g.cl.stats()}
	if n, last := g.cl.failures(); n > 0 {
		out = append(out, fmt.Sprintf("%d syncs could not reach etcd (last: %s)", n, last))
	}
	return out
}

// Close implements fairbench.Gateway.
func (g *Gateway) Close() {
	if g.cl != nil {
		g.cl.close()
	}
	if g.h != nil {
		g.h.Close(context.Background())
	}
	g.closeEngines()
}

// configHead writes the opening of scenario s's plugin configuration to b:
// its half-life, the entry penalty, the tick, user_header (if users and a
// workload of s names a user) and cost's weights (nil: the plugin's
// defaults), each field followed by a comma.
func configHead(b *strings.Builder, s *fairbench.Scenario, cost *fairbench.CostSpec, users bool) {
	hl := fairbench.DefaultHalfLife
	if s.HalfLife > 0 {
		hl = fairbench.Sec(s.HalfLife)
	}
	fmt.Fprintf(b, `{"half_life":%q,"entry_penalty":true,"tick":%q,`, hl.String(), Tick.String())
	if users && s.HasUsers() {
		fmt.Fprintf(b, `"user_header":%q,`, UserHeader)
	}
	if cost != nil {
		p, cached, out := cost.Weights()
		fmt.Fprintf(b, `"cost":{"prompt_token":%s,"cached_prompt_token":%s,"completion_token":%s},`,
			strconv.FormatFloat(p, 'g', -1, 64), strconv.FormatFloat(cached, 'g', -1, 64), strconv.FormatFloat(out, 'g', -1, 64))
	}
}
