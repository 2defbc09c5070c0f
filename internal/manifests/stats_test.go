package manifests

import (
	"maps"
	"regexp"
	"sort"
	"strings"
	"testing"

	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
)

// This file replays Envoy's tag extraction in Go, as read from Envoy's
// source/common/stats/tag_producer_impl.cc (TagProducerImpl::produceTags)
// and tag_extractor_impl.cc (TagExtractorStdRegexImpl::extractTag):
//
//   - every extractor runs on the stat's full, original name (a
//     TagExtractionContext holding the unchanged name is passed to each);
//   - a regex that matches anywhere (regex_search) with at least one capture
//     group yields a tag: the second group is its value (the first group if
//     there is no second), and the first group's character range is added to
//     an interval set of characters to remove;
//   - after all extractors ran, the union of those ranges is cut from the
//     name once, which gives the tag-extracted name;
//   - the Prometheus endpoint strips a registered custom namespace such as
//     "wasmcustom." from the tag-extracted name, replaces every character
//     outside [a-zA-Z0-9_] with "_", and drops the metric if the result
//     starts with a digit (PrometheusStatsFormatter::metricName).
//
// User stats_tags are compiled as std::regex (ECMAScript); the regexes in
// envoy.yaml use only syntax that ECMAScript and Go's regexp read alike.

// extractor is one stats_tags entry.
type extractor struct {
	name string
	re   *regexp.Regexp
}

// extractors compiles the stats_tags of a StatsConfig.
func extractors(t *testing.T, sc *metricsv3.StatsConfig) []extractor {
	t.Helper()
	var xs []extractor
	for _, tag := range sc.GetStatsTags() {
		re, err := regexp.Compile(tag.GetRegex())
		if err != nil {
			t.Fatalf("stats_tags %s: %v", tag.GetTagName(), err)
		}
		xs = append(xs, extractor{tag.GetTagName(), re})
	}
	return xs
}

// extractOne applies x to name: ok reports a tag, [start, end) is the range
// to cut.
func (x extractor) extractOne(name string) (value string, start, end int, ok bool) {
	m := x.re.FindStringSubmatchIndex(name)
	if len(m) < 4 || m[2] < 0 || m[2] == m[3] {
		return "", 0, 0, false
	}
	value = name[m[2]:m[3]]
	if len(m) >= 6 && m[4] >= 0 && m[4] < m[5] {
		value = name[m[4]:m[5]]
	}
	return value, m[2], m[3], true
}

// extractTags runs every extractor on the original name and cuts the
// collected ranges at the end, as Envoy does.
func extractTags(name string, xs []extractor) (string, map[string]string) {
	tags := map[string]string{}
	cut := make([]bool, len(name))
	for _, x := range xs {
		if v, s, e, ok := x.extractOne(name); ok {
			tags[x.name] = v
			for i := s; i < e; i++ {
				cut[i] = true
			}
		}
	}
	var b strings.Builder
	for i := range len(name) {
		if !cut[i] {
			b.WriteByte(name[i])
		}
	}
	return b.String(), tags
}

// extractTagsSuccessively runs each extractor on the name left by the ones
// before it: the other reading of the extraction rules. The regexes in
// envoy.yaml are meant to give the same result either way.
func extractTagsSuccessively(name string, xs []extractor) (string, map[string]string) {
	tags := map[string]string{}
	for _, x := range xs {
		if v, s, e, ok := x.extractOne(name); ok {
			tags[x.name] = v
			name = name[:s] + name[e:]
		}
	}
	return name, tags
}

var promInvalid = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// prometheusName is the name Envoy's /stats/prometheus gives a tag-extracted
// name; ok is false if Envoy drops the metric.
func prometheusName(extracted string) (name string, ok bool) {
	const ns = "wasmcustom."
	if !strings.HasPrefix(extracted, ns) {
		return promInvalid.ReplaceAllString("envoy_"+extracted, "_"), true
	}
	name = promInvalid.ReplaceAllString(strings.TrimPrefix(extracted, ns), "_")
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		return "", false
	}
	return name, true
}

