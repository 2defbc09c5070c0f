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
	v = teamView{Name: "chat", Class: "interactive", P50: 3 * time.Second, P99: 4 * time.Second, HasTTFT: true, Done: 1}
	l.apply(&v, "llama", true, now, 0)
	if v.PluginTTFT || v.P50 != 3*time.Second {
		t.Errorf("no plugin samples: p50 %v (plugin %v), want the client's 3s", v.P50, v.PluginTTFT)
	}
	if c := ttftCell(v.P50, v); c != "3.00s*" {
		t.Errorf("client figure cell = %q, want 3.00s*", c)
	}
	if v.Done = 0; ttftCell(v.P50, v) != "-" {
		t.Errorf("a row that completed nothing: cell %q, want - (no token was ever timed)", ttftCell(v.P50, v))
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
	if got := len(l.samples[latencyKey{"llama", "chat", "batch", firstByteMetric}]); got != maxHostSamples+2 {
		t.Errorf("after the host's halving: %d samples read, want %d", got, maxHostSamples+2)
	}
}

// TestPluginLatencyQueueAndTotal: the summary's queue time and end to end
// come from the plugin's queue_time_ms (held requests only: a team never
// held has none) and total_time_ms histograms of the row's pool, team and
// class.
func TestPluginLatencyQueueAndTotal(t *testing.T) {
	l := newPluginLatency()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	l.poll(t0, 0, []host.Metric{
		histogram("fairshare.pool.llama.team.research.class.batch.queue_time_ms", 3000, 1000, 2000),
		histogram("fairshare.pool.llama.team.research.class.batch.total_time_ms", 5000, 6000, 4000, 9000),
		histogram("fairshare.pool.llama.team.search.class.interactive.total_time_ms", 800),
	})
	v := teamView{Name: "research", Class: "batch"}
	l.apply(&v, "llama", true, t0, 0)
	if v.Queue != (latencyStats{N: 3, P50: 2 * time.Second, P99: 3 * time.Second}) || v.Total != (latencyStats{N: 4, P50: 5 * time.Second, P99: 9 * time.Second}) {
		t.Errorf("research: queue %+v, total %+v; want 3 held (p50 2s, p99 3s), 4 ended (p50 5s, p99 9s)", v.Queue, v.Total)
	}
	v = teamView{Name: "search", Class: "interactive"}
	l.apply(&v, "llama", true, t0, 0)
	if v.Queue.N != 0 || v.Total != (latencyStats{N: 1, P50: 800 * time.Millisecond, P99: 800 * time.Millisecond}) {
		t.Errorf("search: queue %+v, total %+v; want none held, one ended in 800ms", v.Queue, v.Total)
	}
	v = teamView{Name: "research", Class: "batch"}
	l.apply(&v, "llama", true, t0, 10*time.Second)
	if v.Queue.N != 0 || v.Total.N != 0 {
		t.Errorf("the live view's window filled the summary's figures: %+v %+v", v.Queue, v.Total)
	}
}

// TestPluginJain: the pools' fairness_jain gauge (thousandths) and
// saturated_teams are read at every poll: the view shows the last poll's,
// the lowest over the proxies; the summary the p50 and least of the
// readings with two or more saturated teams (a window with one compares
// nobody); a pool whose gauge was never set has no reading.
func TestPluginJain(t *testing.T) {
	l := newPluginLatency()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	gauge := func(name string, v int64) host.Metric {
		return host.Metric{Name: name, Type: hostcalls.MetricGauge, Value: v}
	}
	poll := func(i int, j, n int64) {
		l.poll(t0, i, []host.Metric{gauge("fairshare.pool.llama.fairness_jain", j), gauge("fairshare.pool.llama.saturated_teams", n),
			gauge("fairshare.pool.qwen.fairness_jain", 0)})
	}
	for _, r := range [][2]int64{{1000, 0}, {1000, 1}, {950, 2}, {990, 2}, {800, 3}} {
		l.resetJain()
		poll(0, r[0], r[1])
	}
	poll(1, 700, 2) // a second proxy, same poll
	if r, ok := l.jainOf("llama"); !ok || r != (jainReading{J: 0.7, Saturated: 2}) {
		t.Errorf("jainOf(llama) = %+v, %v; want the lowest proxy's 0.700 over 2 teams", r, ok)
	}
	if _, ok := l.jainOf("qwen"); ok {
		t.Errorf("jainOf(qwen) has a reading; its gauge was never set")
	}
	if got, want := l.jainOver("llama"), (jainSummary{P50: 0.8, Min: 0.7, Readings: 4, All: 6}); got != want {
		t.Errorf("jainOver(llama) = %+v, want %+v", got, want)
	}
}

func TestParseClassMetric(t *testing.T) {
	for name, want := range map[string]latencyKey{
		"fairshare.pool.p.team.a.class.batch.first_byte_ms":        {"p", "a", "batch", firstByteMetric},
		"fairshare.pool.p.team.a.class.interactive.queue_time_ms":  {"p", "a", "interactive", queueTimeMetric},
		"fairshare.pool.p.team._unknown.class.batch.total_time_ms": {"p", "_unknown", "batch", totalTimeMetric},
	} {
		if k, ok := parseClassMetric(name); !ok || k != want {
			t.Errorf("parseClassMetric(%q) = %v, %v; want %v", name, k, ok, want)
		}
	}
	for _, name := range []string{
		"fairshare.pool.p.team.a.class.batch.upstream_first_byte_ms",
		"fairshare.pool.p.team.a.first_byte_ms",
		"other.pool.p.team.a.class.batch.first_byte_ms",
	} {
		if k, ok := parseClassMetric(name); ok {
			t.Errorf("parseClassMetric(%q) = %v, want no match", name, k)
		}
	}
}
