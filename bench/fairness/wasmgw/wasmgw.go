// Package wasmgw runs the real plugin.wasm as a gateway of the fairness
// benchmark: the module runs in the project's wazero host
// (hostcalls/host) with several worker VMs on a virtual clock that follows
// the simulation's time. Every request goes through an HTTP stream of the
// host exactly as Envoy would drive it (request headers, the JSON body, and
// on completion the response headers, a vLLM JSON response with usage, and
// the end of the stream), and the priority the plugin wrote into the
// forwarded body is what the simulated vLLM engine receives.
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

// Tick is the plugin's tick period in the benchmark's configuration.
const Tick = time.Second

// vmIDs makes every host's vm_id unique, so that parallel runs in one
// process never share a shared-data store.
var vmIDs atomic.Uint64

// Gateway is the plugin policy on plugin.wasm. Create one per run with New.
type Gateway struct {
	mod   *host.Module
	vms   int
	d     fairbench.Dispatcher
	s     *fairbench.Scenario
	clock *host.VirtualClock
	h     *host.Host
	next  int
	open  map[int64]*host.Stream
	err   error

	// Logger, if set, receives the plugin's log lines (warnings and
	// above).
	Logger *slog.Logger
}

// New returns a constructor of plugin gateways on the compiled module mod,
// each with vms worker VMs (0: DefaultVMs). The module is shared; each run
// starts its own host.
func New(mod *host.Module, vms int) fairbench.NewGateway {
	if vms <= 0 {
		vms = DefaultVMs
	}
	return func() fairbench.Gateway { return &Gateway{mod: mod, vms: vms} }
}

// Name implements fairbench.Gateway.
func (g *Gateway) Name() string { return "plugin" }

// EnginePolicy implements fairbench.Gateway: the plugin needs vLLM's
// priority scheduler.
func (g *Gateway) EnginePolicy() string { return fairbench.EnginePriority }

// Config returns the plugin configuration of scenario s for capacity c: one
// pool matching every model, with the scenario's teams, half-life and the
// default cost weights (prompt 1, completion 2) and entry penalty.
func Config(s *fairbench.Scenario, c int) []byte {
	hl := fairbench.DefaultHalfLife
	if s.HalfLife > 0 {
		hl = fairbench.Sec(s.HalfLife)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{"half_life":%q,"entry_penalty":true,"tick":%q,"pools":[{"name":"bench","capacity":%d,"models":["*"],"teams":{`,
		hl.String(), Tick.String(), c)
	for i, t := range s.Teams {
		if i > 0 {
			b.WriteString(",")
		}
		name, _ := json.Marshal(t.Name)
		fmt.Fprintf(&b, `%s:{"share":%s`, name, strconv.FormatFloat(t.Share, 'g', -1, 64))
		if t.Weight > 0 {
			fmt.Fprintf(&b, `,"weight":%s`, strconv.FormatFloat(t.Weight, 'g', -1, 64))
		}
		b.WriteString("}")
	}
	b.WriteString("}}]}")
	return []byte(b.String())
}

// Start implements fairbench.Gateway: it starts a host with the scenario's
// configuration on a virtual clock at fairbench.Epoch.
func (g *Gateway) Start(d fairbench.Dispatcher, s *fairbench.Scenario, c int) error {
	g.d, g.s = d, s
	g.open = map[int64]*host.Stream{}
	g.clock = host.NewVirtualClock(fairbench.Epoch.Add(d.Now()))
	h, err := g.mod.Start(context.Background(), host.Options{
		VMs:          g.vms,
		VMID:         "fairness-bench-" + strconv.FormatUint(vmIDs.Add(1), 10),
		PluginName:   "fairshare",
		RootID:       "fairshare",
		PluginConfig: Config(s, c),
		Clock:        g.clock,
		Seed:         s.Seed + 1,
		LogLevel:     hostcalls.LogLevelWarn,
		Logger:       g.Logger,
	})
	if err != nil {
		return fmt.Errorf("wasmgw: start plugin: %w", err)
	}
	g.h = h
	return nil
}

// sync moves the host's clock to the simulation's time, running the ticks
// due on the way.
func (g *Gateway) sync() {
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
func requestBody(prompt, maxTokens int) []byte {
	n := 4 * prompt
	for n > len(filler) {
		n = len(filler)
	}
	var b strings.Builder
	b.Grow(n + 128)
	b.WriteString(`{"model":"bench","messages":[{"role":"user","content":"`)
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
func responseBody(id int64, prompt, output, maxTokens int) []byte {
	reason := "stop"
	if maxTokens > 0 && output >= maxTokens {
		reason = "length"
	}
	return fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1767225600,"model":"bench",`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"logprobs":null,"finish_reason":%q,"stop_reason":null}],`+
		`"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":null}}`,
		id, reason, prompt, prompt+output, output)
}

func (g *Gateway) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// Arrive implements fairbench.Gateway: it runs the request through a stream
// of the next VM and submits it with the priority of the forwarded body.
func (g *Gateway) Arrive(r *fairbench.Request) {
	g.sync()
	s := g.h.NewStream(g.next % g.vms)
	g.next++
	s.RequestHeaders([][2]string{
		{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "vllm"}, {":scheme", "http"},
		{"content-type", "application/json"}, {"x-team", r.Team}, {"x-request-class", r.Class.String()},
	}, false)
	s.RequestBody(requestBody(r.Prompt, r.MaxTokens), true)
	prio := 0
	if lr := s.LocalReply(); lr != nil {
		g.fail(fmt.Errorf("wasmgw: request %d: local reply %d %s", r.ID, lr.Status, lr.Body))
	} else if p := gjson.GetBytes(s.ForwardedRequestBody(), "priority"); !p.Exists() {
		g.fail(fmt.Errorf("wasmgw: request %d: forwarded body without priority", r.ID))
	} else {
		prio = int(p.Int())
	}
	r.Borrowing = prio >= 10
	g.open[r.ID] = s
	g.d.Submit(r, prio)
}

// Finish implements fairbench.Gateway: the stream gets vLLM's response with
// the usage and ends, so the plugin releases the grant and charges the
// team.
func (g *Gateway) Finish(r *fairbench.Request) {
	s, ok := g.open[r.ID]
	if !ok {
		return
	}
	delete(g.open, r.ID)
	g.sync()
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	s.ResponseBody(responseBody(r.ID, r.Prompt, r.Output, r.MaxTokens), true)
	s.Complete()
}

// SetCapacity implements fairbench.Gateway: the plugin is reconfigured
// with the new capacity, as an operator (or a controller) would.
func (g *Gateway) SetCapacity(c int) {
	g.sync()
	if err := g.h.Reconfigure(Config(g.s, c)); err != nil {
		g.fail(fmt.Errorf("wasmgw: reconfigure: %w", err))
	}
}

// Tick implements fairbench.Gateway: it advances the host's clock, which
// runs the plugin's ticks that are due.
func (g *Gateway) Tick() { g.sync() }

// Err returns the first failure of the plugin path (a local reply, a body
// without priority, a failed reconfiguration), or nil.
func (g *Gateway) Err() error { return g.err }

// Close implements fairbench.Gateway.
func (g *Gateway) Close() {
	if g.h != nil {
		g.h.Close(context.Background())
	}
}
