package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// Paths relative to this package: the Grafana dashboard, and the example
// configurations of spill-over and of capacity_from.
const (
	dashboardPath = "../../deploy/grafana/fairshare-dashboard.json"
	spillPath     = "../../testdata/plugin/spill.json"
	elasticPath   = "../../testdata/plugin/elastic.json"
)

var (
	compileOnce sync.Once
	compiledMod *host.Module
	compileErr  error
)

// pluginModule compiles the built plugin.wasm once per test binary.
func pluginModule(t *testing.T) *host.Module {
	t.Helper()
	wasm := wasmbuild.Plugin(t)
	compileOnce.Do(func() { compiledMod, compileErr = host.Compile(context.Background(), wasm) })
	if compileErr != nil {
		t.Fatalf("compile plugin.wasm: %v", compileErr)
	}
	return compiledMod
}

// promMetric is a metric as Prometheus sees it from Envoy's
// /stats/prometheus with envoy.yaml's stats_tags.
type promMetric struct {
	kind   hostcalls.MetricType
	labels map[string]bool // the tags any of its series carries
}

// pluginCatalog runs the built plugin.wasm through every path that defines
// a metric (scheduled requests of every class and standing, each rejection
// reason, an unscheduled model, a response without usage, lost
// compare-and-swap races, a failing store under both failure modes, a
// tick for the gauges; shadow mode's would-borrow, would-hold and
// would-refuse reasons; a request spilled to a fallback pool; engine
// readings of capacity_from, one answered and one failing), then passes
// every name it defined through envoy.yaml's stats_tags. It returns the
// Prometheus metrics by name.
func pluginCatalog(t *testing.T) map[string]promMetric {
	t.Helper()
	b, err := decodeBootstrap(readFile(t, envoyPath))
	if err != nil {
		t.Fatalf("decode %s: %v", envoyPath, err)
	}
	xs := extractors(t, b.GetStatsConfig())
	mod := pluginModule(t)
	example := string(readFile(t, examplePath))
	edit := func(cfg string, pairs ...string) string {
		for i := 0; i < len(pairs); i += 2 {
			if strings.Count(cfg, pairs[i]) != 1 {
				t.Fatalf("configuration: %q found %d times, want once", pairs[i], strings.Count(cfg, pairs[i]))
			}
			cfg = strings.Replace(cfg, pairs[i], pairs[i+1], 1)
		}
		return cfg
	}
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	chat := func(model string) []byte {
		return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, model)
	}
	usage := []byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}}`)

	var metrics []host.Metric
	// runWith starts plugin.wasm with cfg (opts, when not nil, adjusting
	// the host's options), runs script, ticks and collects the metrics.
	runWith := func(name, cfg string, opts func(o *host.Options), script func(h *host.Host, setFault, getFault *atomic.Uint32)) {
		var setFault, getFault atomic.Uint32 // hostcalls.Status to return; 0 (OK) lets the call run
		clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
		o := host.Options{
			VMs: 1, PluginName: "fairshare", VMID: t.Name() + "/" + name, PluginConfig: []byte(cfg), Clock: clock, Seed: 1,
			SharedDataFault: func(_ int, op, _ string) hostcalls.Status {
				if op == host.SharedDataSet {
					return hostcalls.Status(setFault.Load())
				}
				return hostcalls.Status(getFault.Load())
			},
		}
		if opts != nil {
			opts(&o)
		}
		h, err := mod.Start(context.Background(), o)
		if err != nil {
			t.Fatalf("start plugin.wasm (%s): %v", name, err)
		}
		defer h.Close(context.Background())
		script(h, &setFault, &getFault)
		h.Advance(2 * time.Second)
		metrics = append(metrics, h.MetricList()...)
	}
	run := func(name, cfg string, script func(h *host.Host, setFault, getFault *atomic.Uint32)) {
		runWith(name, cfg, nil, script)
	}
	send := func(h *host.Host, method, path string, hdrs [][2]string, body []byte) *host.Stream {
		all := append([][2]string{{":method", method}, {":path", path}, {":authority", "vllm"}, {"content-type", "application/json"}}, hdrs...)
		s := h.NewStream(0)
		if s.RequestHeaders(all, body == nil) != host.Ended && body != nil {
			s.RequestBody(body, true)
		}
		return s
	}
	respond := func(s *host.Stream, body []byte) {
		s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
		s.ResponseBody(body, true)
		s.Complete()
	}
	team := func(t, class string) [][2]string { return [][2]string{{"x-team", t}, {"x-request-class", class}} }

	// Capacity 2, so a team's second request borrows; a status token; a
	// small body limit; failure_mode open; no flow control, so borrowers go.
	run("open", edit(example, `"capacity": 64`, `"capacity": 2`, `"status_token": ""`, `"status_token": "s3cret"`, `"max_queue_time": "30s"`, `"max_queue_time": "0s"`,
		`"max_body_bytes": 8388608`, `"max_body_bytes": 4096`),
		func(h *host.Host, setFault, _ *atomic.Uint32) {
			for _, tm := range []string{"search", "chat", "research", "intruder"} {
				for _, class := range []string{"interactive", "batch", "interactive"} {
					respond(send(h, "POST", "/v1/chat/completions", team(tm, class), chat(model)), usage)
				}
				send(h, "POST", "/v1/chat/completions", team(tm, "batch"), chat(model)) // stays in flight
			}
			send(h, "POST", "/v1/chat/completions", team("search", "urgent"), chat(model))                                     // bad_class
			send(h, "POST", "/v1/chat/completions", nil, chat(model))                                                          // no_team
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), []byte(`[1]`))                                    // bad_body
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), make([]byte, 5000))                               // body_too_large
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), chat("unknown/model"))                            // unknown_model
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), []byte(`{"messages":[]}`))                        // no_model
			send(h, "POST", "/v1/chat/completions", append(team("search", "batch"), [2]string{"x-team", "chat"}), chat(model)) // duplicate_header
			send(h, "POST", "/v1/messages", nil, []byte(`{"priority":-1}`))                                                    // stripped_priority
			send(h, "GET", "/fairshare/status", nil, nil)                                                                      // status_auth
			send(h, "POST", "/fairshare/status", [][2]string{{"authorization", "Bearer s3cret"}}, []byte{})                    // status_method
			respond(send(h, "POST", "/v1/chat/completions", team("chat", "batch"), chat(model)), []byte(`{}`))                 // usage_missing
			setFault.Store(uint32(hostcalls.StatusCASMismatch))                                                                // cas_retries, failures, failed_open
			send(h, "POST", "/v1/chat/completions", team("chat", "batch"), chat(model))
			setFault.Store(0)
		})
	// unknown_team reject and failure_mode closed.
	run("closed", edit(example, `"unknown_team": "borrow"`, `"unknown_team": "reject"`, `"failure_mode": "open"`, `"failure_mode": "closed"`,
		`"unscheduled": "strip"`, `"unscheduled": "reject"`, `"unknown_model": "reject"`, `"unknown_model": "lowest"`),
		func(h *host.Host, _, getFault *atomic.Uint32) {
			send(h, "POST", "/v1/chat/completions", team("intruder", "batch"), chat(model)) // rejected_unknown_team
			send(h, "POST", "/v1/messages", nil, []byte(`{"priority":-1}`))                 // rejected_client_priority
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), chat("lora"))  // unscheduled
			getFault.Store(uint32(hostcalls.StatusInternalFailure))                         // rejected_unavailable
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), chat(model))
			getFault.Store(0)
		})
	// Flow control: a borrower held, one dispatched, one timed out.
	run("flow", edit(example, `"max_queue_time": "30s"`, `"max_queue_time": "5s"`, `"capacity": 64`, `"capacity": 2`),
		func(h *host.Host, _, _ *atomic.Uint32) {
			first := send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model)) // within share
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model))          // borrows the last slot
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model))          // held: waiting
			respond(first, usage)                                                                    // dispatched_total, queue_time_ms
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model))          // held, then queue_timeouts_total
			h.Advance(6 * time.Second)
		})
	// Shadow mode, with flow control, unknown_team reject and failure_mode
	// closed: a borrower, one that enforce mode would have held, and each
	// refusal of the request path (at the plugin's and at the pool's
	// level), all forwarded.
	run("shadow", edit(example, `"mode": "enforce"`, `"mode": "shadow"`, `"capacity": 64`, `"capacity": 2`,
		`"unknown_team": "borrow"`, `"unknown_team": "reject"`, `"failure_mode": "open"`, `"failure_mode": "closed"`,
		`"max_body_bytes": 8388608`, `"max_body_bytes": 4096`),
		func(h *host.Host, _, getFault *atomic.Uint32) {
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model))                                    // within share
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model))                                    // would_borrow
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model))                                    // would_hold
			send(h, "POST", "/v1/chat/completions", nil, chat(model))                                                          // no_team
			send(h, "POST", "/v1/chat/completions", team("search", "urgent"), chat(model))                                     // bad_class
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), []byte(`[1]`))                                    // bad_body
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), make([]byte, 5000))                               // body_too_large
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), chat("unknown/model"))                            // unknown_model
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), []byte(`{"messages":[]}`))                        // no_model
			send(h, "POST", "/v1/chat/completions", append(team("search", "batch"), [2]string{"x-team", "chat"}), chat(model)) // duplicate_header
			send(h, "POST", "/v1/chat/completions", team("intruder", "batch"), chat(model))                                    // unknown_team (pool)
			getFault.Store(uint32(hostcalls.StatusInternalFailure))                                                            // unavailable (pool)
			send(h, "POST", "/v1/chat/completions", team("search", "batch"), chat(model))
			getFault.Store(0)
		})
	// Spill-over (held headers): llama-8b full for research's borrower,
	// which spill_to moves to llama-8b-ondemand.
	runWith("spill", edit(string(readFile(t, spillPath)), `"capacity": 16`, `"capacity": 2`),
		func(o *host.Options) { o.AllowOnHeadersStopIteration = true },
		func(h *host.Host, _, _ *atomic.Uint32) {
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model)) // within share
			send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model)) // borrows the last slot
			s := send(h, "POST", "/v1/chat/completions", team("research", "batch"), chat(model))
			pool := ""
			for _, kv := range s.RequestHeaderMap() {
				if kv[0] == "x-fairshare-pool" {
					pool = kv[1]
				}
			}
			if pool != "llama-8b-ondemand" {
				t.Errorf("spill run: the third request went to pool %q, want llama-8b-ondemand", pool)
			}
		})
	// capacity_from: the engine's /metrics read once, then failing.
	var engineDown atomic.Bool
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if engineDown.Load() || r.URL.Path != "/metrics" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "# TYPE vllm:cache_config_info gauge\n"+
			`vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100",num_gpu_blocks_override="None"} 1.0`+"\n")
	}))
	defer engine.Close()
	runWith("capacity", string(readFile(t, elasticPath)),
		func(o *host.Options) {
			o.Clusters = map[string]string{"llama-8b-engine": engine.URL}
			o.HTTPCallsOnWait = true
		},
		func(h *host.Host, _, _ *atomic.Uint32) {
			poll := func(d time.Duration) { // a tick at a time, each round's answers delivered after it
				for ; d > 0; d -= time.Second {
					h.Advance(time.Second)
					h.Wait()
				}
			}
			poll(2 * time.Second)
			if m := h.Metrics(); m["fairshare.pool.llama-8b.capacity_engines"].Value != 1 || m["fairshare.pool.llama-8b.kv_tokens"].Value != 1600 {
				t.Errorf("capacity run: capacity_engines %d, kv_tokens %d after a read, want 1 and 1600 (100 blocks of 16)",
					m["fairshare.pool.llama-8b.capacity_engines"].Value, m["fairshare.pool.llama-8b.kv_tokens"].Value)
			}
			engineDown.Store(true)
			poll(2 * time.Second)
			if m := h.Metrics()["fairshare.pool.llama-8b.capacity_read_failures_total"]; m.Value == 0 {
				t.Error("capacity run: no read failure counted with the engine down")
			}
		})

	cat := map[string]promMetric{}
	for _, m := range metrics {
		if !strings.HasPrefix(m.Name, "fairshare.") {
			continue
		}
		extracted, tags := extractTags("wasmcustom."+m.Name, xs)
		name, ok := prometheusName(extracted)
		if !ok {
			t.Fatalf("%s: Envoy would not export it", m.Name)
		}
		names := []string{name}
		if m.Type == hostcalls.MetricHistogram {
			// Envoy exports a histogram as Prometheus's _bucket (with le),
			// _sum and _count series.
			names = []string{name + "_bucket", name + "_sum", name + "_count"}
		}
		for _, name := range names {
			pm, seen := cat[name]
			if !seen {
				pm = promMetric{kind: m.Type, labels: map[string]bool{}}
			} else if pm.kind != m.Type {
				t.Fatalf("%s: defined as both %v and %v", name, pm.kind, m.Type)
			}
			for k := range tags {
				pm.labels[k] = true
			}
			if strings.HasSuffix(name, "_bucket") {
				pm.labels["le"] = true
			}
			cat[name] = pm
		}
	}
	return cat
}

