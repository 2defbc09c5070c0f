package plugin

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
)

// What an engine's /metrics says of its capacity (capacity.go).
//
// vLLM exports its cache configuration as an info metric: a gauge set to
// 1 whose labels are CacheConfig's fields, one series per engine core of
// the server (label engine="0", "1", ... under data parallelism), in the
// Prometheus text format:
//
//	vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2048",
//	    kv_cache_size_tokens="32768",kv_cache_max_concurrency="4.0",...} 1.0
//
// The KV capacity of one engine core is kv_cache_size_tokens when the label
// is there and a number (vLLM computes it from the KV cache groups, which
// on a hybrid model is not num_gpu_blocks × block_size), else
// num_gpu_blocks × block_size. vLLM does not export max_num_seqs (a
// SchedulerConfig field, and only CacheConfig is exported as info): the
// configured capacity_from.max_num_seqs is used, unless a series of any
// vllm:*_config_info metric carries a max_num_seqs label.
// kv_cache_max_concurrency is kv_cache_size_tokens / max_model_len, a
// bound on full-length requests, not the engine's sequence limit: it is
// read for the status only.
//
// A drained engine that still answers /metrics counts for nothing: vLLM
// exports its sleep mode as the gauge vllm:engine_sleep_state, one series
// per engine core and state (labels engine, model_name and sleep_state
// "awake", "weights_offloaded" or "discard_all"; awake is 1 while the
// core serves, 0 while it sleeps at level 1 or 2), set by
// PrometheusStatLogger.record_sleep_state in vllm/v1/metrics/loggers.py.
// A core whose awake series is 0 is asleep: neither its sequences nor its
// KV tokens count, and a server whose cores all sleep is read as zero
// cores (a reading, not a failure: it answers, it serves nothing). A
// vLLM without sleep mode exports the series at awake 1, or not at all
// (older versions): every core counts.
//
// What an engine served, for the pool's throughput (capacity.go,
// observe): vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py
// at 005a810b) declares the counters vllm:prompt_tokens ("Number of
// prefill tokens processed"), vllm:generation_tokens ("Number of
// generation tokens processed") and vllm:prefix_cache_hits ("Prefix cache
// hits, in terms of number of cached tokens"), one series per engine core
// (labels model_name, engine); prometheus_client exposes a counter with
// the suffix _total, so the lines read are vllm:prompt_tokens_total,
// vllm:generation_tokens_total and vllm:prefix_cache_hits_total, each
// summed over its series. The prompt counter counts every prompt token,
// the cached ones included (IterationStats.update_from_output in
// vllm/v1/metrics/stats.py at 28ed1fb8 adds the request's prompt_len at
// its first token, while the hits are counted when it is scheduled): the
// tokens the engine computed are the prompt tokens less the hits, and
// hits ahead of their prompt tokens in an interval are taken as cached
// prompt tokens of it (tokenRate). A counter that is missing reads 0
// (prefix_cache_hits is exported only with prefix caching on); an engine
// that exports neither token counter has no rate (tokens false).

// engineReading is what one /metrics answer says.
type engineReading struct {
	cores      int     // engine cores (series of vllm:cache_config_info)
	kvTokens   int64   // KV capacity in tokens, summed over the cores
	maxNumSeqs int     // max_num_seqs per core if exported, else 0
	maxConc    float64 // kv_cache_max_concurrency, summed (0: not exported)
	running    int     // vllm:num_requests_running, summed
	waiting    int     // vllm:num_requests_waiting, summed
	usage      float64 // vllm:kv_cache_usage_perc, mean over the cores (0..1)
	asleep     int     // engine cores asleep (vllm:engine_sleep_state awake 0): not in cores nor kvTokens

	// The token counters, summed over the cores (0: not exported).
	promptTokens float64 // vllm:prompt_tokens_total
	genTokens    float64 // vllm:generation_tokens_total
	cachedTokens float64 // vllm:prefix_cache_hits_total
	tokens       bool    // a prompt or generation token counter was exported
}

// maxTokenCounter bounds a token counter read (2^53: beyond it float64
// counts no longer step by one token).
const maxTokenCounter = 1 << 53

// maxMetricsBytes bounds the /metrics answer the plugin reads: a vLLM
// server's is a few hundred KiB with every histogram.
const maxMetricsBytes = 4 << 20

var errNoCacheInfo = errors.New("no vllm:cache_config_info series with num_gpu_blocks and block_size or kv_cache_size_tokens")

