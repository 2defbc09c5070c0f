package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
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

// TestWasmLegacyWASISurvivesGC: under the WASI of Envoy 1.33–1.38
// (poll_oneoff answers ENOSYS) one VM of the built plugin schedules and
// releases requests whose bodies add up to more than 4 GiB, more than a
// 32-bit Wasm memory can hold, so the collector ran many times; a single
// poll_oneoff would have killed the VM. Bodies of 1 KiB to 7 MiB, with
// requests held open across collections, make the heap grow and shrink.
func TestWasmLegacyWASISurvivesGC(t *testing.T) {
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	h, err := compiled(t).Start(context.Background(), host.Options{
		VMs: 1, PluginName: pluginName, VMID: "legacy-wasi-gc", PluginConfig: []byte(testConfig), Clock: clock, Seed: 7,
		WASI: host.WASILegacy, BufferLimit: 8 << 20,
	})
	if err != nil {
		t.Fatalf("start under the legacy WASI: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
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
			t.Fatalf("request %d (%d MiB sent): the VM died: %v", i, sent>>20, err)
		}
		if lr := s.LocalReply(); lr != nil {
			t.Fatalf("request %d: local reply %d %s", i, lr.Status, lr.Body)
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
		t.Fatalf("after %d MiB: the VM died: %v", sent>>20, err)
	}
	checkIdle(t, h, "small", "rest")
}