// promRef is what one PromQL expression refers to.
type promRef struct {
	metric string   // a metric name
	labels []string // label names in its {} matchers
	fn     string   // the innermost function or aggregation around it ("" at top level)
}

// promKeywords are PromQL words that are neither metrics nor functions.
var promKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

// promAggregators are the PromQL aggregation operators, which may put a
// grouping clause between their name and their parenthesis.
var promAggregators = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

// promGrouping are the PromQL modifiers followed by a list of label names.
var promGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// parsePromQL lists the metric references of a PromQL expression and the
// label names of its by/without/on/ignoring/group_* lists. It is a lexer,
// not a full parser: enough to find every metric name, the labels each
// selector matches on and the function applied to it, and to reject
// unbalanced brackets.
func parsePromQL(expr string) (refs []promRef, grouping []string, err error) {
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	i := 0
	skipSpace := func() {
		for i < len(expr) && strings.ContainsRune(" \t\n\r", rune(expr[i])) {
			i++
		}
	}
	ident := func() string {
		j := i
		for i < len(expr) && isPart(expr[i]) {
			i++
		}
		return expr[j:i]
	}
	skipString := func() error {
		q := expr[i]
		for i++; i < len(expr); i++ {
			switch expr[i] {
			case '\\':
				i++
			case q:
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	labelList := func() ([]string, error) { // at '('
		var ls []string
		for i++; ; {
			skipSpace()
			if i >= len(expr) {
				return nil, fmt.Errorf("unterminated label list in %q", expr)
			}
			switch c := expr[i]; {
			case c == ')':
				i++
				return ls, nil
			case c == ',':
				i++
			case isStart(c):
				ls = append(ls, ident())
			default:
				return nil, fmt.Errorf("unexpected %q in a label list in %q", c, expr)
			}
		}
	}
	matchers := func() ([]string, error) { // at '{'
		var ls []string
		for i++; ; {
			skipSpace()
			if i >= len(expr) {
				return nil, fmt.Errorf("unterminated {} in %q", expr)
			}
			switch c := expr[i]; {
			case c == '}':
				i++
				return ls, nil
			case c == ',' || c == '=' || c == '!' || c == '~':
				i++
			case c == '"' || c == '\'' || c == '`':
				if err := skipString(); err != nil {
					return nil, err
				}
			case isStart(c):
				ls = append(ls, ident())
			default:
				return nil, fmt.Errorf("unexpected %q in {} in %q", c, expr)
			}
		}
	}
	var stack []string // open parentheses: the function each belongs to
	pending := ""      // an aggregator whose parenthesis follows its grouping clause
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return nil, nil, err
			}
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, nil, fmt.Errorf("unterminated [ in %q", expr)
			}
			i += j + 1
		case c == '{': // a selector without a metric name
			ls, err := matchers()
			if err != nil {
				return nil, nil, err
			}
			top := ""
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			}
			refs = append(refs, promRef{labels: ls, fn: top})
		case c == '(':
			stack = append(stack, pending)
			pending = ""
			i++
		case c == ')':
			if len(stack) == 0 {
				return nil, nil, fmt.Errorf("unbalanced ) in %q", expr)
			}
			stack = stack[:len(stack)-1]
			i++
		case c == '$': // a Grafana variable outside a string
			i++
			ident()
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			word := ident()
			skipSpace()
			next := byte(0)
			if i < len(expr) {
				next = expr[i]
			}
			switch {
			case promGrouping[word] && next == '(':
				ls, err := labelList()
				if err != nil {
					return nil, nil, err
				}
				grouping = append(grouping, ls...)
			case promKeywords[strings.ToLower(word)]:
			case promAggregators[word] && (next == 'b' || next == 'w'):
				pending = word
			case next == '(':
				stack = append(stack, word)
				i++
			default:
				r := promRef{metric: word}
				if len(stack) > 0 {
					r.fn = stack[len(stack)-1]
				}
				if next == '{' {
					ls, err := matchers()
					if err != nil {
						return nil, nil, err
					}
					r.labels = ls
				}
				refs = append(refs, r)
			}
		default:
			i++
		}
	}
	if len(stack) > 0 {
		return nil, nil, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return refs, grouping, nil
}

