package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/tidwall/gjson"
)

// defaultTimeScale is the simulator's wall-clock seconds per simulated
// second (1: real time).
const defaultTimeScale = 1.0

// upstream is where the proxy forwards: a real vLLM URL or the embedded
// simulator.
type upstream struct {
	url     *url.URL
	desc    string
	closeFn func()
	// simulated is true for the embedded simulator; the counters are then
	// kept from its records of finished requests.
	simulated   bool
	preemptions atomic.Int64 // preemptions of finished requests
	preemptedBy atomic.Int64 // of which of borrowers (priority ≥ 10)
	finished    atomic.Int64 // finished engine requests
	// elastic are the simulators of the pools with capacity_from, by pool:
	// -engines scales them (elastic.go).
	elastic map[string]*vllmsim.Server
	// byPool counts the finished requests of each pool's engine (spill-over
	// shows in the fallback's).
	byPool map[string]*atomic.Int64
	// sims are the embedded simulator's engines, one a pool in the
	// configuration's order (nil for a real vLLM); tests read their
	// records.
	sims []*vllmsim.Server
}

// simLine summarises the simulator's preemptions ("" for a real vLLM).
func (u *upstream) simLine() string {
	if !u.simulated {
		return ""
	}
	return fmt.Sprintf("simulator: %d requests finished, %d preemptions (%d of borrowers)",
		u.finished.Load(), u.preemptions.Load(), u.preemptedBy.Load())
}

// close stops the simulator, if it is one. Safe on a nil or real upstream.
func (u *upstream) close() {
	if u != nil && u.closeFn != nil {
		u.closeFn()
		u.closeFn = nil
	}
}

// poolEngine is the simulated engine of a pool of the given capacity:
// vllmsim.DemoConfig (Llama-3.1-8B on an H100, priority policy, blocks of 16
// tokens) with max_num_seqs = capacity, 64 KV blocks (1024 tokens) per
// sequence and 128 batched tokens per sequence (at least DemoConfig's 2048
// and 4096 tokens of KV cache, one max_model_len). For capacity 16 it is
// DemoConfig: the demo's flood fills the running set and preemption happens.
func poolEngine(capacity int) vllmsim.EngineConfig {
	c := vllmsim.DemoConfig()
	c.MaxNumSeqs = max(capacity, 1)
	c.NumBlocks = max(64*c.MaxNumSeqs, c.MaxModelLen/c.BlockSize) + 1
	c.MaxBatchedTokens = max(c.MaxBatchedTokens, 128*c.MaxNumSeqs)
	return c
}

// simRouter is the embedded simulator: one vllmsim.Server (its own engine)
// per pool of the configuration, serving the pool's models, behind one
// address, as one vLLM deployment per pool behind a gateway. A generate
// request goes to the engine of the pool that lists its model, else to the
// pool with the wildcard "*", else to the first pool's engine (which then
// answers vLLM's 404 for an unknown model); a request under /pools/<pool>/
// goes to that pool's engine whatever its model (the proxy's route for the
// plugin's x-fairshare-pool, spill.go), and a fallback's engine serves the
// models of the pools that spill to it too. GET /v1/models lists every
// pool's models; other paths (/health, /metrics, /load, /version) answer from
// the first pool's engine. Safe for concurrent use.
type simRouter struct {
	pools   []configPool
	servers []*vllmsim.Server // same order as pools
}

// maxSimBody bounds the body the router reads to find the model (the
// simulator's own bound is 64 MiB).
const maxSimBody = 64 << 20

// route returns the engine serving model.
func (rt *simRouter) route(model string) *vllmsim.Server {
	for i, p := range rt.pools {
		if slices.Contains(p.Models, model) {
			return rt.servers[i]
		}
	}
	for i, p := range rt.pools {
		if slices.Contains(p.Models, "*") {
			return rt.servers[i]
		}
	}
	return rt.servers[0]
}

