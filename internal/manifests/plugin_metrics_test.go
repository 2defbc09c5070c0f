package manifests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// TestPluginMetricsSplitByEnvoyTags runs the built plugin.wasm with the
// example configuration, makes it define its metrics (requests within share
// and borrowing, of both classes, from configured and unknown teams, a
// rejection, a tick for the gauges), and passes every name it defined
// through envoy.yaml's stats_tags the way Envoy does. Each name must come
// out as a valid Prometheus name carrying the pool and team of the name as
// tags, with no pool or team left in the name itself, and no two metrics may
// collapse into one series. It ties the plugin's metric naming to the
// bootstrap that operators copy, so that neither drifts alone.
func TestPluginMetricsSplitByEnvoyTags(t *testing.T) {
	b, err := decodeBootstrap(readFile(t, envoyPath))
	if err != nil {
		t.Fatalf("decode %s: %v", envoyPath, err)
	}
	xs := extractors(t, b.GetStatsConfig())

	ctx := context.Background()
	mod := pluginModule(t)
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	// A capacity of 2 so that the second request of a team borrows.
	// Without flow control (the example holds borrowers for 30s), so that
	// every request goes and its series exist.
	cfg := strings.Replace(string(readFile(t, examplePath)), `"capacity": 64`, `"capacity": 2`, 1)
	cfg = strings.Replace(cfg, `"max_queue_time": "30s"`, `"max_queue_time": "0s"`, 1)
	h, err := mod.Start(ctx, host.Options{VMs: 1, PluginName: "fairshare", VMID: t.Name(), PluginConfig: []byte(cfg), Clock: clock})
	if err != nil {
		t.Fatalf("start plugin.wasm: %v", err)
	}
	t.Cleanup(func() { h.Close(ctx) })

	const model = "meta-llama/Llama-3.1-8B-Instruct"
	send := func(team, class string) {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, model)
		hdrs := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "vllm"},
			{"content-type", "application/json"}, {"x-team", team}, {"x-request-class", class}}
		s := h.NewStream(0)
		if s.RequestHeaders(hdrs, false) != host.Ended {
			s.RequestBody([]byte(body), true)
		}
	}
	for _, team := range []string{"search", "chat", "research", "intruder"} {
		for _, class := range []string{"interactive", "batch", "interactive"} {
			send(team, class)
		}
	}
	send("search", "urgent") // a rejection: bad class
	h.Advance(2 * time.Second)

	seen := map[string]string{}
	var n int
	for _, m := range h.MetricList() {
		if !strings.HasPrefix(m.Name, "fairshare.") {
			continue
		}
		n++
		full := "wasmcustom." + m.Name
		extracted, tags := extractTags(full, xs)
		prom, ok := prometheusName(extracted)
		if !ok {
			t.Errorf("%s: Envoy would not export it (extracted %q)", m.Name, extracted)
			continue
		}
		for _, key := range []string{"pool", "team", "class", "standing"} {
			if strings.Contains(m.Name, "."+key+".") && tags[key] == "" {
				t.Errorf("%s: no %s tag extracted (tags %v)", m.Name, key, tags)
			}
			if strings.Contains(extracted, "."+key+".") {
				t.Errorf("%s: %q still names a %s after extraction", m.Name, extracted, key)
			}
		}
		if v := tags["pool"]; v != "" && v != "llama-8b" {
			t.Errorf("%s: pool tag %q, want llama-8b", m.Name, v)
		}
		if v := tags["team"]; v != "" && !map[string]bool{"search": true, "chat": true, "research": true, "_unknown": true}[v] {
			t.Errorf("%s: team tag %q is not a configured team or _unknown", m.Name, v)
		}
		s := series(prom, tags, xs)
		if other, dup := seen[s]; dup {
			t.Errorf("%s and %s both become the series %s", other, m.Name, s)
		}
		seen[s] = m.Name
	}
	// The run defines per-class request counters for 4 teams, per-team
	// gauges and pool counters: far more than a handful.
	if n < 20 {
		t.Fatalf("the plugin defined only %d fairshare metrics; the run did not exercise it", n)
	}
	for _, want := range []string{
		`fairshare_requests_total{pool="llama-8b",team="search",class="interactive",standing="within"}`,
		`fairshare_requests_total{pool="llama-8b",team="search",class="interactive",standing="borrowing"}`,
		`fairshare_requests_total{pool="llama-8b",team="_unknown",class="batch",standing="borrowing"}`,
		`fairshare_in_flight{pool="llama-8b",team="chat"}`,
	} {
		if _, ok := seen[want]; !ok {
			t.Errorf("series %s missing; have %d series", want, len(seen))
		}
	}
}
