package plugin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
)

// BenchmarkRequestPath measures one scheduled request through the built
// module in the wazero host (request headers, the body in 32 KiB chunks,
// response headers, a JSON response with usage, end of stream) for chat
// bodies of 1 KiB, 64 KiB and 1 MiB in short messages, and of 64 KiB and
// 1 MiB in one message, and the same events through a pass-through
// filter (plugin/internal/passthrough), through a filter that copies
// the body into the module and back once (plugin/internal/copybody, the
// floor for a filter that edits bodies) and through a filter that makes
// the plugin's host calls and nothing else (plugin/internal/callfloor, the
// floor of the plugin's design under this ABI and host) in the same run:
// the plugin's cost is its ratio to each.
func BenchmarkRequestPath(b *testing.B) {
	ctx := context.Background()
	mods := map[string]*host.Module{"fairshare": compiled(b), "passthrough": compiledFilter(b, "passthrough"),
		"copybody": compiledFilter(b, "copybody"), "callfloor": compiledFilter(b, "callfloor")}
	resp := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10,"prompt_tokens_details":null}}`)
	for _, size := range []struct {
		name string
		body string
	}{{"1KiB", chatOfSize(1 << 10)}, {"64KiB", chatOfSize(64 << 10)}, {"1MiB", chatOfSize(1 << 20)},
		{"64KiB-one-message", longChatOfSize(64 << 10)}, {"1MiB-one-message", longChatOfSize(1 << 20)}} {
		body := []byte(size.body)
		for _, name := range []string{"passthrough", "copybody", "callfloor", "fairshare"} {
			b.Run(name+"/"+size.name, func(b *testing.B) {
				h, err := mods[name].Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: fmt.Sprintf("bench-%s-%s", name, size.name),
					PluginConfig: []byte(testConfig), Clock: host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), BufferLimit: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close(ctx)
				hdrs, rh := chatHeaders(body, resp)
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if s := exchange(h, 0, hdrs, body, rh, resp); s.LocalReply() != nil {
						b.Fatalf("local reply %+v", s.LocalReply())
					}
				}
			})
		}
	}
}

// chatOfSize returns a chat request body of about n bytes for model m.
func chatOfSize(n int) string {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","max_tokens":64,"messages":[`)
	msg := `{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 8) + `"}`
	for i := 0; sb.Len() < n-len(msg)-4; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(msg)
	}
	sb.WriteString(`]}`)
	return sb.String()
}

// longChatOfSize returns a chat request body of about n bytes whose one
// user message holds it all (a retrieval-augmented prompt).
func longChatOfSize(n int) string {
	head, tail := `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"`, `"}]}`
	words := strings.Repeat("lorem ipsum dolor sit amet ", (n-len(head)-len(tail))/27)
	return head + words + tail
}

