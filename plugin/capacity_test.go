package plugin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/tidwall/gjson"
)

// fakeEngine is a vLLM server's /metrics: one engine core with blocks ×
// 16 tokens of KV cache, or down (503, as a stopping server's proxy
// answers, or hanging past the plugin's timeout).
type fakeEngine struct {
	srv    *httptest.Server
	mu     sync.Mutex
	blocks int
	down   bool
	hang   bool // answers only when the test ends: past the plugin's timeout
	hits   atomic.Int64
	done   chan struct{}
}

func newFakeEngine(t *testing.T, blocks int) *fakeEngine {
	e := &fakeEngine{blocks: blocks, done: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		e.mu.Lock()
		blocks, down, hang := e.blocks, e.down, e.hang
		e.mu.Unlock()
		if hang {
			<-e.done
			return
		}
		if down || r.URL.Path != "/metrics" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"+
			"# TYPE vllm:num_requests_running gauge\n"+
			"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0\n"+
			"# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"+
			"# TYPE vllm:cache_config_info gauge\n"+
			"vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"%d\",num_gpu_blocks_override=\"None\"} 1.0\n", blocks)
	}))
	t.Cleanup(e.srv.Close)
	t.Cleanup(func() { close(e.done) }) // before Close, which waits for the handlers
	return e
}

func (e *fakeEngine) set(f func(e *fakeEngine)) {
	e.mu.Lock()
	f(e)
	e.mu.Unlock()
}

// addr is the engine's address as Envoy's upstream.address writes it.
func (e *fakeEngine) addr() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// elasticConfig: pool "small" (fallback capacity 4, kv_tokens 1000, teams
// a 0.5 and b 0.25) reading its engines per mode; 8 sequences per engine.
func elasticConfig(from string) string {
	return `{"default_max_tokens": 16, "tick": "1s", "status_token": "sesame",
  "pools": [{"name": "small", "capacity": 4, "kv_tokens": 1000, "models": ["m"],
    "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}},
    "capacity_from": {"max_num_seqs": 8, "interval": "2s", "timeout": "1s", ` + from + `}}]}`
}

func startElastic(t *testing.T, cfg string, vms int, opts func(o *host.Options)) (*host.Host, *host.VirtualClock) {
	t.Helper()
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	o := host.Options{VMs: vms, PluginName: pluginName, VMID: fmt.Sprintf("%s-%p", t.Name(), t), PluginConfig: []byte(cfg),
		Clock: clock, Seed: 7, Profile: hostProfile, HTTPCallsOnWait: true}
	opts(&o)
	h, err := compiled(t).Start(context.Background(), o)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	noHostErrors(t, h)
	return h, clock
}

// poll moves the clock by d one tick (1 s) at a time, running the ticks
// (the poller's rounds), and after each tick delivers the answers of the
// reads it started (HTTPCallsOnWait): every run sees them at the same
// instants, whatever the wall clock does.
func poll(h *host.Host, d time.Duration) {
	for ; d > 0; d -= time.Second {
		h.Advance(min(d, time.Second))
		h.Wait()
	}
}

func capacityStatus(t *testing.T, h *host.Host) gjson.Result {
	t.Helper()
	return gjson.Get(statusBody(t, h), "pools.0")
}

func wantCapacity(t *testing.T, h *host.Host, c, kv int, source string) {
	t.Helper()
	p := pool(t, h, "small")
	st := capacityStatus(t, h)
	if p.Capacity() != c || p.KVTokens() != int64(kv) || st.Get("capacity_source").String() != source {
		t.Fatalf("pool: capacity %d, kv_tokens %d, status source %q; want %d, %d, %q (status %s)", p.Capacity(), p.KVTokens(),
			st.Get("capacity_source").String(), c, kv, source, st.Raw)
	}
	if m := h.Metrics()["fairshare.pool.small.capacity"]; m.Value != int64(c) {
		t.Errorf("capacity gauge %d, want %d", m.Value, c)
	}
}

