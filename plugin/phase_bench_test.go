package plugin_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// phaseFuncs are the guest functions whose inclusive time
// BenchmarkRequestPhases reports, by the short name it reports them under.
// Go's Wasm functions return early to unwind the stack when a goroutine
// switches and are entered again to resume; summing every entry–return
// pair counts the time spent in the function and nothing else.
var phaseFuncs = map[string]string{
	"proxy_on_request_headers":  "cb-req-headers",
	"proxy_on_request_body":     "cb-req-body",
	"proxy_on_response_headers": "cb-resp-headers",
	"proxy_on_response_body":    "cb-resp-body",
	"proxy_on_log":              "cb-log",
	"proxy_on_done":             "cb-done",
	"proxy_on_delete":           "cb-delete",
	"proxy_on_context_create":   "cb-create",
	"malloc":                    "malloc",
	"github.com/fairshare-wasm/fairshare/hostcalls.GetHeaderMapPairsInto":            "headers-pairs",
	"github.com/fairshare-wasm/fairshare/hostcalls.GetHttpRequestBody":               "body-read",
	"github.com/fairshare-wasm/fairshare/plugin.inspect":                             "scan+estimate",
	"github.com/fairshare-wasm/fairshare/plugin.(*records).update":                   "record-update",
	"github.com/fairshare-wasm/fairshare/fairshare.(*Pool).UnmarshalBinary":          "record-decode",
	"github.com/fairshare-wasm/fairshare/fairshare.(*Pool).AppendBinary":             "record-encode",
	"github.com/fairshare-wasm/fairshare/fairshare.(*Pool).Arrive":                   "decision",
	"github.com/fairshare-wasm/fairshare/fairshare.(*Pool).Release":                  "release",
	"github.com/fairshare-wasm/fairshare/plugin.(*request).rewrite":                  "rewrite",
	"github.com/fairshare-wasm/fairshare/hostcalls.ReplaceHttpRequestBody":           "body-write",
	"github.com/fairshare-wasm/fairshare/plugin.(*pluginContext).readResponse":       "resp-read",
	"github.com/fairshare-wasm/fairshare/plugin.jsonUsage":                           "resp-usage",
	"github.com/fairshare-wasm/fairshare/plugin.(*metrics).request":                  "metrics",
	"github.com/fairshare-wasm/fairshare/hostcalls.ReplaceHttpResponseHeader":        "resp-headers-set",
	"github.com/fairshare-wasm/fairshare/plugin.(*httpContext).decide":               "decide",
	"github.com/fairshare-wasm/fairshare/plugin.(*httpContext).finish":               "finish",
	"github.com/fairshare-wasm/fairshare/plugin.(*httpContext).OnHttpRequestHeaders": "on-req-headers",
	"github.com/fairshare-wasm/fairshare/plugin.scanObject":                          "scan",
	"github.com/fairshare-wasm/fairshare/plugin.messagesTokens":                      "estimate-messages",
	"bytes.Index": "bytes.Index",
	"github.com/fairshare-wasm/fairshare/plugin.(*pluginContext).arrive":    "arrive",
	"github.com/fairshare-wasm/fairshare/hostcalls.IncrementMetric":         "metric-increment",
	"github.com/fairshare-wasm/fairshare/hostcalls.GetSharedData":           "shared-get",
	"github.com/fairshare-wasm/fairshare/hostcalls.SetSharedData":           "shared-set",
	"github.com/fairshare-wasm/fairshare/hostcalls.GetHttpRequestHeader":    "header-get",
	"github.com/fairshare-wasm/fairshare/hostcalls.RemoveHttpRequestHeader": "header-remove",
	"github.com/fairshare-wasm/fairshare/plugin.cleanPath":                  "clean-path",
	"runtime.mallocgc":          "mallocgc",
	"runtime.gcStart":           "gc-start",
	"runtime.gcBgMarkWorker":    "gc-mark",
	"runtime.gcMarkTermination": "gc-term",
	"runtime.bgsweep":           "gc-sweep",
	"runtime.memmove":           "memmove",
}

// phaseTimer sums the time spent in the functions of phaseFuncs.
type phaseTimer struct {
	byName map[string]string // phaseFuncs by the name Go's linker gives (mangled)
	total  map[string]time.Duration
	calls  map[string]int
	start  map[string][]time.Time
	sites  map[string]int // allocations (runtime.mallocgc) by first caller outside the runtime
}

type phaseListener struct {
	t    *phaseTimer
	name string
}

