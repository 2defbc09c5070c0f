package plugin_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// TestCallFloorMakesThePluginsHostCalls: the call floor
// (plugin/internal/callfloor), which the benchmarks put under the plugin
// as the cost of its host calls alone, makes the host calls plugin.wasm
// makes for a scheduled request admitted at once, in the same order
// (callback by callback, WASI clock reads included), for a short body and
// for one the plugin writes back in pieces. If the plugin's calls change,
// the floor must change with them.
func TestCallFloorMakesThePluginsHostCalls(t *testing.T) {
	ctx := context.Background()
	floor := compiledFilter(t, "callfloor")
	const cfg = `{"default_max_tokens":16,"pools":[{"name":"p","capacity":1000000,"models":["m"],"teams":{"a":{"share":1}}}]}`
	resp := shortCompletion
	calls := func(m *host.Module, body []byte) []string {
		h, err := m.Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: "calls", PluginConfig: []byte(cfg),
			BufferLimit: 16 << 20, Transcript: true, TranscriptWASI: true})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close(ctx)
		hdrs, rh := chatHeaders(body, resp)
		var got []string
		for i := range 2 { // the second request: the record exists
			h.ResetTranscript(0)
			if s := exchange(h, 0, hdrs, body, rh, resp); s.LocalReply() != nil {
				t.Fatalf("local reply %+v", s.LocalReply())
			}
			if i == 0 {
				continue
			}
			for _, l := range h.Transcript(0) {
				for _, p := range []string{"--> ", "==> "} {
					if name, ok := strings.CutPrefix(l, p); ok {
						name, _, _ = strings.Cut(name, "(")
						got = append(got, p+name)
					}
				}
			}
		}
		return got
	}
	for _, n := range []int{1 << 10, 64 << 10} {
		body := []byte(chatOfSize(n))
		want, got := calls(compiled(t), body), calls(floor, body)
		if len(want) < 20 {
			t.Fatalf("%d-byte body: the plugin's transcript has %d entries: %q", n, len(want), want)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d-byte body: the call floor's calls differ from the plugin's:\nfloor  %q\nplugin %q", n, got, want)
		}
	}
}
