package plugin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
)

// BenchmarkCASRetries sends 1 KiB chat requests through the local proxy
// (the wazero host's Handler, a loopback upstream that answers at once)
// from concurrent clients to plugin.wasm on several VMs that share one
// pool record, and reports the compare-and-swap retries per request and
// per record update (each request makes two: its decision and its
// release), read from the pool's cas_retries_total counter. The same load
// through the call floor (plugin/internal/callfloor: the plugin's host
// calls, its record read and written back with nothing between) gives the
// retries of an update whose window is the host calls alone.
func BenchmarkCASRetries(b *testing.B) {
	ctx := context.Background()
	u := benchUpstream(b)
	const cfg = `{"default_max_tokens":16,"pools":[{"name":"p","capacity":1000000,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.5}}}]}`
	body := []byte(chatOfSize(1 << 10))
	floor := compiledFilter(b, "callfloor")
	for _, c := range []struct {
		module       string
		vms, clients int
	}{{"plugin", 2, 16}, {"plugin", 8, 32}, {"callfloor", 2, 16}, {"callfloor", 8, 32}} {
		b.Run(fmt.Sprintf("%s/vms=%d/clients=%d", c.module, c.vms, c.clients), func(b *testing.B) {
			m, metric := compiled(b), "fairshare.pool.p.cas_retries_total"
			if c.module == "callfloor" {
				m, metric = floor, "callfloor_cas_retries_total"
			}
			h, err := m.Start(ctx, host.Options{VMs: c.vms, PluginName: pluginName, VMID: fmt.Sprintf("cas-%s-%d", c.module, c.vms),
				PluginConfig: []byte(cfg), BufferLimit: 16 << 20})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(proxy.New(h, u))
			defer func() { srv.Close(); h.Close(ctx) }()
			counter := func() int64 { return h.Metrics()[metric].Value }
			before := counter()
			casLoad(b, srv.URL, c.clients, body, nil)
			retries := float64(counter() - before)
			b.ReportMetric(retries/float64(b.N), "retries/request")
			b.ReportMetric(retries/float64(2*b.N), "retries/update")
		})
	}
}

// casLoad sends b.N copies of the chat request body to the proxy at url
// from clients concurrent clients, client i as team a or b by its
// parity and, when user is set, request k (1 to b.N) as user(k) in
// x-user; the benchmark's timer runs for the load alone. A request that
// fails or answers other than 200 fails the benchmark.
func casLoad(b *testing.B, url string, clients int, body []byte, user func(k int64) string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for k := next.Add(1); k <= int64(b.N); k = next.Add(1) {
				req, _ := http.NewRequest("POST", url+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("x-team", string(rune('a'+i%2)))
				if user != nil {
					req.Header.Set("x-user", user(k))
				}
				r, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != 200 {
					b.Errorf("status %d", r.StatusCode)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	b.StopTimer()
}
