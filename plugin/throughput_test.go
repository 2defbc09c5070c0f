package plugin

import (
	"math"
	"testing"
	"time"
)

// The token counters are summed over the cores' series; a missing one
// reads 0, and without either token counter there is no rate.
func TestParseEngineMetricsTokens(t *testing.T) {
	const info = "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"10\"} 1\n"
	tests := []struct {
		name, in            string
		prompt, gen, cached float64
		tokens              bool
	}{
		{"none", info, 0, 0, 0, false},
		{"one core", info + "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 1200.0\n" +
			"vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 300.0\n" +
			"vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 512.0\n", 1200, 300, 512, true},
		{"two cores summed", info + "vllm:prompt_tokens_total{engine=\"0\"} 100\nvllm:prompt_tokens_total{engine=\"1\"} 50\n" +
			"vllm:generation_tokens_total{engine=\"0\"} 7\nvllm:generation_tokens_total{engine=\"1\"} 3\n", 150, 10, 0, true},
		{"generation only", info + "vllm:generation_tokens_total 42\n", 0, 42, 0, true},
		{"hits without token counters", info + "vllm:prefix_cache_hits_total 42\n", 0, 0, 42, false},
		{"bad values skipped", info + "vllm:prompt_tokens_total NaN\nvllm:prompt_tokens_total -5\nvllm:prompt_tokens_total +Inf\nvllm:prompt_tokens_total{x} 3\nvllm:prompt_tokens_total 9\n", 9, 0, 0, true},
		{"other names unread", info + "vllm:prompt_tokens_by_source_total{source=\"local_compute\"} 5\nvllm:gpu_prefix_cache_hits_total 3\nvllm:request_prompt_tokens_sum 8\n", 0, 0, 0, false},
		{"clamped", info + "vllm:prompt_tokens_total 1e300\n", maxTokenCounter, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseEngineMetrics([]byte(tt.in))
			if err != nil || r.promptTokens != tt.prompt || r.genTokens != tt.gen || r.cachedTokens != tt.cached || r.tokens != tt.tokens {
				t.Fatalf("parseEngineMetrics = %+v, %v; want prompt %v, generation %v, cached %v, tokens %v", r, err, tt.prompt, tt.gen, tt.cached, tt.tokens)
			}
		})
	}
}

// An engine's throughput peak: raised only by a rate measured while it
// was saturated at both readings, otherwise decaying with a half-life of
// 10 minutes; a restart gives no rate, an absurd one is reported.
func TestEngineThroughputPeak(t *testing.T) {
	w := costWeights{prompt: 1, cachedPrompt: 0.25, completion: 4}
	t0 := time.Unix(1000, 0).UnixNano()
	sec := int64(time.Second)
	rd := func(p, g, c float64, waiting int) engineReading {
		return engineReading{cores: 1, promptTokens: p, genTokens: g, cachedTokens: c, tokens: true, waiting: waiting}
	}
	tests := []struct {
		name       string
		peak       float64 // before, at t0
		prev, cur  engineReading
		dt         int64 // ns between the readings
		want       float64
		wantAbsurd bool
	}{
		// (1000−400)·1 + 400·0.25 + 100·4 = 1100 over 2 s.
		{"saturated sets the peak", 0, rd(0, 0, 0, 3), rd(1000, 100, 400, 1), 2 * sec, 550, false},
		{"saturated below the peak keeps it", 600, rd(0, 0, 0, 3), rd(1000, 100, 400, 1), 2 * sec, 600 * math.Exp2(-2.0/600), false},
		{"not waiting now: decays only", 600, rd(0, 0, 0, 3), rd(5000, 100, 0, 0), 2 * sec, 600 * math.Exp2(-2.0/600), false},
		{"not waiting before: decays only", 600, rd(0, 0, 0, 0), rd(5000, 100, 0, 2), 2 * sec, 600 * math.Exp2(-2.0/600), false},
		{"ten minutes halve it", 600, rd(0, 0, 0, 0), rd(0, 0, 0, 0), 600 * sec, 300, false},
		{"restart: no rate, peak kept", 600, rd(9000, 900, 0, 3), rd(10, 5, 0, 3), 2 * sec, 600 * math.Exp2(-2.0/600), false},
		{"hits past the prompt tokens are all cached", 0, rd(0, 0, 0, 1), rd(100, 0, 300, 1), sec, 25, false},
		{"no counters: no rate", 0, engineReading{cores: 1, waiting: 3}, engineReading{cores: 1, waiting: 3}, sec, 0, false},
		{"same instant: no rate", 0, rd(0, 0, 0, 1), rd(100, 0, 0, 1), 0, 0, false},
		{"absurd rate ignored", 10, rd(0, 0, 0, 1), rd(maxTokenCounter, 0, 0, 1), sec, 10 * math.Exp2(-1.0/600), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &engineEntry{read: t0, r: tt.prev, peak: tt.peak, peakAt: t0}
			absurd := e.observe(t0+tt.dt, tt.cur, w)
			if math.Abs(e.peak-tt.want) > 1e-9*max(1, tt.want) || absurd != tt.wantAbsurd || e.peakAt != t0+tt.dt {
				t.Fatalf("observe = peak %v at %d, absurd %v; want %v at %d, %v", e.peak, e.peakAt, absurd, tt.want, t0+tt.dt, tt.wantAbsurd)
			}
		})
	}
}