// The sidecar topology: the one engine behind a cluster. C and K follow
// it, the configuration is the fallback while it cannot be read, and the
// requests in flight keep their standing across every change.
func TestWasmCapacityFromLocalEngine(t *testing.T) {
	e := newFakeEngine(t, 100) // 1600 tokens
	h, _ := startElastic(t, elasticConfig(`"cluster": "local-vllm"`), 2, func(o *host.Options) {
		o.Clusters = map[string]string{"local-vllm": e.srv.URL}
	})
	wantCapacity(t, h, 4, 1000, "config")
	// a's 2 reserved slots of 4, taken: within share.
	var open []*host.Stream
	for i := range 2 {
		s := request(h, i%2, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
		if p := priority(t, s); p != 0 {
			t.Fatalf("request %d of a: priority %d, want 0 (within share)", i, p)
		}
		open = append(open, s)
	}
	poll(h, 2*time.Second)
	wantCapacity(t, h, 8, 1600, "engines (1)")
	if st := teamStats(t, h, "small")["a"]; st.Reserved != 4 || st.InFlight != 2 || st.Borrowing != 0 {
		t.Fatalf("a after C 4 -> 8: %+v, want 4 reserved and its 2 requests within share", st)
	}
	if m := h.Metrics()["fairshare.pool.small.capacity_engines"]; m.Value != 1 {
		t.Errorf("capacity_engines gauge %d, want 1", m.Value)
	}
	// The engine restarts with a smaller cache: K follows, C stays.
	e.set(func(e *fakeEngine) { e.blocks = 50 })
	poll(h, 2*time.Second)
	wantCapacity(t, h, 8, 800, "engines (1)")
	// Unreadable: the configured values, a's requests keep their standing.
	e.set(func(e *fakeEngine) { e.down = true })
	poll(h, 2*time.Second)
	wantCapacity(t, h, 4, 1000, "config")
	if st := teamStats(t, h, "small")["a"]; st.Reserved != 2 || st.InFlight != 2 || st.Borrowing != 0 {
		t.Fatalf("a after C 8 -> 4: %+v, want 2 reserved and its 2 requests still within share", st)
	}
	if m := h.Metrics()["fairshare.pool.small.capacity_read_failures_total"]; m.Value == 0 {
		t.Error("capacity_read_failures_total = 0 after a failed read")
	}
	// A third request of a is judged against the new reservation.
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p := priority(t, s); p < 10 {
		t.Errorf("a's third request at C 4: priority %d, want borrowing", p)
	}
	open = append(open, s)
	e.set(func(e *fakeEngine) { e.down, e.hang = false, true })
	poll(h, 2*time.Second)
	wantCapacity(t, h, 4, 1000, "config") // a timeout is unreadable too
	e.set(func(e *fakeEngine) { e.hang = false })
	poll(h, 2*time.Second)
	wantCapacity(t, h, 8, 800, "engines (1)")
	for _, s := range open {
		respondJSON(s, 5, 5)
	}
	checkIdle(t, h, "small")
	if st := teamStats(t, h, "small")["a"]; st.Usage <= 0 {
		t.Errorf("a's usage %v after three responses, want > 0", st.Usage)
	}
}

// The gateway topology: the engines are learnt from the responses'
// upstream.address and read through an ORIGINAL_DST cluster, by one VM of
// the proxy; an engine that goes away counts out at once and is forgotten
// after expire.
func TestWasmCapacityFromLearnedEngines(t *testing.T) {
	e1, e2 := newFakeEngine(t, 100), newFakeEngine(t, 200)
	cfg := elasticConfig(`"cluster": "vllm-engines", "engines": "learned", "expire": "6s"`)
	h, _ := startElastic(t, cfg, 3, func(o *host.Options) {
		o.OriginalDst = map[string]string{"vllm-engines": ""}
	})
	serve := func(vm int, e *fakeEngine) {
		s := request(h, vm, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 10, ""))
		priority(t, s)
		s.SetUpstreamAddress(e.addr())
		respondJSON(s, 5, 5)
	}
	poll(h, 2*time.Second)
	wantCapacity(t, h, 4, 1000, "config") // no engine known yet
	serve(1, e1)
	poll(h, 2*time.Second)
	wantCapacity(t, h, 8, 1600, "engines (1)")
	serve(2, e2)
	poll(h, 2*time.Second)
	wantCapacity(t, h, 16, 1600+3200, "engines (2)")
	// One poller for the proxy: every round reads each engine once, not
	// once per VM.
	before := e1.hits.Load()
	for range 3 {
		poll(h, 2*time.Second)
	}
	if n := e1.hits.Load() - before; n != 3 {
		t.Errorf("engine 1 read %d times in 3 intervals by a 3-VM proxy, want 3", n)
	}
	// e1 stops: it counts out at once, and is forgotten after expire.
	e1.set(func(e *fakeEngine) { e.down = true })
	poll(h, 2*time.Second)
	wantCapacity(t, h, 8, 3200, "engines (1)")
	if eng := capacityStatus(t, h).Get("engines"); len(eng.Array()) != 2 {
		t.Fatalf("status engines %s, want both (e1 not yet expired)", eng.Raw)
	}
	poll(h, 8*time.Second) // expire, and the round that sees it
	eng := capacityStatus(t, h).Get("engines")
	if len(eng.Array()) != 1 || eng.Get("0.address").String() != e2.addr() {
		t.Fatalf("status engines %s, want only %s once e1 expired", eng.Raw, e2.addr())
	}
	wantCapacity(t, h, 8, 3200, "engines (1)") // e2 idle but readable: it counts
	checkIdle(t, h, "small")
}

