package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Capacity from the engines in the demo (a pool's capacity_from): the
// pool's simulated engines are the cores of one vllmsim.Server (vLLM's
// data parallelism: one server, one cache_config_info series per engine
// core), the plugin's capacity_from cluster is that server's /metrics
// (the sidecar topology: engines "cluster"), and -engines scales the
// engines in service on a schedule, so that the view shows C follow them.

// enginesPath is where the simulator answers a pool's own engine
// (/pools/<name>/metrics): the base URL of the pool's capacity_from
// cluster.
func enginesPath(pool string) string { return "/pools/" + pool }

// readCapacityFrom reads a pool's capacity_from block: the cluster and
// the sequences per engine core (the plugin's default when absent).
func readCapacityFrom(cp *configPool, p gjson.Result) {
	cf := p.Get("capacity_from")
	if !cf.IsObject() {
		return
	}
	cp.MetricsCluster = cf.Get("cluster").String()
	cp.EngineSeqs = 256
	if v := cf.Get("max_num_seqs"); v.Type == gjson.Number && v.Int() > 0 {
		cp.EngineSeqs = int(v.Int())
	}
	cp.LearnedEngines = cf.Get("engines").String() == "learned"
	cp.EngineHeader = cf.Get("header").String()
}

// engineStep is one step of -engines: from At on, N engines in service.
type engineStep struct {
	At time.Duration
	N  int
}

// parseEngines reads -engines: "N" or "N,T=N,...", the engines in service
// at the start and from each time T (a duration after the load starts)
// on, e.g. "2,10s=4,20s=1".
func parseEngines(s string) ([]engineStep, error) {
	if s == "" {
		return nil, nil
	}
	var out []engineStep
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		at, n := time.Duration(0), part
		if i > 0 {
			a, b, ok := strings.Cut(part, "=")
			if !ok {
				return nil, fmt.Errorf("-engines %q: step %q: want TIME=COUNT, e.g. 10s=4", s, part)
			}
			d, err := time.ParseDuration(a)
			if err != nil || d <= out[len(out)-1].At {
				return nil, fmt.Errorf("-engines %q: step %q: want a duration after the previous step's", s, part)
			}
			at, n = d, b
		}
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 || k > 64 {
			return nil, fmt.Errorf("-engines %q: %q: want an engine count in [1, 64]", s, n)
		}
		out = append(out, engineStep{At: at, N: k})
	}
	return out, nil
}

// defaultEngines is the schedule of a configuration with capacity_from
// run without -engines: two engines, a third at 10 s, one alone from 20 s.
var defaultEngines = []engineStep{{0, 2}, {10 * time.Second, 3}, {20 * time.Second, 1}}

// describeEngines writes a schedule as -engines takes it.
func describeEngines(steps []engineStep) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			fmt.Fprintf(&b, ",%s=", s.At)
		}
		b.WriteString(strconv.Itoa(s.N))
	}
	return b.String()
}

// maxEngines is the most engines a schedule puts in service (1 without
// one).
func maxEngines(steps []engineStep) int {
	n := 1
	for _, s := range steps {
		n = max(n, s.N)
	}
	return n
}

// metricsClusters are the proxy's http_call clusters for the pools with
// capacity_from: with learned false, for engines "cluster", each pool's
// cluster is its simulated engines' server; with learned true, for
// engines "learned", an ORIGINAL_DST cluster (the value is its header, ""
// for the default), which reaches the simulator at the address the
// proxy's responses named as upstream.address (its /metrics are the
// first pool's engines: a learned pool should be the configuration's
// first).
func (r *runner) metricsClusters(learned bool) map[string]string {
	if !r.upstream.simulated {
		return nil
	}
	m := map[string]string{}
	for _, p := range r.cfg.Pools {
		switch {
		case p.MetricsCluster == "" || p.LearnedEngines != learned:
		case learned:
			m[p.MetricsCluster] = p.EngineHeader
		default:
			m[p.MetricsCluster] = r.upstream.url.String() + enginesPath(p.Name)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// scaleEngines follows -engines: it puts the scheduled count of engines
// in service in every capacity_from pool's simulator (the view shows the
// plugin's C and its source follow).
func (r *runner) scaleEngines(ctx context.Context, steps []engineStep) {
	servers := r.upstream.elastic
	if len(steps) == 0 || len(servers) == 0 {
		return
	}
	start := time.Now()
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, st := range steps {
		if d := st.At - time.Since(start); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		for _, n := range names {
			servers[n].SetActive(st.N)
		}
	}
}

// serveEngines answers /pools/<name>/... from the pool's own server.
func (rt *simRouter) serveEngines(w http.ResponseWriter, r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/pools/")
	if !ok {
		return false
	}
	name, path, _ := strings.Cut(rest, "/")
	for i, p := range rt.pools {
		if p.Name == name {
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/" + path
			rt.servers[i].ServeHTTP(w, r2)
			return true
		}
	}
	http.NotFound(w, r)
	return true
}

// capacityNote is the view's note of a pool's capacity source: "" without
// capacity_from, else " (from the engines: 2)" or " (configured: no
// engine read)".
func capacityNote(p *statusPool) string {
	switch {
	case p.Source == "":
		return ""
	case strings.HasPrefix(p.Source, "engines"):
		return " read from " + p.Source
	}
	return " (configured: no engine read)"
}

// capacityFrom reports whether a pool has capacity_from.
func (c configView) capacityFrom() bool {
	for _, p := range c.Pools {
		if p.MetricsCluster != "" {
			return true
		}
	}
	return false
}