// ServeHTTP implements http.Handler.
func (rt *simRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.serveEngines(w, r) {
		return
	}
	// /pools/<name>/...: that pool's engine, whatever the model (the local
	// proxy's route for x-fairshare-pool: <name>, spill.go).
	for i, p := range rt.pools {
		if rest, ok := strings.CutPrefix(r.URL.Path, poolPrefix(p.Name)+"/"); ok {
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/" + rest
			r2.URL.RawPath = ""
			rt.servers[i].ServeHTTP(w, r2)
			return
		}
	}
	switch {
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions"):
		body, err := io.ReadAll(io.LimitReader(r.Body, maxSimBody+1))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rt.route(gjson.GetBytes(body, "model").String()).ServeHTTP(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		var data []string
		for _, s := range rt.servers {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r)
			for _, m := range gjson.GetBytes(rec.Body.Bytes(), "data").Array() {
				data = append(data, m.Raw)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[`+strings.Join(data, ",")+`]}`)
	default:
		rt.servers[0].ServeHTTP(w, r)
	}
}

// startSimulator starts the embedded simulated vLLM on a free local port:
// an engine per pool of cfg (see simRouter and poolEngine).
//
// A pool with capacity_from gets maxEngines(steps) engine cores of
// capacity_from.max_num_seqs sequences each, the first steps[0].N in
// service (one without -engines): steps are -engines.
func startSimulator(cfg configView, timeScale float64, caching bool, steps []engineStep) (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	up := &upstream{simulated: true, elastic: map[string]*vllmsim.Server{}, byPool: map[string]*atomic.Int64{}}
	rt := &simRouter{pools: cfg.Pools}
	var engines []string
	for _, p := range cfg.Pools {
		ec := poolEngine(p.Capacity)
		replicas := 1
		if p.MetricsCluster != "" {
			ec, replicas = poolEngine(p.EngineSeqs), maxEngines(steps)
		}
		ec.EnablePrefixCaching = caching
		if err := ec.Validate(); err != nil {
			ln.Close()
			return nil, fmt.Errorf("simulator: pool %s: %w", p.Name, err)
		}
		var more []string
		for _, m := range append(slices.Clone(p.Models), cfg.fallbackModels(p.Name)...) {
			if m != p.model() && !slices.Contains(more, m) {
				more = append(more, m)
			}
		}
		done := new(atomic.Int64)
		up.byPool[p.Name] = done
		srv := vllmsim.NewServer(ec, vllmsim.ServerOptions{Model: p.model(), Models: more, TimeScale: timeScale, Replicas: replicas,
			EnablePromptTokensDetails: caching,
			OnRecord: func(r vllmsim.Record) {
				up.finished.Add(1)
				done.Add(1)
				up.preemptions.Add(int64(r.Preemptions))
				if r.Priority >= borrowBase {
					up.preemptedBy.Add(int64(r.Preemptions))
				}
			}})
		rt.servers = append(rt.servers, srv)
		up.sims = append(up.sims, srv)
		e := fmt.Sprintf("%s: max_num_seqs %d, %d KV blocks × %d tokens", p.Name, ec.MaxNumSeqs, ec.NumBlocks-1, ec.BlockSize)
		if p.MetricsCluster != "" {
			if len(steps) > 0 {
				srv.SetActive(steps[0].N)
			}
			up.elastic[p.Name] = srv
			e = fmt.Sprintf("%s: %d engines in service of %d (capacity_from reads their /metrics), each max_num_seqs %d, %d KV blocks × %d tokens",
				p.Name, srv.Active(), replicas, ec.MaxNumSeqs, ec.NumBlocks-1, ec.BlockSize)
		}
		if caching {
			e += ", prefix caching"
		}
		engines = append(engines, e)
	}
	hs := &http.Server{Handler: rt}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the proxy reports failed upstream requests
		}
	}()
	u := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	speed := ""
	if timeScale != 1 {
		speed = fmt.Sprintf(", time ×%g", timeScale)
	}
	up.url = u
	up.desc = fmt.Sprintf("simulated vLLM at %s, one engine per pool (%s policy%s; %s)",
		u, vllmsim.DemoConfig().Policy, speed, strings.Join(engines, "; "))
	up.closeFn = func() {
		for _, s := range rt.servers {
			s.Close() // ends the streams in flight
		}
		hs.Close()
		<-served
	}
	return up, nil
}