func (l phaseListener) Before(_ context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64, si experimental.StackIterator) {
	if l.name == "mallocgc" && l.t.sites != nil {
		// Count the allocation under its first caller outside the runtime.
		for si.Next() {
			name := si.Function().Definition().Name()
			if !strings.HasPrefix(name, "runtime.") && !strings.HasPrefix(name, "internal_") && !strings.HasPrefix(name, "internal/") {
				l.t.sites[name]++
				break
			}
		}
	}
	l.t.start[l.name] = append(l.t.start[l.name], time.Now())
}

func (l phaseListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {
	s := l.t.start[l.name]
	if len(s) == 0 {
		return
	}
	l.t.total[l.name] += time.Since(s[len(s)-1])
	l.t.calls[l.name]++
	l.t.start[l.name] = s[:len(s)-1]
}

func (l phaseListener) Abort(context.Context, api.Module, api.FunctionDefinition, error) {
	s := l.t.start[l.name]
	if len(s) > 0 {
		l.t.start[l.name] = s[:len(s)-1]
	}
}

// NewFunctionListener implements experimental.FunctionListenerFactory.
func (t *phaseTimer) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if short, ok := t.byName[def.Name()]; ok {
		return phaseListener{t, short}
	}
	for _, e := range def.ExportNames() {
		if short, ok := phaseFuncs[e]; ok {
			return phaseListener{t, short}
		}
	}
	return nil
}

// BenchmarkRequestPhases runs BenchmarkRequestPath's scheduled request
// through plugin.wasm compiled with wazero function listeners on the
// functions of phaseFuncs, and reports the time per request inside each
// (inclusive of what it calls, host calls included) and the wall time of
// each host event. The listeners add their own cost (a few hundred ns a
// call): the figures say where the time goes, BenchmarkRequestPath says
// how much there is.
func BenchmarkRequestPhases(b *testing.B) {
	ctx := context.Background()
	pt := &phaseTimer{byName: map[string]string{}, total: map[string]time.Duration{}, calls: map[string]int{}, start: map[string][]time.Time{}}
	for k, v := range phaseFuncs {
		// The Wasm name section spells path separators, '-', '(', '*'
		// and ')' as '_'.
		pt.byName[strings.Map(func(r rune) rune {
			if r == '/' || r == '-' || r == '(' || r == ')' || r == '*' {
				return '_'
			}
			return r
		}, k)] = v
	}
	m, err := host.Compile(experimental.WithFunctionListenerFactory(ctx, pt), wasmbuild.Plugin(b))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(ctx)
	resp := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10,"prompt_tokens_details":null}}`)
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		body := []byte(chatOfSize(size.n))
		b.Run(size.name, func(b *testing.B) {
			h, err := m.Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: "phases-" + size.name,
				PluginConfig: []byte(testConfig), Clock: host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), BufferLimit: 16 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close(ctx)
			hdrs, rh := chatHeaders(body, resp)
			clear(pt.total)
			clear(pt.calls)
			pt.sites = map[string]int{}
			ev := map[string]time.Duration{}
			for b.Loop() {
				t0 := time.Now()
				s := h.NewStream(0)
				s.RequestHeaders(hdrs, false)
				t1 := time.Now()
				for i := 0; i < len(body); i += 32 << 10 {
					j := min(i+32<<10, len(body))
					if j == len(body) {
						t1 = time.Now()
					}
					s.RequestBody(body[i:j], j == len(body))
				}
				t2 := time.Now()
				s.ResponseHeaders(rh, false)
				s.ResponseBody(resp, true)
				t3 := time.Now()
				s.Complete()
				t4 := time.Now()
				ev["ev-headers"] += t1.Sub(t0)
				ev["ev-last-body"] += t2.Sub(t1)
				ev["ev-response"] += t3.Sub(t2)
				ev["ev-complete"] += t4.Sub(t3)
			}
			n := float64(b.N)
			names := make([]string, 0, len(pt.total))
			for k := range pt.total {
				names = append(names, k)
			}
			sort.Strings(names)
			var sb strings.Builder
			for _, k := range names {
				b.ReportMetric(float64(pt.total[k].Nanoseconds())/n, "ns/"+k)
				fmt.Fprintf(&sb, "%s=%.1f ", k, float64(pt.calls[k])/n)
			}
			for k, d := range ev {
				b.ReportMetric(float64(d.Nanoseconds())/n, "ns/"+k)
			}
			b.Logf("calls per request: %s", sb.String())
			sb.Reset()
			sites := make([]string, 0, len(pt.sites))
			for k := range pt.sites {
				sites = append(sites, k)
			}
			sort.Slice(sites, func(i, j int) bool { return pt.sites[sites[i]] > pt.sites[sites[j]] })
			for _, k := range sites {
				fmt.Fprintf(&sb, "\n\t%.2f %s", float64(pt.sites[k])/n, k)
			}
			b.Logf("allocations per request, by caller:%s", sb.String())
		})
	}
}
