package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// The tests below keep plugin.wasm away from the WASI call poll_oneoff,
// which proxy-wasm-cpp-host answers with ENOSYS before Envoy 1.39 and which
// then kills a Go module ("fatal error: poll_oneoff failed"). Go's wasip1
// runtime calls it from runtime.netpoll once the poller is set up (by the
// first timer or a pollable file) and from runtime.usleep (not reached with
// one P). RATIONALE.md ("Why is the Envoy floor 1.39?") has the analysis and
// the path that remains.

// TestPluginStartsNoTimerGoroutineOrFile: no package compiled into
// plugin.wasm outside the standard library starts a goroutine, a timer or a
// deadline, forces a GC, or opens a file or a socket, and the module links
// none of the standard packages that do so on their own (net, net/http,
// os/signal, context).
func TestPluginStartsNoTimerGoroutineOrFile(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,GoFiles,Standard", "github.com/fairshare-wasm/fairshare/cmd/plugin")
	cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbiddenPkgs := []string{"context", "net", "net/http", "os/signal", "os/exec"}
	// Calls that start a timer, a goroutine's sleep, a forced collection,
	// or a file or socket the runtime may add to its poller.
	forbiddenCalls := map[string][]string{
		"time":    {"Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"},
		"context": {"WithTimeout", "WithDeadline", "WithTimeoutCause", "WithDeadlineCause"},
		"runtime": {"GC", "Gosched"},
		"os":      {"Open", "OpenFile", "Create", "NewFile", "Pipe"},
	}
	var scanned int
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath, Dir string
			GoFiles         []string
			Standard        bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			if slices.Contains(forbiddenPkgs, p.ImportPath) {
				t.Errorf("plugin.wasm links %s", p.ImportPath)
			}
			continue
		}
		for _, f := range p.GoFiles {
			scanned++
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			imports := map[string]string{} // local name -> path
			for _, im := range file.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				name := path[strings.LastIndex(path, "/")+1:]
				if im.Name != nil {
					name = im.Name.Name
				}
				imports[name] = path
			}
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s: a go statement in %s", fset.Position(n.Pos()), p.ImportPath)
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && slices.Contains(forbiddenCalls[imports[id.Name]], n.Sel.Name) {
						t.Errorf("%s: %s.%s in %s", fset.Position(n.Pos()), imports[id.Name], n.Sel.Name, p.ImportPath)
					}
				}
				return true
			})
		}
	}
	if scanned < 20 {
		t.Fatalf("scanned %d files; the dependency list looks wrong:\n%s", scanned, out)
	}
}

// TestWasmLegacyWASISurvivesGC: under the cpp-host of Envoy 1.32.13–1.38
// (host.ProfileCppHostC4d7bb0), where poll_oneoff answers ENOSYS and a
// single call kills a Go module ("fatal error: poll_oneoff failed"), one
// VM schedules and releases requests whose bodies add up to more than
// 4 GiB, more than a 32-bit Wasm memory can hold, so the collector ran
// many times. First the plugin as the Go linker wrote it (wasmbuild.Raw),
// which still imports the host's poll_oneoff: it survives only because no
// code of the plugin sets up the runtime's poller (see
// TestPluginStartsNoTimerGoroutineOrFile), so this guards that discipline
// (the gc test module of hostcalls/host, which arms a timer, dies there:
// TestLegacyWASIKillsGoOnGC). Then the module as it ships, through the
// post-link step, under that profile and the newest. Bodies of 1 KiB to
// 7 MiB, with requests held open across collections, make the heap grow
// and shrink.
func TestWasmLegacyWASISurvivesGC(t *testing.T) {
	raw, err := host.Compile(context.Background(), wasmbuild.Raw(t, wasmbuild.PluginPackage))
	if err != nil {
		t.Fatalf("compile the linker's plugin.wasm: %v", err)
	}
	t.Cleanup(func() { raw.Close(context.Background()) })
	if sent, err := gcLoad(t, raw, host.ProfileCppHostC4d7bb0); err != nil {
		t.Errorf("%s, the linker's module (host poll_oneoff): after %d MiB: %v", host.ProfileCppHostC4d7bb0, sent>>20, err)
	}
	for _, p := range []host.Profile{host.ProfileCppHostC4d7bb0, host.ProfileCppHost94091cd} {
		if sent, err := gcLoad(t, compiled(t), p); err != nil {
			t.Errorf("%s: after %d MiB: %v", p, sent>>20, err)
		}
	}
}

// gcLoad starts m under profile p and pushes more than 4 GiB of request
// bodies through one VM (see TestWasmLegacyWASISurvivesGC); it returns the
// bytes sent and the VM's failure, or nil once every request is released
// and the pools are idle.
func gcLoad(t *testing.T, m *host.Module, p host.Profile) (int64, error) {
	t.Helper()
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	h, err := m.Start(context.Background(), host.Options{
		VMs: 1, PluginName: pluginName, VMID: "legacy-wasi-gc-" + p.String() + fmt.Sprintf("-%p", m), PluginConfig: []byte(testConfig), Clock: clock, Seed: 7,
		Profile: p, BufferLimit: 8 << 20,
	})
	if err != nil {
		t.Fatalf("start under %s: %v", p, err)
	}
	defer h.Close(context.Background())
	pad := strings.Repeat("x", 7<<20)
	var sent int64
	var open []*host.Stream
	for i := 0; sent <= 4<<30; i++ {
		n := 1 << 10
		if i%4 == 0 {
			n = (7 << 20) - (i*4099)%(6<<20) // 1 to 7 MiB
		}
		body := chat("m", 4, `,"user":"`+pad[:n]+`"`)
		sent += int64(len(body))
		s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", []string{"a", "b", "c"}[i%3]}}, body)
		if err := h.VMs()[0].Failed(); err != nil {
			return sent, fmt.Errorf("request %d: the VM died: %w (log: %s)", i, err, lastLogs(h))
		}
		if lr := s.LocalReply(); lr != nil {
			t.Fatalf("%s: request %d: local reply %d %s", p, i, lr.Status, lr.Body)
		}
		open = append(open, s)
		if len(open) > 8 {
			respondJSON(open[0], 10, 4)
			open = open[1:]
		}
		if i%64 == 0 {
			h.Advance(time.Second)
		}
	}
	for _, s := range open {
		respondJSON(s, 10, 4)
	}
	h.Advance(time.Second)
	if err := h.VMs()[0].Failed(); err != nil {
		return sent, fmt.Errorf("at the end: the VM died: %w (log: %s)", err, lastLogs(h))
	}
	checkIdle(t, h, "small", "rest")
	return sent, nil
}

// lastLogs returns the guest's "fatal error" line if it logged one, else
// its last log message.
func lastLogs(h *host.Host) string {
	logs := h.Logs()
	for _, l := range logs {
		if strings.HasPrefix(l.Message, "fatal error") {
			return l.Message
		}
	}
	if len(logs) == 0 {
		return ""
	}
	return logs[len(logs)-1].Message
}