// A call whose x-envoy-original-dst-host is no IP address and port finds
// no host: Envoy's router answers 503 "no healthy upstream", the reading
// fails, and the configured values stay.
func TestWasmCapacityFromNoHost(t *testing.T) {
	cfg := elasticConfig(`"cluster": "vllm-engines", "engines": "learned", "addresses": ["127.0.0.1:1"]`)
	h, _ := startElastic(t, cfg, 1, func(o *host.Options) {
		o.OriginalDst = map[string]string{"vllm-engines": "x-engine"} // another header: the call's is ignored
	})
	poll(h, 2*time.Second)
	wantCapacity(t, h, 4, 1000, "config")
	st := capacityStatus(t, h)
	if e := st.Get("engines.0.error").String(); e != "HTTP 503" {
		t.Errorf("engine error %q, want HTTP 503 (no host chosen); status %s", e, st.Raw)
	}
}

// The loop with the simulator: a vLLM server of two engine cores (data
// parallel) is read as two engines, and follows when one leaves service.
func TestWasmCapacityFromSimulator(t *testing.T) {
	cfg := vllmsim.TestConfig()
	srv := vllmsim.NewServer(cfg, vllmsim.ServerOptions{Model: "m", Replicas: 2})
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	h, _ := startElastic(t, elasticConfig(`"cluster": "local-vllm"`), 2, func(o *host.Options) {
		o.Clusters = map[string]string{"local-vllm": hs.URL}
	})
	kv := cfg.NumBlocks * cfg.BlockSize
	poll(h, 2*time.Second)
	wantCapacity(t, h, 2*8, 2*kv, "engines (2)")
	srv.SetActive(1)
	poll(h, 2*time.Second)
	wantCapacity(t, h, 8, kv, "engines (1)")
}

// With the host's HTTPCallsOnWait (the benchmark's setting) an answer
// comes only at Wait, so a run's reads land at the same point every time.
func TestWasmCapacityFromAnswersOnWait(t *testing.T) {
	e := newFakeEngine(t, 100)
	h, _ := startElastic(t, elasticConfig(`"cluster": "local-vllm"`), 2, func(o *host.Options) {
		o.Clusters = map[string]string{"local-vllm": e.srv.URL}
		o.HTTPCallsOnWait = true
	})
	h.Advance(2 * time.Second)
	wantCapacity(t, h, 4, 1000, "config") // read, not yet answered
	h.Wait()
	wantCapacity(t, h, 8, 1600, "engines (1)")
}
