package plugin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// BenchmarkRequestPath measures one scheduled request through the built
// module in the wazero host (request headers, the body in 32 KiB chunks,
// response headers, a JSON response with usage, end of stream) for 1 KiB,
// 64 KiB and 1 MiB bodies, and the same events through a pass-through
// filter (plugin/internal/passthrough) in the same run: the plugin's cost
// is the ratio of the two.
func BenchmarkRequestPath(b *testing.B) {
	ctx := context.Background()
	mods := map[string]*host.Module{"fairshare": compiled(b)}
	pt, err := host.Compile(ctx, wasmbuild.Module(b, "./plugin/internal/passthrough"))
	if err != nil {
		b.Fatal(err)
	}
	defer pt.Close(ctx)
	mods["passthrough"] = pt
	resp := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10,"prompt_tokens_details":null}}`)
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		body := []byte(chatOfSize(size.n))
		for _, name := range []string{"passthrough", "fairshare"} {
			b.Run(name+"/"+size.name, func(b *testing.B) {
				h, err := mods[name].Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: fmt.Sprintf("bench-%s-%s", name, size.name),
					PluginConfig: []byte(testConfig), Clock: host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), BufferLimit: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close(ctx)
				hdrs := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"content-type", "application/json"},
					{"content-length", fmt.Sprint(len(body))}, {"x-team", "a"}}
				rh := [][2]string{{":status", "200"}, {"content-type", "application/json"}, {"content-length", fmt.Sprint(len(resp))}}
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					s := h.NewStream(0)
					s.RequestHeaders(hdrs, false)
					for i := 0; i < len(body); i += 32 << 10 {
						j := min(i+32<<10, len(body))
						s.RequestBody(body[i:j], j == len(body))
					}
					s.ResponseHeaders(rh, false)
					s.ResponseBody(resp, true)
					s.Complete()
					if s.LocalReply() != nil {
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
