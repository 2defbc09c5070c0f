package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// BenchmarkHandler: one full request through the proxy with the
// pass-through module, against the same request sent directly to the
// upstream in the same run (ratio = proxy/direct).
func BenchmarkHandler(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	h := start(b, passthroughPkg, host.Options{VMs: 2})
	px := proxyFor(b, h, up.URL)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	run := func(b *testing.B, url string) {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			resp, err := http.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, up.URL+"/v1/chat/completions") })
	b.Run("proxy", func(b *testing.B) { run(b, px.URL+"/v1/chat/completions") })
}

// BenchmarkHandlerHold: one POST with a 1 KiB and a 64 KiB body through
// the local proxy (real clock, loopback upstream that reads the body and
// answers 11 bytes), in the same run: "direct" to the upstream;
// "passthrough", the minimal module; "held", holdguest holding each
// request and dispatching it from its next 1 ms tick. x-direct is ns/op
// over the direct request's; a held request waits for the tick, half a
// period on average.
func BenchmarkHandlerHold(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	for _, size := range []int{1 << 10, 64 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		var base float64
		run := func(b *testing.B, url string) {
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, err := http.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if base == 0 {
				base = ns
			} else {
				b.ReportMetric(ns/base, "x-direct")
			}
		}
		name := strconv.Itoa(size>>10) + "KiB"
		b.Run(name+"/direct", func(b *testing.B) {
			base = 0
			run(b, up.URL+"/v1/chat/completions")
		})
		b.Run(name+"/passthrough", func(b *testing.B) {
			px := proxyFor(b, start(b, passthroughPkg, host.Options{}), up.URL)
			run(b, px.URL+"/v1/chat/completions")
		})
		b.Run(name+"/held", func(b *testing.B) {
			px := proxyFor(b, start(b, holdGuestPkg, host.Options{PluginConfig: []byte("hold")}), up.URL)
			run(b, px.URL+"/v1/chat/completions")
		})
	}
}
