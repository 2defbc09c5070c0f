package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	hostproxy "github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
)

// Spill-over in the demo (a pool's spill_to, testdata/plugin/spill.json):
// the simulator serves each pool's engine under /pools/<name>/ too, the
// local proxy routes a request by the plugin's x-fairshare-pool header to
// that prefix (as envoy.yaml's routes do: hostproxy.NewRouted selects the
// route from the headers the plugin releases), a fallback's engine also
// serves the models of the pools that spill to it, a pool that is another
// pool's fallback gets no demo load of its own (so the flood of the other
// spills into it), and the view shows the counts of the status endpoint.

// poolPrefix is the simulator's path prefix of a pool's engine.
func poolPrefix(pool string) string { return "/pools/" + pool }

// routingHeader is the request header the plugin names a request's pool
// in (plugin.HeaderPool) once hold_headers "on" lets it.
const routingHeader = "x-fairshare-pool"

// poolRoutes returns the local proxy's route table for a simulator at sim:
// x-fairshare-pool: <pool> to that pool's engine, for every pool; nil for
// a real upstream or a configuration without spill-over (everything then
// takes the catch-all, as before).
func poolRoutes(c configView, sim *url.URL, simulated bool) []hostproxy.Route {
	if !simulated || !c.spills() {
		return nil
	}
	var rs []hostproxy.Route
	for _, p := range c.Pools {
		u := *sim
		u.Path = poolPrefix(p.Name)
		rs = append(rs, hostproxy.Route{Header: routingHeader, Value: p.Name, Upstream: &u})
	}
	return rs
}

// spills reports whether some pool names a fallback.
func (c configView) spills() bool {
	for _, p := range c.Pools {
		if len(p.SpillTo) > 0 {
			return true
		}
	}
	return false
}

// isFallback reports whether pool is another pool's fallback.
func (c configView) isFallback(pool string) bool {
	for _, p := range c.Pools {
		if p.Name != pool && slices.Contains(p.SpillTo, pool) {
			return true
		}
	}
	return false
}

// fallbackModels returns the models pool's engine serves for the pools
// that spill to it (their models, the plugin does not rewrite them).
func (c configView) fallbackModels(pool string) []string {
	var out []string
	for _, p := range c.Pools {
		if p.Name != pool && slices.Contains(p.SpillTo, pool) {
			for _, m := range p.Models {
				if m != "*" && !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// spillNote is the pool line's spill-over part: " · spilled to b: 12, in
// from a: 3" ("" when the pool neither spills nor is a fallback).
func spillNote(p *statusPool) string {
	var parts []string
	for i, to := range p.SpillTo {
		parts = append(parts, fmt.Sprintf("spilled to %s: %d", to, p.SpilledTo[i]))
	}
	if p.SpilledIn > 0 || p.Spill && len(p.SpillTo) == 0 {
		parts = append(parts, fmt.Sprintf("spilled in: %d", p.SpilledIn))
	}
	if len(parts) == 0 {
		return ""
	}
	return " · " + strings.Join(parts, ", ")
}

// routes is the local proxy's route table for this run (poolRoutes).
func (r *runner) routes() []hostproxy.Route {
	return poolRoutes(r.cfg, r.upstream.url, r.upstream.simulated)
}