// BenchmarkFlowRequestPath measures, through the built module in the
// wazero host, one request admitted at once ("admitted": the pool has
// room) and one held at the gateway and dispatched when the request before
// it finishes ("held": the previous request's release dispatches it, on
// the same VM), with 1 KiB and 64 KiB bodies, against the same events
// through the pass-through filter, interleaved request by request so that
// the three share the machine's load. It reports ns per request of each
// and the ratios to the pass-through (x-admitted, x-held).
func BenchmarkFlowRequestPath(b *testing.B) {
	ctx := context.Background()
	pt := compiledFilter(b, "passthrough")
	resp := shortCompletion
	_, rh := chatHeaders(nil, resp)
	// Capacity 1, team a owns it: a's first request runs within share,
	// every later one borrows and finds the pool full.
	const heldCfg = `{"max_queue_time":"60s","dispatch_tick":"20ms","default_max_tokens":16,"half_life":"0s",
	  "pools":[{"name":"p","capacity":1,"models":["m"],"teams":{"a":{"share":1}}}]}`
	const roomCfg = `{"max_queue_time":"60s","dispatch_tick":"20ms","default_max_tokens":16,"half_life":"0s",
	  "pools":[{"name":"p","capacity":1000000,"models":["m"],"teams":{"a":{"share":1}}}]}`
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}} {
		body := []byte(chatOfSize(size.n))
		b.Run(size.name, func(b *testing.B) {
			clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
			startH := func(m *host.Module, id, cfg string) *host.Host {
				h, err := m.Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: id + "-" + size.name, PluginConfig: []byte(cfg),
					Clock: clock, BufferLimit: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { h.Close(ctx) })
				return h
			}
			hp, ha, hh := startH(pt, "flow-pt", roomCfg), startH(compiled(b), "flow-admit", roomCfg), startH(compiled(b), "flow-held", heldCfg)
			hdrs, _ := chatHeaders(body, nil)
			send := func(h *host.Host) *host.Stream {
				s := h.NewStream(0)
				s.RequestHeaders(hdrs, false)
				for i := 0; i < len(body); i += 32 << 10 {
					j := min(i+32<<10, len(body))
					s.RequestBody(body[i:j], j == len(body))
				}
				return s
			}
			finish := func(s *host.Stream) {
				s.ResponseHeaders(rh, false)
				s.ResponseBody(resp, true)
				s.Complete()
			}
			blocker := send(hh) // within share: the pool is full from now on
			var tp, ta, th time.Duration
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				t0 := time.Now()
				finish(send(hp))
				t1 := time.Now()
				finish(send(ha))
				t2 := time.Now()
				s := send(hh)   // held
				finish(blocker) // its release dispatches s
				t3 := time.Now()
				if len(s.ForwardedRequestBody()) == 0 {
					b.Fatal("the held request was not dispatched by the release")
				}
				blocker = s
				tp, ta, th = tp+t1.Sub(t0), ta+t2.Sub(t1), th+t3.Sub(t2)
			}
			n := float64(b.N)
			b.ReportMetric(float64(tp.Nanoseconds())/n, "ns/passthrough")
			b.ReportMetric(float64(ta.Nanoseconds())/n, "ns/admitted")
			b.ReportMetric(float64(th.Nanoseconds())/n, "ns/held")
			b.ReportMetric(float64(ta)/float64(tp), "x-admitted")
			b.ReportMetric(float64(th)/float64(tp), "x-held")
		})
	}
}

// BenchmarkProxiedRequest measures one proxied request end to end through
// the local proxy (the wazero host's Handler, real HTTP on loopback, an
// upstream that answers at once), plugin.wasm against the pass-through
// module, interleaved request by request, with 1 KiB, 64 KiB and 1 MiB
// bodies, and the call floor (plugin/internal/callfloor: the plugin's host
// calls and nothing else) in the same turns.
// It reports the median latency of each and the ratios to the
// pass-through (x-p50: the plugin; x-p50-callfloor: the call floor).
func BenchmarkProxiedRequest(b *testing.B) {
	ctx := context.Background()
	u := benchUpstream(b)
	pt := compiledFilter(b, "passthrough")
	const cfg = `{"default_max_tokens":16,"pools":[{"name":"p","capacity":1000000,"models":["m"],"teams":{"a":{"share":1}}}]}`
	serve := func(m *host.Module, id string) *httptest.Server {
		h, err := m.Start(ctx, host.Options{VMs: 2, PluginName: pluginName, VMID: id, PluginConfig: []byte(cfg), BufferLimit: 16 << 20})
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(proxy.New(h, u))
		b.Cleanup(func() { srv.Close(); h.Close(ctx) })
		return srv
	}
	cf := compiledFilter(b, "callfloor")
	sp, sf, sc := serve(pt, "proxied-pt"), serve(compiled(b), "proxied-plugin"), serve(cf, "proxied-callfloor")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		body := []byte(chatOfSize(size.n))
		b.Run(size.name, func(b *testing.B) {
			post := func(base string) time.Duration { return postChat(b, client, base, "a", body) }
			var lp, lf, lc []time.Duration
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				lp = append(lp, post(sp.URL))
				lf = append(lf, post(sf.URL))
				lc = append(lc, post(sc.URL))
			}
			mp, mf, mc := median(lp), median(lf), median(lc)
			b.ReportMetric(float64(mp.Nanoseconds()), "ns-p50/passthrough")
			b.ReportMetric(float64(mf.Nanoseconds()), "ns-p50/plugin")
			b.ReportMetric(float64(mc.Nanoseconds()), "ns-p50/callfloor")
			b.ReportMetric(float64(mf)/float64(mp), "x-p50")
			b.ReportMetric(float64(mc)/float64(mp), "x-p50-callfloor")
		})
	}
}

