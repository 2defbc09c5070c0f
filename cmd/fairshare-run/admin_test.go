package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"sigs.k8s.io/yaml"
)

// TestStatsTagsAsEnvoyYAML: the admin port tags the plugin's metrics with
// envoy.yaml's stats_tags, names and regexes in its order, so that make
// run's /stats/prometheus is what a gateway running envoy.yaml serves.
func TestStatsTagsAsEnvoyYAML(t *testing.T) {
	b, err := os.ReadFile("../../envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		StatsConfig struct {
			StatsTags []struct {
				TagName string `json:"tag_name"`
				Regex   string `json:"regex"`
			} `json:"stats_tags"`
		} `json:"stats_config"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, x := range statsTags {
		got = append(got, x.name+" "+x.re.String())
	}
	for _, x := range doc.StatsConfig.StatsTags {
		want = append(want, x.TagName+" "+x.Regex)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == 0 {
		t.Errorf("admin.go's statsTags:\n%s\nenvoy.yaml's stats_tags:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWriteEnvoyPrometheus: the text Envoy's admin would serve for a few
// of the plugin's metrics: counters, gauges, histograms in that order,
// one TYPE line per tagged name, tags in stats_tags order, the default
// buckets, _sum and _count; a name Envoy drops (a leading digit once
// tagged) is left out.
func TestWriteEnvoyPrometheus(t *testing.T) {
	ms := []host.Metric{
		{Name: "fairshare.pool.p.team.b.class.batch.standing.borrowing.requests_total", Type: hostcalls.MetricCounter, Value: 7},
		{Name: "fairshare.pool.p.team.a.class.interactive.standing.within.requests_total", Type: hostcalls.MetricCounter, Value: 3},
		{Name: "fairshare.pool.p.fairness_jain", Type: hostcalls.MetricGauge, Value: 982},
		{Name: "fairshare.pool.p.team.a.to_pool.q.spilled_total", Type: hostcalls.MetricCounter, Value: 2},
		{Name: "fairshare.pools", Type: hostcalls.MetricGauge, Value: 1},
		{Name: "fairshare.pool.p.team.a.class.interactive.queue_time_ms", Type: hostcalls.MetricHistogram, Samples: []uint64{3, 700, 40000}},
		{Name: "9lives", Type: hostcalls.MetricCounter, Value: 1},
	}
	var b strings.Builder
	if err := writeEnvoyPrometheus(&b, ms); err != nil {
		t.Fatal(err)
	}
	want := `# TYPE fairshare_requests_total counter
fairshare_requests_total{pool="p",team="a",class="interactive",standing="within"} 3
fairshare_requests_total{pool="p",team="b",class="batch",standing="borrowing"} 7

# TYPE fairshare_spilled_total counter
fairshare_spilled_total{pool="p",team="a",to_pool="q"} 2

# TYPE fairshare_fairness_jain gauge
fairshare_fairness_jain{pool="p"} 982

# TYPE fairshare_pools gauge
fairshare_pools{} 1

# TYPE fairshare_queue_time_ms histogram
`
	for _, le := range []struct {
		le string
		n  int
	}{{"0.5", 0}, {"1", 0}, {"5", 1}, {"10", 1}, {"25", 1}, {"50", 1}, {"100", 1}, {"250", 1}, {"500", 1}, {"1000", 2}, {"2500", 2},
		{"5000", 2}, {"10000", 2}, {"30000", 2}, {"60000", 3}, {"300000", 3}, {"600000", 3}, {"1800000", 3}, {"3600000", 3}, {"+Inf", 3}} {
		want += `fairshare_queue_time_ms_bucket{pool="p",team="a",class="interactive",le="` + le.le + `"} ` + string(rune('0'+le.n)) + "\n"
	}
	want += `fairshare_queue_time_ms_sum{pool="p",team="a",class="interactive"} 40703
fairshare_queue_time_ms_count{pool="p",team="a",class="interactive"} 3

`
	if got := b.String(); got != want {
		t.Errorf("writeEnvoyPrometheus:\n%s\nwant:\n%s", got, want)
	}
}
