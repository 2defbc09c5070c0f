package plugin_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
)

// BenchmarkUserDecisions is BenchmarkCASRetries with the user level: 1 KiB
// chat requests through the local proxy from 16 clients to plugin.wasm on
// 2 VMs sharing one pool record of two teams, each request naming one of
// N distinct users in turn (max_users at its default, 256 entries a team),
// against the same load without user_header (users=off, the baseline of
// the ratio). It reports the record's size at the end of the run
// (record-bytes: what every decision decodes and encodes), the CAS
// retries per decision (per record update: each request makes two, its
// decision and its release) and per request.
func BenchmarkUserDecisions(b *testing.B) {
	ctx := context.Background()
	u := benchUpstream(b)
	const pools = `"pools":[{"name":"p","capacity":1000000,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.5}}}]}`
	body := []byte(chatOfSize(1 << 10))
	const vms, clients = 2, 16
	for _, n := range []int{0, 10, 1000, 10000} {
		name := "users=off"
		cfg := `{"default_max_tokens":16,` + pools
		if n > 0 {
			name = "users=" + strconv.Itoa(n)
			cfg = `{"default_max_tokens":16,"user_header":"x-user",` + pools
		}
		b.Run(name, func(b *testing.B) {
			h, err := compiled(b).Start(ctx, host.Options{VMs: vms, PluginName: pluginName, VMID: "users-" + name,
				PluginConfig: []byte(cfg), BufferLimit: 16 << 20})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(proxy.New(h, u))
			defer func() { srv.Close(); h.Close(ctx) }()
			counter := func() int64 { return h.Metrics()["fairshare.pool.p.cas_retries_total"].Value }
			before := counter()
			var user func(int64) string
			if n > 0 {
				user = func(k int64) string { return fmt.Sprintf("user-%05d", k%int64(n)) }
			}
			casLoad(b, srv.URL, clients, body, user)
			retries := float64(counter() - before)
			rec, _, _ := h.SharedData(pluginName + "/fairshare/pool/p/v" + strconv.Itoa(fairshare.RecordVersion))
			b.ReportMetric(float64(len(rec)), "record-bytes")
			b.ReportMetric(retries/float64(2*b.N), "retries/decision")
			b.ReportMetric(retries/float64(b.N), "retries/request")
		})
	}
}
