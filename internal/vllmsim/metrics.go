package vllmsim

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Histogram buckets of vLLM's v1/metrics/loggers.py.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// finishReasons are the finished_reason label values, in vLLM's order.
var finishReasons = []string{FinishStop, FinishLength, FinishAbort, "error", "repetition"}

type histogram struct {
	bounds []float64
	counts []int64 // per bucket (not cumulative); last is +Inf
	sum    float64
	n      int64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]int64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
	h.n++
}

func (h histogram) clone() histogram {
	h.counts = append([]int64(nil), h.counts...)
	return h
}

// engineMetrics are the counters and histograms of one engine.
type engineMetrics struct {
	preemptions      int64
	promptTokens     int64
	generationTokens int64
	prefixQueries    int64    // prompt tokens looked up, new requests only
	prefixHits       int64    // of which found in the cache
	success          [5]int64 // by finishReasons
	ttft, e2e, queue histogram
}

func newEngineMetrics() engineMetrics {
	return engineMetrics{
		ttft:  newHistogram(ttftBuckets),
		e2e:   newHistogram(requestLatencyBuckets),
		queue: newHistogram(requestLatencyBuckets),
	}
}

func (m *engineMetrics) finished(reason string, e2e float64) {
	for i, r := range finishReasons {
		if r == reason {
			m.success[i]++
		}
	}
	m.e2e.observe(e2e)
}

// metricsSnapshot is what /metrics renders for one engine.
type metricsSnapshot struct {
	engine           int
	running, waiting int
	kvUsage          float64
	sleep            int // sleep level (0: awake)
	m                engineMetrics
}

func (e *engine) snapshot() metricsSnapshot {
	m := e.m
	m.ttft, m.e2e, m.queue = m.ttft.clone(), m.e2e.clone(), m.queue.clone()
	return metricsSnapshot{
		engine: e.replica, running: len(e.running), waiting: e.waiting.len(),
		kvUsage: float64(e.used) / float64(e.usable), m: m, sleep: e.sleep,
	}
}

// pyFloat formats v as Python's prometheus_client does (floatToGoString).
func pyFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func labelValue(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, "\n", `\n`)
	return strings.ReplaceAll(v, `"`, `\"`)
}

