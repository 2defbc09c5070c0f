package plugin_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// hold_headers "on" through plugin.wasm: a scheduled request's
// headers are stopped in on_request_headers, so under Envoy's
// allow_on_headers_stop_iteration nothing of a held request exists
// upstream until its dispatch, and the decision goes into the request
// headers too; under the default conversion the probe continues it.

const holdHeadersConfig = `{"max_queue_time":"10s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,"half_life":"0s",
 "hold_headers":"on","hold_headers_probe":"100ms",
 "pools":[{"name":"p","capacity":2,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.5}}}]}`

// startHost is start with host options (allow_on_headers_stop_iteration).
func startHost(t testing.TB, cfg string, vms int, allow bool) *host.Host {
	t.Helper()
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	h, err := compiled(t).Start(context.Background(), host.Options{
		VMs: vms, PluginName: pluginName, VMID: fmt.Sprintf("%s-%p", t.Name(), t), PluginConfig: []byte(cfg), Clock: clock, Seed: 7,
		AllowOnHeadersStopIteration: allow,
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// decisionHeaders returns the x-fairshare-* request headers sent upstream
// and checks that content-length is gone.
func decisionHeaders(t *testing.T, s *host.Stream) []string {
	t.Helper()
	var out []string
	for _, kv := range s.RequestHeaderMap() {
		if kv[0] == "content-length" {
			t.Errorf("content-length %q sent upstream with a rewritten body", kv[1])
		}
		if strings.HasPrefix(kv[0], "x-fairshare-") {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	return out
}

func criticals(h *host.Host) []string {
	var out []string
	for _, e := range h.Logs() {
		if e.Level == hostcalls.LogLevelCritical {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestWasmHoldHeadersNothingUpstreamUntilDispatch: with hold_headers on
// and Envoy's allow_on_headers_stop_iteration, a granted request's headers
// and body go together and carry the decision; a held borrower has
// nothing upstream, not even its headers, until its dispatch, which sends
// headers (with the priority decided then) and body at once.
func TestWasmHoldHeadersNothingUpstreamUntilDispatch(t *testing.T) {
	h := startHost(t, holdHeadersConfig, 1, true)
	a1 := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}, {"x-fairshare-priority", "-9"}}, chat("m", 4, ""))
	a2 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	p1, p2 := priority(t, a1), priority(t, a2)
	equal(t, "a1 headers", decisionHeaders(t, a1), []string{"x-fairshare-team=a", "x-fairshare-pool=p", "x-fairshare-priority=" + strconv.Itoa(p1)})
	equal(t, "a2 headers", decisionHeaders(t, a2), []string{"x-fairshare-team=a", "x-fairshare-pool=p", "x-fairshare-priority=" + strconv.Itoa(p2)})
	a3 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	if !held(a3) || waiting(t, h, "p") != 1 {
		t.Fatalf("a3 not held (forwarded %q, reply %+v)", a3.ForwardedRequestBody(), a3.LocalReply())
	}
	equal(t, "a3 upstream while held", a3.RequestHeaderMap(), [][2]string(nil))
	h.Advance(time.Second) // the probe does not touch a stream that had its body callback
	equal(t, "a3 upstream after a second", a3.RequestHeaderMap(), [][2]string(nil))
	respondJSON(a2, 3, 2)
	if held(a3) {
		t.Fatal("a3 still held after a release")
	}
	p3 := priority(t, a3)
	if p3 < fairshare.BorrowBase {
		t.Errorf("a3 priority %d, want a borrowing one", p3)
	}
	equal(t, "a3 headers at dispatch", decisionHeaders(t, a3), []string{"x-fairshare-team=a", "x-fairshare-pool=p", "x-fairshare-priority=" + strconv.Itoa(p3)})
	equal(t, "a3 request done", a3.RequestDone(), true)
	equal(t, "no critical", criticals(h), []string(nil))
	respondJSON(a1, 3, 2)
	respondJSON(a3, 3, 2)
	checkIdle(t, h, "p")
}

// TestWasmHoldHeadersProbeUnderConversion: hold_headers on under a host
// that converts the headers' stop (no allow_on_headers_stop_iteration):
// no body callback comes, so after hold_headers_probe the tick continues
// the request, which is then decided as with hold_headers off (priority in
// the body, no request headers); the setting to fix is logged once at
// critical level, however many requests it continues.
func TestWasmHoldHeadersProbeUnderConversion(t *testing.T) {
	h := startHost(t, holdHeadersConfig, 1, false)
	a1 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	a2 := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, ""))
	for _, s := range []*host.Stream{a1, a2} {
		if s.RequestHeaderMap() != nil || len(s.ForwardedRequestBody()) != 0 {
			t.Fatal("a request stopped at its headers went upstream before the probe")
		}
	}
	h.Advance(60 * time.Millisecond)
	equal(t, "before the probe", a1.RequestHeaderMap(), [][2]string(nil))
	h.Advance(60 * time.Millisecond)
	for i, s := range []*host.Stream{a1, a2} {
		if p := priority(t, s); p != 0 && p < fairshare.BorrowBase {
			t.Errorf("request %d priority %d", i, p)
		}
		equal(t, "decision headers (released before the decision)", decisionHeaders(t, s), []string(nil))
	}
	c := criticals(h)
	if len(c) != 1 || !strings.Contains(c[0], "allow_on_headers_stop_iteration") {
		t.Fatalf("critical lines %q, want one naming allow_on_headers_stop_iteration", c)
	}
	respondJSON(a1, 3, 2)
	respondJSON(a2, 3, 2)
	checkIdle(t, h, "p")
}

// TestWasmHoldHeadersStreamIdleWarning: a max_queue_time not below
// Envoy's default stream_idle_timeout is warned of at configure time
// (config_test.go has the parser's refusals).
func TestWasmHoldHeadersStreamIdleWarning(t *testing.T) {
	for _, c := range []struct {
		mqt  string
		want int
	}{{"6m", 1}, {"10s", 0}} {
		h := startHost(t, strings.Replace(holdHeadersConfig, `"10s"`, strconv.Quote(c.mqt), 1), 1, true)
		n := 0
		for _, e := range h.Logs() {
			if e.Level == hostcalls.LogLevelWarn && strings.Contains(e.Message, "stream_idle_timeout") && e.VM == 0 {
				n++
			}
		}
		if n != c.want {
			t.Errorf("max_queue_time %s: %d warnings naming stream_idle_timeout, want %d", c.mqt, n, c.want)
		}
	}
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s =\n\t%#v\nwant\n\t%#v", what, got, want)
	}
}
