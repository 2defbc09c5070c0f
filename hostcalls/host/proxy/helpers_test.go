package proxy

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// Test modules (the host package's), built once per test binary
// (wasmbuild fails the test if the go tool cannot build them).
const (
	rawGuestPkg    = "./hostcalls/host/testdata/rawguest"
	passthroughPkg = "./hostcalls/host/testdata/passthrough"
	holdGuestPkg   = "./hostcalls/host/testdata/holdguest"
	conformancePkg = "./hostcalls/internal/conformance"
)

// getReq is a request whose body the tests never send (headers only).
var getReq = [][2]string{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "example"}, {"Content-Length", "9"}}

var (
	modMu    sync.Mutex
	compiled = map[string]*host.Module{}
	vmIDSeq  atomic.Int64
)

// module compiles the test module pkg once per test binary.
func module(tb testing.TB, pkg string) *host.Module {
	tb.Helper()
	wasm := wasmbuild.Module(tb, pkg)
	modMu.Lock()
	defer modMu.Unlock()
	if m := compiled[pkg]; m != nil {
		return m
	}
	m, err := host.Compile(context.Background(), wasm)
	if err != nil {
		tb.Fatalf("Compile(%s) = %v", pkg, err)
	}
	compiled[pkg] = m
	return m
}

// start starts pkg with opts (a unique VMID unless set) and closes the
// Host at the end of the test.
func start(tb testing.TB, pkg string, opts host.Options) *host.Host {
	tb.Helper()
	if opts.VMID == "" {
		opts.VMID = fmt.Sprintf("%s-%d", tb.Name(), vmIDSeq.Add(1))
	}
	h, err := module(tb, pkg).Start(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Start = %v", err)
	}
	tb.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// flowHost runs the conformance module with script on a virtual clock
// (ticks only when the test says so).
func flowHost(t *testing.T, script string, opts host.Options) *host.Host {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = host.NewVirtualClock(time.Unix(1700000000, 0))
	}
	opts.PluginConfig = []byte(script)
	return start(t, conformancePkg, opts)
}

// holdAndResume (as in the host's flow tests): the filter removes
// content-length, holds the body, and its tick rewrites and resumes it.
const holdAndResume = `{"on":{
	"configure":[{"call":"set_tick_period_milliseconds","n":10}],
	"request_headers":[{"call":"remove_header_map_value","map":"request_headers","key":"content-length"}],
	"tick":[{"call":"set_effective_context","ctx":2},
	        {"call":"get_buffer_bytes","buffer":"request_body","start":0},
	        {"call":"set_buffer_bytes","buffer":"request_body","start":0,"size":2147483647,"value":"{\"priority\":1}"},
	        {"call":"replace_header_map_value","map":"request_headers","key":"x-fairshare","value":"1"},
	        {"call":"continue_stream","stream":"request"},
	        {"call":"get_buffer_bytes","buffer":"request_body","start":0}]},
	"return":{"request_body":1}}`

// tick runs proxy_on_tick on the Host's one VM (its timer must be armed).
func tick(t *testing.T, h *host.Host) {
	t.Helper()
	if n := h.Tick(); n != 1 {
		t.Fatalf("%d VMs ticked, want 1 (timer not armed?)", n)
	}
}

// messages returns the log messages of VM vm (all VMs if vm < -1) that
// start with one of the prefixes (all if none).
func messages(h *host.Host, vm int, prefixes ...string) []string {
	var out []string
	for _, e := range h.Logs() {
		if vm >= -1 && e.VM != vm {
			continue
		}
		keep := len(prefixes) == 0
		for _, p := range prefixes {
			if strings.HasPrefix(e.Message, p) {
				keep = true
			}
		}
		if keep {
			out = append(out, e.Message)
		}
	}
	return out
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s =\n\t%#v\nwant\n\t%#v", what, got, want)
	}
}

// grep returns the transcript lines containing any of the substrings.
func grep(lines []string, subs ...string) []string {
	var out []string
	for _, l := range lines {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// waitTranscript waits until VM i's transcript has a line containing sub,
// however long that takes; the 2-minute deadline only stops a hung test.
func waitTranscript(t *testing.T, h *host.Host, i int, sub string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a guard against a hang, not a speed check
	for len(grep(h.Transcript(i), sub)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no transcript line %q", sub)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