// parseEngineMetrics reads vLLM's Prometheus text exposition. It fails
// when no series says the KV capacity, or a line it needs is malformed;
// lines of other metrics are skipped unread past their name.
func parseEngineMetrics(b []byte) (engineReading, error) {
	var r engineReading
	if len(b) > maxMetricsBytes {
		return r, errors.New("metrics answer larger than 4 MiB")
	}
	usageN := 0
	// The cores' KV tokens by engine label, and the engines asleep, so
	// that a core asleep is taken out whatever the order of the series.
	type core struct {
		engine string
		kv     int64
	}
	var cores []core
	var asleep []string
	for len(b) > 0 {
		var line []byte
		if i := indexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		line = trimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, rest := metricName(line)
		switch {
		case name == "vllm:cache_config_info":
			labels, val, err := parseSample(rest)
			if err != nil {
				return engineReading{}, errors.New("vllm:cache_config_info: " + err.Error())
			}
			if val != 1 {
				continue // an info gauge is 1; anything else is not this engine's
			}
			kv, ok := coreKVTokens(labels)
			if !ok {
				continue
			}
			r.cores++
			r.kvTokens = min(r.kvTokens+kv, 1<<40)
			cores = append(cores, core{labels["engine"], kv})
			if c, err := strconv.ParseFloat(labels["kv_cache_max_concurrency"], 64); err == nil && c > 0 && !math.IsInf(c, 0) {
				r.maxConc += c
			}
			if n, ok := positiveInt(labels["max_num_seqs"]); ok {
				r.maxNumSeqs = int(min(n, 1<<20))
			}
		case strings.HasPrefix(name, "vllm:") && strings.HasSuffix(name, "_config_info"):
			labels, val, err := parseSample(rest)
			if err == nil && val == 1 {
				if n, ok := positiveInt(labels["max_num_seqs"]); ok {
					r.maxNumSeqs = int(min(n, 1<<20))
				}
			}
		case name == "vllm:engine_sleep_state":
			labels, val, err := parseSample(rest)
			if err == nil && labels["sleep_state"] == "awake" && val == 0 && !slices.Contains(asleep, labels["engine"]) {
				asleep = append(asleep, labels["engine"])
			}
		case name == "vllm:prompt_tokens_total", name == "vllm:generation_tokens_total", name == "vllm:prefix_cache_hits_total":
			_, val, err := parseSample(rest)
			if err != nil || math.IsNaN(val) || val < 0 || math.IsInf(val, 0) {
				continue
			}
			switch name {
			case "vllm:prompt_tokens_total":
				r.promptTokens = min(r.promptTokens+val, maxTokenCounter)
				r.tokens = true
			case "vllm:generation_tokens_total":
				r.genTokens = min(r.genTokens+val, maxTokenCounter)
				r.tokens = true
			default:
				r.cachedTokens = min(r.cachedTokens+val, maxTokenCounter)
			}
		case name == "vllm:num_requests_running", name == "vllm:num_requests_waiting", name == "vllm:kv_cache_usage_perc":
			_, val, err := parseSample(rest)
			if err != nil || math.IsNaN(val) || val < 0 || math.IsInf(val, 0) {
				continue
			}
			switch name {
			case "vllm:num_requests_running":
				r.running += int(min(val, 1<<30))
			case "vllm:num_requests_waiting":
				r.waiting += int(min(val, 1<<30))
			default:
				r.usage += min(val, 1)
				usageN++
			}
		}
	}
	if r.cores == 0 {
		return engineReading{}, errNoCacheInfo
	}
	for _, c := range cores {
		if slices.Contains(asleep, c.engine) {
			r.cores--
			r.asleep++
			r.kvTokens -= c.kv
		}
	}
	if usageN > 0 {
		r.usage /= float64(usageN)
	}
	return r, nil
}

// coreKVTokens is one engine core's KV capacity from its cache_config_info
// labels: kv_cache_size_tokens, else num_gpu_blocks × block_size.
func coreKVTokens(labels map[string]string) (int64, bool) {
	if n, ok := positiveInt(labels["kv_cache_size_tokens"]); ok {
		return min(n, 1<<40), true
	}
	blocks, ok1 := positiveInt(labels["num_gpu_blocks"])
	size, ok2 := positiveInt(labels["block_size"])
	if !ok1 || !ok2 || blocks > 1<<32 || size > 1<<16 {
		return 0, false
	}
	return min(blocks*size, 1<<40), true
}

// positiveInt reads a label value that is a positive integer ("2048");
// vLLM writes str() of the field, so "None" and "" are absent values.
func positiveInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// metricName splits a sample line into its metric name and the rest.
func metricName(line []byte) (string, []byte) {
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	return string(line[:i]), line[i:]
}

// parseSample reads `{labels} value [timestamp]` after a metric name.
func parseSample(b []byte) (map[string]string, float64, error) {
	labels := map[string]string{}
	if len(b) > 0 && b[0] == '{' {
		b = b[1:]
		for {
			b = trimSpace(b)
			if len(b) == 0 {
				return nil, 0, errors.New("unterminated label set")
			}
			if b[0] == '}' {
				b = b[1:]
				break
			}
			i := 0
			for i < len(b) && b[i] != '=' && b[i] != ' ' {
				i++
			}
			if i == 0 || i == len(b) || b[i] != '=' || i+1 >= len(b) || b[i+1] != '"' {
				return nil, 0, errors.New("malformed label")
			}
			key := string(b[:i])
			b = b[i+2:]
			var val strings.Builder
			closed := false
			for j := 0; j < len(b); j++ {
				c := b[j]
				if c == '\\' && j+1 < len(b) {
					j++
					switch b[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(b[j])
					}
					continue
				}
				if c == '"' {
					b = b[j+1:]
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return nil, 0, errors.New("unterminated label value")
			}
			if _, dup := labels[key]; dup {
				return nil, 0, errors.New("duplicate label " + strconv.Quote(key))
			}
			labels[key] = val.String()
			b = trimSpace(b)
			if len(b) > 0 && b[0] == ',' {
				b = b[1:]
			}
		}
	}
	b = trimSpace(b)
	i := 0
	for i < len(b) && b[i] != ' ' && b[i] != '\t' {
		i++
	}
	if i == 0 {
		return nil, 0, errors.New("no value")
	}
	v, err := strconv.ParseFloat(string(b[:i]), 64)
	if err != nil {
		return nil, 0, errors.New("value " + strconv.Quote(string(b[:i])) + " is not a number")
	}
	return labels, v, nil
}

func indexByte(b []byte, c byte) int {
	for i := range b {
		if b[i] == c {
			return i
		}
	}
	return -1
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
