package plugin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// BenchmarkBeforeAfter compares two builds of the plugin on this shared,
// noisy machine: the module named by FAIRSHARE_WASM_BEFORE ("before") and
// plugin.wasm ("after"), with the pass-through and copybody filters, one
// request of each in turn, so that the four see the same load. "path"
// runs BenchmarkRequestPath's events in the wazero host (ns per request of
// each, and each plugin's ratio to copybody and to the pass-through);
// "proxied" runs BenchmarkProxiedRequest's requests through the Handler
// (median latency of each, and each plugin's ratio to the pass-through).
// Without FAIRSHARE_WASM_BEFORE there is nothing to compare: it is skipped.
func BenchmarkBeforeAfter(b *testing.B) {
	path := os.Getenv("FAIRSHARE_WASM_BEFORE")
	if path == "" {
		b.Skip("FAIRSHARE_WASM_BEFORE names no module to compare plugin.wasm with")
	}
	ctx := context.Background()
	bin, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	before, err := host.Compile(ctx, bin)
	if err != nil {
		b.Fatal(err)
	}
	defer before.Close(ctx)
	mods := map[string]*host.Module{"before": before, "after": compiled(b)}
	for name, pkg := range map[string]string{"passthrough": "./plugin/internal/passthrough", "copybody": "./plugin/internal/copybody"} {
		m, err := host.Compile(ctx, wasmbuild.Module(b, pkg))
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(ctx)
		mods[name] = m
	}
	names := []string{"passthrough", "copybody", "before", "after"}
	resp := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10,"prompt_tokens_details":null}}`)
	sizes := []struct {
		name string
		body string
	}{{"1KiB", chatOfSize(1 << 10)}, {"64KiB", chatOfSize(64 << 10)}, {"1MiB", chatOfSize(1 << 20)},
		{"64KiB-one-message", longChatOfSize(64 << 10)}, {"1MiB-one-message", longChatOfSize(1 << 20)}}
	for _, size := range sizes {
		body := []byte(size.body)
		b.Run("path/"+size.name, func(b *testing.B) {
			hs := map[string]*host.Host{}
			for _, name := range names {
				h, err := mods[name].Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: fmt.Sprintf("ba-%s-%s", name, size.name),
					PluginConfig: []byte(testConfig), Clock: host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), BufferLimit: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close(ctx)
				hs[name] = h
			}
			hdrs, rh := chatHeaders(body, resp)
			total := map[string]time.Duration{}
			for b.Loop() {
				for _, name := range names {
					t0 := time.Now()
					s := exchange(hs[name], 0, hdrs, body, rh, resp)
					total[name] += time.Since(t0)
					if s.LocalReply() != nil {
						b.Fatalf("%s: local reply %+v", name, s.LocalReply())
					}
				}
			}
			for _, name := range names {
				b.ReportMetric(float64(total[name].Nanoseconds())/float64(b.N), "ns/"+name)
			}
			for _, name := range names[2:] {
				b.ReportMetric(float64(total[name])/float64(total["copybody"]), "x-copybody/"+name)
				b.ReportMetric(float64(total[name])/float64(total["passthrough"]), "x-passthrough/"+name)
			}
		})
	}

	u := benchUpstream(b)
	const cfg = `{"default_max_tokens":16,"pools":[{"name":"p","capacity":1000000,"models":["m"],"teams":{"a":{"share":1}}}]}`
	proxied := []string{"passthrough", "before", "after"}
	srv := map[string]*httptest.Server{}
	for _, name := range proxied {
		h, err := mods[name].Start(ctx, host.Options{VMs: 2, PluginName: pluginName, VMID: "ba-proxied-" + name, PluginConfig: []byte(cfg), BufferLimit: 16 << 20})
		if err != nil {
			b.Fatal(err)
		}
		s := httptest.NewServer(proxy.New(h, u))
		defer func() { s.Close(); h.Close(ctx) }()
		srv[name] = s
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, size := range sizes[:3] {
		body := []byte(size.body)
		b.Run("proxied/"+size.name, func(b *testing.B) {
			post := func(base string) time.Duration { return postChat(b, client, base, "a", body) }
			lat := map[string][]time.Duration{}
			for b.Loop() {
				for _, name := range proxied {
					lat[name] = append(lat[name], post(srv[name].URL))
				}
			}
			p50 := map[string]time.Duration{}
			for _, name := range proxied {
				p50[name] = median(lat[name])
				b.ReportMetric(float64(p50[name].Nanoseconds()), "ns-p50/"+name)
			}
			for _, name := range proxied[1:] {
				b.ReportMetric(float64(p50[name])/float64(p50["passthrough"]), "x-p50/"+name)
			}
		})
	}
}