// median returns the median of d (sorted in place).
// shortCompletion is the small chat completion with usage that the
// benchmarks' upstreams and in-host responses answer with.
var shortCompletion = []byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10}}`)

// chatHeaders returns the request headers of a chat completions request
// of team a with body, and the headers of a 200 JSON response resp.
func chatHeaders(body, resp []byte) (req, rh [][2]string) {
	req = [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"content-type", "application/json"},
		{"content-length", fmt.Sprint(len(body))}, {"x-team", "a"}}
	rh = [][2]string{{":status", "200"}, {"content-type", "application/json"}, {"content-length", fmt.Sprint(len(resp))}}
	return req, rh
}

// exchange runs one request through a new stream on VM vm of h: its
// headers, its body in 32 KiB chunks, the response headers and the whole
// response, then the stream's end. It returns the stream.
func exchange(h *host.Host, vm int, hdrs [][2]string, body []byte, rh [][2]string, resp []byte) *host.Stream {
	s := h.NewStream(vm)
	s.RequestHeaders(hdrs, false)
	for i := 0; i < len(body) || i == 0; i += 32 << 10 {
		j := min(i+32<<10, len(body))
		s.RequestBody(body[i:j], j == len(body))
	}
	s.ResponseHeaders(rh, false)
	s.ResponseBody(resp, true)
	s.Complete()
	return s
}

// benchUpstream starts a loopback upstream for the proxied benchmarks: it
// reads the request and answers at once with a small chat completion
// carrying usage. It is closed when b ends.
func benchUpstream(b *testing.B) *url.URL {
	resp := shortCompletion
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write(resp)
	}))
	b.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	return u
}

// postChat posts body as team to base's chat completions path through
// client, reads the whole answer, fails b unless it is a 200, and returns
// the time from sending to the end of the answer.
func postChat(b *testing.B, client *http.Client, base, team string, body []byte) time.Duration {
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-team", team)
	t0 := time.Now()
	r, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if r.StatusCode != 200 {
		b.Fatalf("status %d", r.StatusCode)
	}
	return time.Since(t0)
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkCallbackPlacement runs a 1 KiB request's events (headers, body,
// response, completion) through plugin.wasm and the pass-through filter in
// the wazero host, each event timed where it runs, from three places: all
// on the benchmark's goroutine (as BenchmarkRequestPath does), each handed
// to one other goroutine, and each on a goroutine of its own (as the
// Handler's HTTP server runs them: a stream's callbacks come from the
// connection's goroutine and the body pump's). ns-in-events/req is the
// time inside the events only, hand-offs excluded: what the same work
// costs when it runs on whichever core the Go scheduler picked, with
// that core's caches cold for the module (the proxied benchmarks pay
// this; Envoy runs a VM's callbacks on its worker's thread).
func BenchmarkCallbackPlacement(b *testing.B) {
	ctx := context.Background()
	pt := compiledFilter(b, "passthrough")
	body := []byte(chatOfSize(1 << 10))
	resp := shortCompletion
	hdrs, rh := chatHeaders(body, resp)
	for _, name := range []string{"passthrough", "plugin"} {
		m := pt
		if name == "plugin" {
			m = compiled(b)
		}
		for _, place := range []string{"same-goroutine", "other-goroutine", "new-goroutines"} {
			b.Run(name+"/"+place, func(b *testing.B) {
				h, err := m.Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: "placement-" + name + "-" + place,
					PluginConfig: []byte(testConfig), BufferLimit: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close(ctx)
				var in time.Duration
				timed := func(f func()) {
					t0 := time.Now()
					f()
					in += time.Since(t0)
				}
				run := timed
				switch place {
				case "other-goroutine":
					work, done := make(chan func()), make(chan struct{})
					go func() {
						for f := range work {
							timed(f)
							done <- struct{}{}
						}
					}()
					defer close(work)
					run = func(f func()) { work <- f; <-done }
				case "new-goroutines":
					run = func(f func()) {
						done := make(chan struct{})
						go func() { timed(f); close(done) }()
						<-done
					}
				}
				for b.Loop() {
					s := h.NewStream(0)
					run(func() { s.RequestHeaders(hdrs, false) })
					run(func() { s.RequestBody(body, true) })
					run(func() { s.ResponseHeaders(rh, false) })
					run(func() { s.ResponseBody(resp, true) })
					run(func() { s.Complete() })
					if s.LocalReply() != nil {
						b.Fatalf("local reply %+v", s.LocalReply())
					}
				}
				b.ReportMetric(float64(in.Nanoseconds())/float64(b.N), "ns-in-events/req")
			})
		}
	}
}
