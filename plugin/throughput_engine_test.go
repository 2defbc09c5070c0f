package plugin_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// tokenEngine is a vLLM server's /metrics whose token counters advance
// by a step at every read, with a number of requests waiting.
type tokenEngine struct {
	srv                 *httptest.Server
	mu                  sync.Mutex
	prompt, gen, cached float64 // the counters
	step                [3]float64
	waiting             int
	down                bool
}

func newTokenEngine(t *testing.T) *tokenEngine {
	e := &tokenEngine{}
	e.srv = metricsServer(t, &e.mu, func(w io.Writer) bool {
		if e.down {
			return false
		}
		e.prompt += e.step[0]
		e.gen += e.step[1]
		e.cached += e.step[2]
		writeTokenMetrics(w, e.waiting, e.prompt, e.gen, e.cached)
		return true
	})
	return e
}

// metricsServer serves an engine's /metrics: serve, under mu, writes
// the text, or reports false for an engine that is down (503).
func metricsServer(t *testing.T, mu *sync.Mutex, serve func(w io.Writer) bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var b strings.Builder
		if !serve(&b) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, b.String())
	}))
	t.Cleanup(srv.Close)
	return srv
}

// writeTokenMetrics writes a vLLM engine's /metrics (one engine core of
// 1,600 KV tokens) with waiting requests waiting and the token counters
// at prompt, gen and cached.
func writeTokenMetrics(w io.Writer, waiting int, prompt, gen, cached float64) {
	fmt.Fprintf(w, "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %d.0\n"+
		"vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"100\"} 1.0\n"+
		"# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} %g\n"+
		"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} %g\n"+
		"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} %g\n",
		waiting, prompt, gen, cached)
}

func (e *tokenEngine) set(f func(e *tokenEngine)) {
	e.mu.Lock()
	f(e)
	e.mu.Unlock()
}

// throughputConfig: pool "small" of elasticConfig declaring throughput
// 500 cost units/s, cached prompt tokens at 0.5.
const throughputConfig = `{"default_max_tokens": 16, "tick": "1s", "status_token": "sesame",
  "cost": {"prompt_token": 1, "cached_prompt_token": 0.5, "completion_token": 2},
  "pools": [{"name": "small", "capacity": 4, "kv_tokens": 1000, "throughput": 500, "models": ["m"],
    "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}},
    "capacity_from": {"cluster": "local-vllm", "max_num_seqs": 8, "interval": "2s", "timeout": "1s"}}]}`

func wantThroughput(t *testing.T, h *host.Host, lo, hi int64, source string) {
	t.Helper()
	x := pool(t, h, "small").Throughput()
	st := capacityStatus(t, h)
	if x < lo || x > hi || st.Get("throughput_source").String() != source || st.Get("throughput").Int() != x {
		t.Fatalf("pool throughput %d, status source %q; want in [%d, %d] from %q (status %s)", x, st.Get("throughput_source").String(), lo, hi, source, st.Raw)
	}
	if m := h.Metrics()["fairshare.pool.small.throughput"]; m.Value != x {
		t.Errorf("throughput gauge %d, want %d", m.Value, x)
	}
}

// X follows the engine's saturated token rate: the configured value
// until a rate is measured at saturation, a peak that only decays while
// the engine has room or restarts, a higher saturated rate raising it,
// an absurd rate ignored with one warning, and the configuration again
// when the engine cannot be read.
func TestWasmThroughputFromEngine(t *testing.T) {
	e := newTokenEngine(t)
	// Per 2 s read: (3000 − 1000)·1 + 1000·0.5 + 500·2 = 3500, 1750/s.
	e.set(func(e *tokenEngine) { e.step, e.waiting = [3]float64{3000, 500, 1000}, 2 })
	h, _ := startElastic(t, throughputConfig, 2, func(o *host.Options) {
		o.Clusters = map[string]string{"local-vllm": e.srv.URL}
	})
	wantThroughput(t, h, 500, 500, "config")
	poll(h, 2*time.Second) // the first reading: no rate yet
	wantThroughput(t, h, 500, 500, "config")
	poll(h, 2*time.Second)
	wantThroughput(t, h, 1750, 1750, "engines (1)")
	if st := teamStats(t, h, "small")["a"]; st.ReservedWork != 875 {
		t.Errorf("a's reserved work %v at X 1750, want 875 (its share 0.5)", st.ReservedWork)
	}
	// The status shows the engine's peak decayed to the status's time,
	// at most one read interval after the reading.
	if got := capacityStatus(t, h).Get("engines.0.throughput").Int(); got > 1750 || float64(got) < 1750*math.Exp2(-2.0/600)-1 {
		t.Errorf("status engine throughput %d, want its peak 1750 decayed by at most 2 s", got)
	}
	// Room on the engine: what it serves now is not its capacity; the
	// peak decays (half-life 10 min: 2 s takes 0.23%).
	e.set(func(e *tokenEngine) { e.step, e.waiting = [3]float64{100, 10, 0}, 0 })
	poll(h, 2*time.Second)
	decayed := 1750 * math.Exp2(-2.0/600)
	wantThroughput(t, h, int64(decayed), int64(decayed)+1, "engines (1)")
	// A restart (the counters back near 0) gives no rate.
	e.set(func(e *tokenEngine) { e.prompt, e.gen, e.cached, e.waiting = 0, 0, 0, 2 })
	poll(h, 2*time.Second)
	decayed *= math.Exp2(-2.0 / 600)
	wantThroughput(t, h, int64(decayed), int64(decayed)+1, "engines (1)")
	// Saturated at twice the rate: the peak follows.
	e.set(func(e *tokenEngine) { e.step = [3]float64{6000, 1000, 2000} })
	poll(h, 2*time.Second)
	wantThroughput(t, h, 3500, 3500, "engines (1)")
	// An absurd rate (2^46 tokens a second) is ignored, and said once.
	e.set(func(e *tokenEngine) { e.step = [3]float64{1 << 47, 0, 0} })
	poll(h, 4*time.Second)
	decayed = 3500 * math.Exp2(-4.0/600)
	wantThroughput(t, h, int64(decayed), int64(decayed)+1, "engines (1)")
	warns := 0
	for _, l := range h.Logs() {
		if l.Level == hostcalls.LogLevelWarn && strings.Contains(l.Message, "absurd rate") {
			warns++
		}
	}
	if warns != 1 {
		t.Errorf("%d warnings of an absurd rate after two, want 1", warns)
	}
	// Unreadable: the configured throughput.
	e.set(func(e *tokenEngine) { e.down = true })
	poll(h, 2*time.Second)
	wantThroughput(t, h, 500, 500, "config")
}

// A pool that declares no throughput gets none from the engines: a
// reading never turns the work resource on.
func TestWasmThroughputNotTurnedOn(t *testing.T) {
	e := newTokenEngine(t)
	e.set(func(e *tokenEngine) { e.step, e.waiting = [3]float64{3000, 500, 1000}, 2 })
	h, _ := startElastic(t, elasticConfig(`"cluster": "local-vllm"`), 1, func(o *host.Options) {
		o.Clusters = map[string]string{"local-vllm": e.srv.URL}
	})
	poll(h, 6*time.Second)
	st := capacityStatus(t, h)
	if x := pool(t, h, "small").Throughput(); x != 0 || st.Get("throughput_source").Exists() || st.Get("engines.0.throughput").Exists() {
		t.Fatalf("pool without throughput: X %d after saturated readings, status %s; want 0 and no throughput fields", x, st.Raw)
	}
	wantCapacity(t, h, 8, 1600, "engines (1)")
}