func TestParsePromQL(t *testing.T) {
	for _, c := range []struct {
		expr     string
		refs     string // metric[labels]@fn, space-separated
		grouping string
	}{
		{`fairshare_in_flight`, `fairshare_in_flight[]@`, ``},
		{`sum by (team) (fairshare_in_flight{pool=~"$pool", team!=""}) / 1000`, `fairshare_in_flight[pool team]@sum`, `team`},
		{`sum by (team, standing) (rate(fairshare_requests_total{pool=~"$pool"}[$__rate_interval]))`,
			`fairshare_requests_total[pool]@rate`, `team standing`},
		{`a{x="by (y)"} and on (z) b offset 5m`, `a[x]@ b[]@`, `z`},
		{`max without (pod) (m1{l="}"}) - ignoring (q) group_left (r) m2`, `m1[l]@max m2[]@`, `pod q r`},
		{`histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))`, `x_bucket[]@rate`, `le`},
	} {
		refs, grouping, err := parsePromQL(c.expr)
		if err != nil {
			t.Errorf("parsePromQL(%q) error %v", c.expr, err)
			continue
		}
		var got []string
		for _, r := range refs {
			got = append(got, fmt.Sprintf("%s[%s]@%s", r.metric, strings.Join(r.labels, " "), r.fn))
		}
		if g := strings.Join(got, " "); g != c.refs {
			t.Errorf("parsePromQL(%q) refs = %s, want %s", c.expr, g, c.refs)
		}
		if g := strings.Join(grouping, " "); g != c.grouping {
			t.Errorf("parsePromQL(%q) grouping = %s, want %s", c.expr, g, c.grouping)
		}
	}
	for _, bad := range []string{`sum(x`, `x)`, `x{a="b"`, `x{a="b}`, `rate(x[5m)`} {
		if _, _, err := parsePromQL(bad); err == nil {
			t.Errorf("parsePromQL(%q) = nil error, want an error", bad)
		}
	}
}