// writeMetrics renders the Prometheus text exposition (format 0.0.4) of the
// engines with vLLM's names and labels.
func writeMetrics(w io.Writer, model string, cfg EngineConfig, snaps []metricsSnapshot) {
	mn := labelValue(model)
	labels := func(s metricsSnapshot) string {
		return fmt.Sprintf(`model_name="%s",engine="%d"`, mn, s.engine)
	}
	head := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	gauge := func(name, help string, val func(metricsSnapshot) float64) {
		head(name, "gauge", help)
		for _, s := range snaps {
			fmt.Fprintf(w, "%s{%s} %s\n", name, labels(s), pyFloat(val(s)))
		}
	}
	counter := func(name, help string, val func(metricsSnapshot) int64) {
		head(name, "counter", help)
		for _, s := range snaps {
			fmt.Fprintf(w, "%s{%s} %s\n", name, labels(s), pyFloat(float64(val(s))))
		}
	}
	hist := func(name, help string, h func(metricsSnapshot) histogram) {
		head(name, "histogram", help)
		for _, s := range snaps {
			hh := h(s)
			var cum int64
			for i, b := range hh.bounds {
				cum += hh.counts[i]
				fmt.Fprintf(w, "%s_bucket{%s,le=\"%s\"} %s\n", name, labels(s), pyFloat(b), pyFloat(float64(cum)))
			}
			fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %s\n", name, labels(s), pyFloat(float64(hh.n)))
			fmt.Fprintf(w, "%s_count{%s} %s\n", name, labels(s), pyFloat(float64(hh.n)))
			fmt.Fprintf(w, "%s_sum{%s} %s\n", name, labels(s), pyFloat(hh.sum))
		}
	}

	gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
		func(s metricsSnapshot) float64 { return float64(s.running) })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
		func(s metricsSnapshot) float64 { return float64(s.waiting) })
	head("vllm:num_requests_waiting_by_reason", "gauge", "Number of requests waiting, by reason.")
	for _, s := range snaps {
		fmt.Fprintf(w, "vllm:num_requests_waiting_by_reason{%s,reason=\"capacity\"} %s\n", labels(s), pyFloat(float64(s.waiting)))
		fmt.Fprintf(w, "vllm:num_requests_waiting_by_reason{%s,reason=\"deferred\"} 0.0\n", labels(s))
	}
	// vLLM's sleep mode, one series per core and state (vllm/v1/metrics/
	// loggers.py, PrometheusStatLogger.record_sleep_state): awake 1 and
	// the others 0 while the core serves; asleep at level 1 (weights
	// offloaded) or 2 (everything discarded), awake 0 and the level's 1.
	head("vllm:engine_sleep_state", "gauge", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.")
	for _, s := range snaps {
		states := [3]float64{1, 0, 0}
		if s.sleep > 0 {
			states = [3]float64{0, 0, 0}
			states[min(s.sleep, 2)] = 1
		}
		for i, name := range [3]string{"awake", "weights_offloaded", "discard_all"} {
			fmt.Fprintf(w, "vllm:engine_sleep_state{%s,sleep_state=\"%s\"} %s\n", labels(s), name, pyFloat(states[i]))
		}
	}
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
		func(s metricsSnapshot) float64 { return s.kvUsage })
	if cfg.EnablePrefixCaching {
		counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
			func(s metricsSnapshot) int64 { return s.m.prefixQueries })
		counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
			func(s metricsSnapshot) int64 { return s.m.prefixHits })
	}
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
		func(s metricsSnapshot) int64 { return s.m.preemptions })
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
		func(s metricsSnapshot) int64 { return s.m.promptTokens })
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
		func(s metricsSnapshot) int64 { return s.m.generationTokens })
	head("vllm:request_success_total", "counter", "Count of successfully processed requests.")
	for _, s := range snaps {
		for i, r := range finishReasons {
			fmt.Fprintf(w, "vllm:request_success_total{%s,finished_reason=\"%s\"} %s\n", labels(s), r, pyFloat(float64(s.m.success[i])))
		}
	}
	hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
		func(s metricsSnapshot) histogram { return s.m.ttft })
	hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
		func(s metricsSnapshot) histogram { return s.m.e2e })
	hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
		func(s metricsSnapshot) histogram { return s.m.queue })
	head("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
	caching := "False" // Python's str(bool)
	if cfg.EnablePrefixCaching {
		caching = "True"
	}
	// kv_cache_size_tokens and kv_cache_max_concurrency: the engine's KV
	// capacity in tokens (every block, the null block included, as vLLM
	// reports its GPU KV cache size) and how many max_model_len requests
	// it holds. A gateway reads them for capacity_from.
	kvTokens := cfg.NumBlocks * cfg.BlockSize
	maxConc := 0.0
	if cfg.MaxModelLen > 0 {
		maxConc = float64(kvTokens) / float64(cfg.MaxModelLen)
	}
	for _, s := range snaps {
		fmt.Fprintf(w, "vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"auto\",enable_prefix_caching=\"%s\",engine=\"%d\",gpu_memory_utilization=\"0.92\",kv_cache_max_concurrency=\"%s\",kv_cache_size_tokens=\"%d\",num_gpu_blocks=\"%d\"} 1.0\n",
			cfg.BlockSize, caching, s.engine, pyFloat(maxConc), kvTokens, cfg.NumBlocks)
	}
}

// SetSleepLevel puts replica's engine to sleep at level (1: weights
// offloaded, 2: everything discarded) or wakes it (0), as vLLM's POST
// /sleep?level= and /wake_up do, as far as /metrics shows it: its
// vllm:engine_sleep_state series say so. The simulated engine goes on
// scheduling what it is sent (a sleeping vLLM answers 503 instead): a
// test sends a sleeping engine nothing. Levels above 2 count as 2.
func (s *Sim) SetSleepLevel(replica, level int) {
	s.engines[replica].sleep = min(max(level, 0), 2)
}

// WriteMetrics writes replica's /metrics, as a vLLM server of that one
// engine answers it (engine="0"), from the Sim's state now. The Sim must
// not run meanwhile: a caller on another goroutine reads it while the
// Sim's goroutine waits for it.
func (s *Sim) WriteMetrics(w io.Writer, model string, replica int) {
	snap := s.engines[replica].snapshot()
	snap.engine = 0
	writeMetrics(w, model, s.cfg, []metricsSnapshot{snap})
}