// series renders a Prometheus series the way the comment in envoy.yaml
// writes it: name{tag="value",...} with tags in extractor order.
func series(name string, tags map[string]string, xs []extractor) string {
	var parts []string
	for _, x := range xs {
		if v, ok := tags[x.name]; ok {
			parts = append(parts, x.name+`="`+v+`"`)
		}
	}
	if len(parts) == 0 {
		return name
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

func TestStatsTags(t *testing.T) {
	b, err := decodeBootstrap(readFile(t, envoyPath))
	if err != nil {
		t.Fatal(err)
	}
	xs := extractors(t, b.GetStatsConfig())
	var names []string
	for _, x := range xs {
		names = append(names, x.name)
	}
	if got, want := strings.Join(names, ","), "pool,team,class,standing,to_pool"; got != want {
		t.Fatalf("stats_tags = %s, want %s", got, want)
	}
	for _, n := range names {
		if !regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`).MatchString(n) {
			t.Errorf("tag name %q is not a valid Prometheus label name", n)
		}
	}

	for _, c := range []struct {
		stat string // the name Envoy registers (wasmcustom.<plugin's name>)
		want string // the Prometheus series
	}{
		// The four shapes of team-level names.
		{"wasmcustom.fairshare.pool.llama-8b.team.search.class.interactive.standing.within.requests_total",
			`fairshare_requests_total{pool="llama-8b",team="search",class="interactive",standing="within"}`},
		{"wasmcustom.fairshare.pool.llama-8b.team.search.class.batch.requests_total",
			`fairshare_requests_total{pool="llama-8b",team="search",class="batch"}`},
		{"wasmcustom.fairshare.pool.llama-8b.team.research.standing.borrowing.requests_total",
			`fairshare_requests_total{pool="llama-8b",team="research",standing="borrowing"}`},
		{"wasmcustom.fairshare.pool.llama-8b.team.chat.in_flight",
			`fairshare_in_flight{pool="llama-8b",team="chat"}`},
		{"wasmcustom.fairshare.pool.llama-8b.team._unknown.borrowed_total",
			`fairshare_borrowed_total{pool="llama-8b",team="_unknown"}`},
		// The user level's gauges (user_header): per team, no user label.
		{"wasmcustom.fairshare.pool.llama-8b.team.search.users_active",
			`fairshare_users_active{pool="llama-8b",team="search"}`},
		{"wasmcustom.fairshare.pool.llama-8b.team.search.over",
			`fairshare_over{pool="llama-8b",team="search"}`},
		// Spill-over: from pool, team and to pool.
		{"wasmcustom.fairshare.pool.llama-8b.team.chat.to_pool.llama-8b-ondemand.spilled_total",
			`fairshare_spilled_total{pool="llama-8b",team="chat",to_pool="llama-8b-ondemand"}`},
		{"wasmcustom.fairshare.pool.a.team._unknown.to_pool.team.spilled_total",
			`fairshare_spilled_total{pool="a",team="_unknown",to_pool="team"}`},
		// A <metric> with dots keeps them as underscores.
		{"wasmcustom.fairshare.pool.llama-8b.team.chat.usage.tokens",
			`fairshare_usage_tokens{pool="llama-8b",team="chat"}`},
		// Pool level: only the pool tag.
		{"wasmcustom.fairshare.pool.llama-8b.capacity", `fairshare_capacity{pool="llama-8b"}`},
		{"wasmcustom.fairshare.pool.llama-8b.in_flight", `fairshare_in_flight{pool="llama-8b"}`},
		{"wasmcustom.fairshare.pool.qwen.cas_retries_total", `fairshare_cas_retries_total{pool="qwen"}`},
		// Plugin level: no tags, even when the name starts like a keyword.
		{"wasmcustom.fairshare.unscheduled_total", "fairshare_unscheduled_total"},
		{"wasmcustom.fairshare.pools", "fairshare_pools"},
		{"wasmcustom.fairshare.team_header_missing_total", "fairshare_team_header_missing_total"},
		// Values that equal a keyword are read by position.
		{"wasmcustom.fairshare.pool.team.team.class.inflight", `fairshare_inflight{pool="team",team="class"}`},
		{"wasmcustom.fairshare.pool.p.team.standing.standing.class.x", `fairshare_x{pool="p",team="standing",standing="class"}`},
		// Other plugins' metrics and Envoy's own are left alone.
		{"wasmcustom.other.pool.a.team.b.c", "other_pool_a_team_b_c"},
		{"cluster.vllm.upstream_rq_total", "envoy_cluster_vllm_upstream_rq_total"},
	} {
		ext, tags := extractTags(c.stat, xs)
		name, ok := prometheusName(ext)
		if !ok {
			t.Errorf("%s: Envoy drops the metric (tag-extracted name %q)", c.stat, ext)
			continue
		}
		if got := series(name, tags, xs); got != c.want {
			t.Errorf("extract(%s) = %s, want %s", c.stat, got, c.want)
		}
		ext2, tags2 := extractTagsSuccessively(c.stat, xs)
		if ext2 != ext || !maps.Equal(tags2, tags) {
			t.Errorf("%s: extracting successively gives %q %v, on the original name %q %v", c.stat, ext2, tags2, ext, tags)
		}
	}
}

// TestStatsTagsDistinct checks that no two metric names of the plugin's
// scheme end up as the same Prometheus series (which Envoy would print twice
// with different values).
func TestStatsTagsDistinct(t *testing.T) {
	b, err := decodeBootstrap(readFile(t, envoyPath))
	if err != nil {
		t.Fatal(err)
	}
	xs := extractors(t, b.GetStatsConfig())
	var stats []string
	for _, metric := range []string{"requests_total", "inflight", "usage.tokens"} {
		stats = append(stats, "wasmcustom.fairshare."+metric)
		for _, pool := range []string{"llama-8b", "team", "p"} {
			p := "wasmcustom.fairshare.pool." + pool + "."
			stats = append(stats, p+metric)
			for _, team := range []string{"search", "class", "standing"} {
				tm := p + "team." + team + "."
				stats = append(stats, tm+metric)
				for _, class := range []string{"", "class.interactive.", "class.batch."} {
					for _, standing := range []string{"", "standing.within.", "standing.borrowing."} {
						stats = append(stats, tm+class+standing+metric)
					}
				}
			}
		}
	}
	seen := map[string]string{}
	for _, s := range stats {
		ext, tags := extractTags(s, xs)
		keys := make([]string, 0, len(tags))
		for k, v := range tags {
			keys = append(keys, k+"="+v)
		}
		sort.Strings(keys)
		id := ext + "{" + strings.Join(keys, ",") + "}"
		if prev, ok := seen[id]; ok && prev != s {
			t.Errorf("%s and %s both become %s", prev, s, id)
		}
		seen[id] = s
	}
}