// dashboardExprs returns every PromQL expression of a Grafana dashboard
// (panel targets at any depth, and template variable queries, whose
// label_values(metric, label) is turned into metric{label!=""}), keyed by
// where it is.
func dashboardExprs(data []byte) (map[string]string, error) {
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	exprs := map[string]string{}
	type panel struct {
		Title   string            `json:"title"`
		Panels  []json.RawMessage `json:"panels"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	}
	var walk func(ps []json.RawMessage) error
	walk = func(ps []json.RawMessage) error {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					return fmt.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
				}
				exprs[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.Query
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		s, _ := q.(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, s)
		}
		exprs["variable "+v.Name] = m[1] + "{" + m[2] + `!=""}`
	}
	return exprs, nil
}

// checkDashboard checks every expression of a dashboard against the
// metrics the plugin defines: each metric name exists, each label it
// matches on is one its series carry, each grouping label is a tag, and
// counters appear only under rate, irate or increase (gauges never).
func checkDashboard(data []byte, cat map[string]promMetric) []error {
	exprs, err := dashboardExprs(data)
	if err != nil {
		return []error{err}
	}
	if len(exprs) == 0 {
		return []error{fmt.Errorf("no expressions")}
	}
	tags := map[string]bool{}
	for _, m := range cat {
		for l := range m.labels {
			tags[l] = true
		}
	}
	var errs []error
	where := make([]string, 0, len(exprs))
	for w := range exprs {
		where = append(where, w)
	}
	sort.Strings(where)
	for _, w := range where {
		expr := exprs[w]
		refs, grouping, err := parsePromQL(expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w, err))
			continue
		}
		for _, l := range grouping {
			if !tags[l] {
				errs = append(errs, fmt.Errorf("%s: groups by %q, which no fairshare metric carries", w, l))
			}
		}
		for _, r := range refs {
			m, ok := cat[r.metric]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: %s is not a metric plugin.wasm defines (after envoy.yaml's stats_tags)", w, r.metric))
				continue
			}
			for _, l := range r.labels {
				if !m.labels[l] {
					errs = append(errs, fmt.Errorf("%s: %s has no %q label (it has %v)", w, r.metric, l, m.labels))
				}
			}
			overTime := r.fn == "rate" || r.fn == "irate" || r.fn == "increase"
			switch {
			case (m.kind == hostcalls.MetricCounter || m.kind == hostcalls.MetricHistogram) && !overTime:
				errs = append(errs, fmt.Errorf("%s: counter %s used outside rate/irate/increase", w, r.metric))
			case m.kind == hostcalls.MetricGauge && overTime:
				errs = append(errs, fmt.Errorf("%s: gauge %s used in %s", w, r.metric, r.fn))
			}
		}
	}
	return errs
}

// TestDashboard checks that every expression of the Grafana dashboard
// names metrics the built plugin.wasm defines, as Prometheus sees them
// through envoy.yaml's stats_tags, and that a misspelt metric, label or a
// counter used raw is caught.
func TestDashboard(t *testing.T) {
	cat := pluginCatalog(t)
	// The catalog run must have reached every metric of plugin/metrics.go.
	for _, want := range []string{
		"fairshare_requests_total", "fairshare_borrowed_total", "fairshare_in_flight", "fairshare_borrowing",
		"fairshare_reserved", "fairshare_usage", "fairshare_rank", "fairshare_level_fairshare", "fairshare_phantoms",
		"fairshare_capacity", "fairshare_cas_retries_total", "fairshare_failures_total", "fairshare_failed_open_total",
		"fairshare_usage_missing_total", "fairshare_unscheduled_total", "fairshare_rejected_no_team_total",
		"fairshare_rejected_bad_class_total", "fairshare_rejected_bad_body_total", "fairshare_rejected_body_too_large_total",
		"fairshare_rejected_status_auth_total", "fairshare_rejected_status_method_total",
		"fairshare_rejected_unknown_team_total", "fairshare_rejected_unavailable_total",
		"fairshare_rejected_unknown_model_total", "fairshare_rejected_no_model_total", "fairshare_rejected_duplicate_header_total",
		"fairshare_rejected_client_priority_total", "fairshare_stripped_priority_total",
		"fairshare_waiting", "fairshare_dispatched_total", "fairshare_queue_timeouts_total", "fairshare_queue_time_ms_bucket",
		"fairshare_rejected_queue_timeout_total",
		"fairshare_first_byte_ms_bucket", "fairshare_upstream_first_byte_ms_bucket", "fairshare_total_time_ms_bucket",
		"fairshare_prompt_tokens_total", "fairshare_cached_tokens_total", "fairshare_completion_tokens_total",
		"fairshare_share", "fairshare_fairness_jain", "fairshare_saturated_teams",
		"fairshare_would_borrow_total", "fairshare_would_hold_total",
		"fairshare_would_refuse_no_team_total", "fairshare_would_refuse_bad_class_total",
		"fairshare_would_refuse_bad_body_total", "fairshare_would_refuse_body_too_large_total",
		"fairshare_would_refuse_unknown_model_total", "fairshare_would_refuse_no_model_total",
		"fairshare_would_refuse_duplicate_header_total", "fairshare_would_refuse_unknown_team_total",
		"fairshare_would_refuse_unavailable_total",
		"fairshare_spilled_total", "fairshare_kv_tokens", "fairshare_capacity_engines", "fairshare_capacity_read_failures_total",
	} {
		if _, ok := cat[want]; !ok {
			names := make([]string, 0, len(cat))
			for n := range cat {
				names = append(names, n)
			}
			sort.Strings(names)
			t.Errorf("the plugin run did not define %s; it defined %v", want, names)
		}
	}

	// The latency histograms and the shadow decisions carry the class as
	// well as the pool and team; spill-over the pool it moved a request to.
	for name, labels := range map[string][]string{
		"fairshare_queue_time_ms_bucket": {"pool", "team", "class"}, "fairshare_first_byte_ms_bucket": {"pool", "team", "class"},
		"fairshare_upstream_first_byte_ms_bucket": {"pool", "team", "class"}, "fairshare_total_time_ms_bucket": {"pool", "team", "class"},
		"fairshare_completion_tokens_total": {"pool", "team", "class"},
		"fairshare_would_borrow_total":      {"pool", "team", "class"}, "fairshare_would_hold_total": {"pool", "team", "class"},
		"fairshare_would_refuse_unknown_team_total": {"pool", "team"}, "fairshare_would_refuse_unavailable_total": {"pool", "team"},
		"fairshare_spilled_total": {"pool", "team", "to_pool"},
		"fairshare_kv_tokens":     {"pool"}, "fairshare_capacity_engines": {"pool"}, "fairshare_capacity_read_failures_total": {"pool"},
	} {
		for _, l := range labels {
			if !cat[name].labels[l] {
				t.Errorf("%s has no %q label (it has %v)", name, l, cat[name].labels)
			}
		}
	}

	data := readFile(t, dashboardPath)
	for _, err := range checkDashboard(data, cat) {
		t.Error(err)
	}
	// The latency panels: per-team percentiles of the plugin's histograms
	// and the service share against the entitlement.
	exprByPanel := map[string][]string{}
	{
		var d struct {
			Panels []struct {
				Title   string
				Targets []struct{ Expr string }
			}
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				exprByPanel[p.Title] = append(exprByPanel[p.Title], tg.Expr)
			}
		}
	}
	for title, want := range map[string][]string{
		"Time to first byte (TTFT)":         {"histogram_quantile(0.5, sum by (le, team, class) (rate(fairshare_first_byte_ms_bucket", "histogram_quantile(0.99, sum by (le, team, class) (rate(fairshare_first_byte_ms_bucket"},
		"First byte after dispatch (vLLM)":  {"histogram_quantile(0.99, sum by (le, team, class) (rate(fairshare_upstream_first_byte_ms_bucket"},
		"End-to-end time":                   {"histogram_quantile(0.99, sum by (le, team, class) (rate(fairshare_total_time_ms_bucket"},
		"Time held at the gateway by class": {"histogram_quantile(0.99, sum by (le, team, class) (rate(fairshare_queue_time_ms_bucket"},
		"Service share against entitlement": {"fairshare_completion_tokens_total", "fairshare_share"},
		"Jain's fairness index":             {"fairshare_fairness_jain", "fairshare_saturated_teams"},
		// Shadow rollout by team, spill-over by pool, fallback and team,
		// capacity_from's capacity with its engines and failures.
		"Shadow mode: would borrow and would hold": {"sum by (team) (rate(fairshare_would_borrow_total", "sum by (team) (rate(fairshare_would_hold_total"},
		"Shadow mode: would refuse":                {"rate(fairshare_would_refuse_no_team_total", "sum by (pool, team) (rate(fairshare_would_refuse_unavailable_total"},
		"Spilled requests":                         {"sum by (pool, to_pool, team) (rate(fairshare_spilled_total"},
		"Capacity from the engines":                {"fairshare_capacity{", "fairshare_capacity_engines{", "rate(fairshare_capacity_read_failures_total"},
		"KV tokens":                                {"fairshare_kv_tokens{"},
	} {
		exprs, ok := exprByPanel[title]
		if !ok {
			t.Errorf("no panel %q", title)
		}
		for _, w := range want {
			if !slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, w) }) {
				t.Errorf("panel %q: no query with %q (queries %q)", title, w, exprs)
			}
		}
	}
	// Every metric the plugin defines is on the dashboard.
	exprs, err := dashboardExprs(data)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		refs, _, _ := parsePromQL(e)
		for _, r := range refs {
			used[r.metric] = true
		}
	}
	for name := range cat {
		if !used[name] {
			t.Errorf("metric %s is not on the dashboard", name)
		}
	}

	for _, c := range []struct{ name, old, new, wantErr string }{
		{"misspelt metric", "fairshare_borrowing{", "fairshare_borrowed{", "fairshare_borrowed is not a metric"},
		{"misspelt metric in a variable", `"query": "label_values(fairshare_capacity, pool)"`, `"query": "label_values(fairshare_capacty, pool)"`, "fairshare_capacty is not a metric"},
		{"label a metric lacks", `fairshare_capacity{pool=~\"$pool\"}`, `fairshare_capacity{team=~\"$pool\"}`, `has no "team" label`},
		{"grouping by an unknown label", "sum by (team) (fairshare_reserved", "sum by (teams) (fairshare_reserved", `groups by "teams"`},
		{"counter without rate", "rate(fairshare_cas_retries_total{pool=~\\\"$pool\\\"}[$__rate_interval])", "fairshare_cas_retries_total{pool=~\\\"$pool\\\"}", "counter fairshare_cas_retries_total used outside"},
	} {
		s := string(data)
		if n := strings.Count(s, c.old); n < 1 {
			t.Errorf("%s: %q not in the dashboard", c.name, c.old)
			continue
		}
		errs := checkDashboard([]byte(strings.Replace(s, c.old, c.new, 1)), cat)
		if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), c.wantErr) }) {
			t.Errorf("%s: checkDashboard = %v, want an error containing %q", c.name, errs, c.wantErr)
		}
	}
}