// X is the sum of the peaks of the engines that count; while none has a
// peak, the configured throughput.
func TestThroughputSum(t *testing.T) {
	cf := &capacityFrom{expire: 6 * time.Second}
	now := time.Unix(1000, 0)
	at := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	s := &engineSet{engines: map[string]*engineEntry{
		"a": {read: at(time.Second), r: engineReading{cores: 1}, peak: 300, peakAt: now.UnixNano()},
		"b": {read: at(2 * time.Second), r: engineReading{cores: 2}, peak: 200.4, peakAt: now.UnixNano()},
		"c": {read: at(7 * time.Second), r: engineReading{cores: 1}, peak: 1000, peakAt: now.UnixNano()}, // stale
		"d": {read: at(time.Second), r: engineReading{cores: 1}},                                         // no peak yet
		"e": {read: at(time.Second), r: engineReading{asleep: 1}, peak: 1000, peakAt: now.UnixNano()},    // asleep
	}}
	if x, n := throughputSum(now, cf, 50, s); x != 500 || n != 2 {
		t.Fatalf("throughputSum = %d, %d; want 500 from 2 engines (a and b)", x, n)
	}
	later := now.Add(10 * time.Minute)
	for _, e := range s.engines {
		e.read = later.UnixNano()
	}
	if x, n := throughputSum(later, cf, 50, s); x != 750 || n != 3 {
		t.Fatalf("throughputSum 10 min on = %d, %d; want 750 (every peak halved, c now fresh) from 3 engines", x, n)
	}
	none := &engineSet{engines: map[string]*engineEntry{"d": {read: at(time.Second), r: engineReading{cores: 1}}}}
	if x, n := throughputSum(now, cf, 50, none); x != 50 || n != 0 {
		t.Fatalf("throughputSum without a peak = %d, %d; want the configured 50", x, n)
	}
}

// The peak and the counters survive the shared-data record.
func TestEngineSetThroughputRoundTrip(t *testing.T) {
	s := &engineSet{source: sourceEngines, x: 123, xn: 1, engines: map[string]*engineEntry{
		"local": {read: 5, r: engineReading{cores: 1, promptTokens: 1e6, genTokens: 2.5e5, cachedTokens: 7, tokens: true},
			peak: 123.25, peakAt: 5, warned: true},
		"old": {read: 5, r: engineReading{cores: 1}},
	}}
	got := decodeEngineSet(s.encode())
	if got.x != 123 || got.xn != 1 || *got.engines["local"] != *s.engines["local"] || *got.engines["old"] != *s.engines["old"] {
		t.Fatalf("decode(encode) = %+v %+v %+v; want %+v", got, got.engines["local"], got.engines["old"], s.engines["local"])
	}
}
