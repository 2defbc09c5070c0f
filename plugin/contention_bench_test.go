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
)

// BenchmarkCASRetries sends 1 KiB chat requests through the local proxy
// (the wazero host's Handler, a loopback upstream that answers at once)
// from concurrent clients to plugin.wasm on several VMs that share one
// pool record, and reports the compare-and-swap retries per request and
// per record update (each request makes two: its decision and its
// release), read from the pool's cas_retries_total counter.
func BenchmarkCASRetries(b *testing.B) {
	ctx := context.Background()
	u := benchUpstream(b)
	const cfg = `{"default_max_tokens":16,"pools":[{"name":"p","capacity":1000000,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.5}}}]}`
	body := []byte(chatOfSize(1 << 10))
	for _, c := range []struct{ vms, clients int }{{2, 16}, {8, 32}} {
		b.Run(fmt.Sprintf("vms=%d/clients=%d", c.vms, c.clients), func(b *testing.B) {
			h, err := compiled(b).Start(ctx, host.Options{VMs: c.vms, PluginName: pluginName, VMID: fmt.Sprintf("cas-%d", c.vms),
				PluginConfig: []byte(cfg), BufferLimit: 16 << 20})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(h.Handler(u))
			defer func() { srv.Close(); h.Close(ctx) }()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.clients}}
			counter := func() int64 { return h.Metrics()["fairshare.pool.p.cas_retries_total"].Value }
			before := counter()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for i := 0; i < c.clients; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", bytes.NewReader(body))
						req.Header.Set("content-type", "application/json")
						req.Header.Set("x-team", string(rune('a'+i%2)))
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
			retries := float64(counter() - before)
			b.ReportMetric(retries/float64(b.N), "retries/request")
			b.ReportMetric(retries/float64(2*b.N), "retries/update")
		})
	}
}
