package main

import (
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

func histogram(name string, ms ...uint64) host.Metric {
	return host.Metric{Name: name, Type: hostcalls.MetricHistogram, Samples: ms}
}

// TestPluginLatencyWindows: the view's TTFT comes from the plugin's
// first_byte_ms histograms by pool, team and class: each poll takes only the
// samples recorded since the last, stamped with the poll's time, so the
// live view's window holds the recent ones and the summary all of them; a
// row without samples keeps the client's figure; an unconfigured team reads
// the _unknown histogram; the host dropping its older half loses nothing
// new.
func TestPluginLatencyWindows(t *testing.T) {
	l := newPluginLatency()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const search = "fairshare.pool.llama.team.search.class.interactive.first_byte_ms"
	l.poll(t0, 0, []host.Metric{
		histogram(search, 1000, 1000, 1000),
		histogram("fairshare.pool.llama.team.search.class.interactive.upstream_first_byte_ms", 5),
		histogram("fairshare.pool.llama.team._unknown.class.batch.first_byte_ms", 7000),
		{Name: "fairshare.pool.llama.team.search.class.interactive.prompt_tokens_total", Type: hostcalls.MetricCounter, Value: 9},
	})
	l.poll(t0.Add(20*time.Second), 0, []host.Metric{histogram(search, 1000, 1000, 1000, 40, 40)})

	now := t0.Add(25 * time.Second)
	v := teamView{Name: "search", Class: "interactive", P50: time.Hour, HasTTFT: true}
	l.apply(&v, "llama", true, now, 10*time.Second)
	if !v.PluginTTFT || v.P50 != 40*time.Millisecond || v.P99 != 40*time.Millisecond {
		t.Errorf("window of 10s: p50 %v p99 %v (plugin %v), want 40ms, 40ms from the plugin", v.P50, v.P99, v.PluginTTFT)
	}
	v = teamView{Name: "search", Class: "interactive"}
	l.apply(&v, "llama", true, now, 0)
	if v.P50 != time.Second || v.P99 != time.Second {
		t.Errorf("whole run: p50 %v p99 %v, want 1s, 1s (three of five samples)", v.P50, v.P99)
	}
	v = teamView{Name: "chat", Class: "interactive", P50: 3 * time.Second, P99: 4 * time.Second, HasTTFT: true}
	l.apply(&v, "llama", true, now, 0)
	if v.PluginTTFT || v.P50 != 3*time.Second {
		t.Errorf("no plugin samples: p50 %v (plugin %v), want the client's 3s", v.P50, v.PluginTTFT)
	}
	if c := ttftCell(v.P50, v); c != "3.00s*" {
		t.Errorf("client figure cell = %q, want 3.00s*", c)
	}
	v = teamView{Name: "intruder", Class: "batch"}
	l.apply(&v, "llama", false, now, 0)
	if !v.PluginTTFT || v.P50 != 7*time.Second {
		t.Errorf("unknown team: p50 %v (plugin %v), want _unknown's 7s", v.P50, v.PluginTTFT)
	}
	v = teamView{Name: "search"} // observed traffic: every class
	l.apply(&v, "other", true, now, 0)
	if v.HasTTFT {
		t.Errorf("another pool's row got the plugin's samples: %+v", v)
	}

	// The host keeps 65536 samples, then drops the older half: the two
	// recorded after that are read, and nothing twice.
	const full = "fairshare.pool.llama.team.chat.class.batch.first_byte_ms"
	l.poll(now, 1, []host.Metric{histogram(full, make([]uint64, maxHostSamples)...)})
	l.poll(now, 1, []host.Metric{histogram(full, append(make([]uint64, maxHostSamples/2), 50, 50)...)})
	if got := len(l.samples[latencyKey{"llama", "chat", "batch"}]); got != maxHostSamples+2 {
		t.Errorf("after the host's halving: %d samples read, want %d", got, maxHostSamples+2)
	}
}

func TestParseFirstByte(t *testing.T) {
	for name, want := range map[string]latencyKey{
		"fairshare.pool.p.team.a.class.batch.first_byte_ms": {"p", "a", "batch"},
	} {
		if k, ok := parseFirstByte(name); !ok || k != want {
			t.Errorf("parseFirstByte(%q) = %v, %v; want %v", name, k, ok, want)
		}
	}
	for _, name := range []string{
		"fairshare.pool.p.team.a.class.batch.upstream_first_byte_ms",
		"fairshare.pool.p.team.a.first_byte_ms",
		"other.pool.p.team.a.class.batch.first_byte_ms",
	} {
		if k, ok := parseFirstByte(name); ok {
			t.Errorf("parseFirstByte(%q) = %v, want no match", name, k)
		}
	}
}
