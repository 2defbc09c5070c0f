package plugin

import (
	"os"
	"strings"
	"testing"
)

func TestParseEngineMetricsSamples(t *testing.T) {
	tests := []struct {
		file string
		want engineReading
		err  bool
	}{
		// 27264 blocks of 16 tokens.
		{file: "metrics_v1.prom", want: engineReading{cores: 1, kvTokens: 27264 * 16, running: 7, waiting: 2, usage: 0.4375}},
		// Two cores of 368640 tokens each, not 1042 × 528.
		{file: "metrics_hybrid_dp2.prom", want: engineReading{cores: 2, kvTokens: 2 * 368640, maxConc: 22.5, running: 21, waiting: 3, usage: 0.375}},
		{file: "metrics_attention_free.prom", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile("../testdata/vllm/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseEngineMetrics(b)
			if tt.err {
				if err == nil {
					t.Fatalf("parseEngineMetrics = %+v, want an error (no KV capacity)", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseEngineMetrics = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseEngineMetricsLines(t *testing.T) {
	tests := []struct {
		name, in string
		kv       int64
		seqs     int
		err      string
	}{
		{"crlf and escapes", "vllm:cache_config_info{a=\"x\\\"y\\\\\",block_size=\"16\",num_gpu_blocks=\"10\"} 1\r\n", 160, 0, ""},
		{"timestamp", `vllm:cache_config_info{block_size="16",num_gpu_blocks="10"} 1 1767225600000`, 160, 0, ""},
		{"kv_cache_size_tokens wins", `vllm:cache_config_info{block_size="16",num_gpu_blocks="10",kv_cache_size_tokens="100"} 1`, 100, 0, ""},
		{"not 1 is not an info", `vllm:cache_config_info{block_size="16",num_gpu_blocks="10"} 0`, 0, 0, "no vllm:cache_config_info"},
		{"scheduler info max_num_seqs", "vllm:scheduler_config_info{max_num_seqs=\"64\"} 1\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"10\"} 1", 160, 64, ""},
		{"unterminated", `vllm:cache_config_info{block_size="16`, 0, 0, "unterminated"},
		{"no value", `vllm:cache_config_info{block_size="16",num_gpu_blocks="10"}`, 0, 0, "no value"},
		{"duplicate label", `vllm:cache_config_info{block_size="16",block_size="8",num_gpu_blocks="10"} 1`, 0, 0, "duplicate label"},
		{"other families unread", "vllm:foo{garbage 1\nvllm:cache_config_info{block_size=\"2\",num_gpu_blocks=\"3\"} 1", 6, 0, ""},
		{"empty", "", 0, 0, "no vllm:cache_config_info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEngineMetrics([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseEngineMetrics = %+v, %v; want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got.kvTokens != tt.kv || got.maxNumSeqs != tt.seqs {
				t.Fatalf("parseEngineMetrics = %+v, %v; want kv %d, max_num_seqs %d", got, err, tt.kv, tt.seqs)
			}
		})
	}
}

// FuzzParseEngineMetrics: any input is read without a panic, and a reading
// it accepts is within bounds.
func FuzzParseEngineMetrics(f *testing.F) {
	for _, name := range []string{"metrics_v1.prom", "metrics_hybrid_dp2.prom", "metrics_attention_free.prom"} {
		if b, err := os.ReadFile("../testdata/vllm/" + name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`vllm:cache_config_info{block_size="99999999",num_gpu_blocks="99999999999"} 1`))
	f.Add([]byte("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1\"} 1\nvllm:prompt_tokens_total 1e300\nvllm:generation_tokens_total{engine=\"0\"} 5\nvllm:prefix_cache_hits_total -1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseEngineMetrics(b)
		if err != nil {
			return
		}
		if r.cores < 1 || r.kvTokens < 1 || r.kvTokens > 1<<40 || r.maxNumSeqs < 0 || r.maxNumSeqs > 1<<20 || r.running < 0 || r.waiting < 0 || r.usage < 0 || r.usage > 1 ||
			r.promptTokens < 0 || r.promptTokens > maxTokenCounter || r.genTokens < 0 || r.genTokens > maxTokenCounter || r.cachedTokens < 0 || r.cachedTokens > maxTokenCounter {
			t.Fatalf("parseEngineMetrics(%q) = %+v", b, r)
		}
	})
}
