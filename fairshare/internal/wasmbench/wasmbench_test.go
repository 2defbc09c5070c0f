package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// guest is the wasmbench module instantiated in wazero's default runtime
// (its optimizing compiler on amd64 and arm64). Envoy runs V8: its figures
// will differ; the ratio is wazero's.
type guest struct {
	ctx      context.Context
	r        wazero.Runtime
	prepare  api.Function
	acquire  api.Function
	release  api.Function
	codec    api.Function
	own      api.Function
	arrive   api.Function
	dispatch api.Function
	floors   map[string]api.Function // floorbytes, floorvarint, floorfloat
}

func newGuest(tb testing.TB) *guest {
	tb.Helper()
	wasm := wasmbuild.Module(tb, "./fairshare/internal/wasmbench")
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	tb.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	mod, err := r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		tb.Fatalf("instantiate wasmbench: %v", err)
	}
	g := &guest{ctx: ctx, r: r, prepare: mod.ExportedFunction("prepare"),
		acquire: mod.ExportedFunction("acquire"), release: mod.ExportedFunction("release"),
		codec: mod.ExportedFunction("codec"), own: mod.ExportedFunction("own"),
		arrive: mod.ExportedFunction("arrive"), dispatch: mod.ExportedFunction("dispatch"), floors: map[string]api.Function{}}
	for _, name := range []string{"floorbytes", "floorvarint", "floorfloat"} {
		if g.floors[name] = mod.ExportedFunction(name); g.floors[name] == nil {
			tb.Fatalf("wasmbench lacks the export %s", name)
		}
	}
	if g.prepare == nil || g.acquire == nil || g.release == nil || g.codec == nil || g.own == nil ||
		g.arrive == nil || g.dispatch == nil {
		tb.Fatal("wasmbench lacks an export (prepare, acquire, release, codec, own, arrive, dispatch)")
	}
	return g
}

// call calls f and returns its single result as an int64.
func (g *guest) call(tb testing.TB, f api.Function, args ...uint64) int64 {
	tb.Helper()
	res, err := f.Call(g.ctx, args...)
	if err != nil {
		tb.Fatalf("%s: %v", f.Definition().Name(), err)
	}
	return int64(res[0])
}

// op is one kind of decision, run natively or in the guest.
type op struct {
	name   string
	native func(n int) int64
	wasm   func(g *guest, tb testing.TB, n int) int64
}

var ops = []op{
	{"codec", codecLoop,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.codec, uint64(n)) }},
	{"acquire-borrow", func(n int) int64 { return acquireLoop(n, false) },
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.acquire, uint64(n), 0) }},
	{"acquire-within", func(n int) int64 { return acquireLoop(n, true) },
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.acquire, uint64(n), 1) }},
	{"release", releaseLoop,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.release, uint64(n)) }},
	{"own-pair", ownLoop,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.own, uint64(n)) }},
	{"arrive-queued", arriveLoop,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.arrive, uint64(n)) }},
	{"dispatch", dispatchLoop,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.dispatch, uint64(n)) }},
	{"floor-bytes", floorBytes,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.floors["floorbytes"], uint64(n)) }},
	{"floor-varint", floorVarint,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.floors["floorvarint"], uint64(n)) }},
	{"floor-float", floorFloat,
		func(g *guest, tb testing.TB, n int) int64 { return g.call(tb, g.floors["floorfloat"], uint64(n)) }},
}

var sizes = []int{4, 32, 256}

// interleave is the number of decisions BenchmarkDecision runs in Wasm,
// then natively, in turn: a few milliseconds of each, so that a call into
// the guest costs nothing beside them.
const interleave = 256

// TestGuestMatchesNative: the module decides exactly as the native build
// (same record size, same priorities and record sizes over ten decisions),
// so the benchmark compares the same work.
func TestGuestMatchesNative(t *testing.T) {
	g := newGuest(t)
	for _, teams := range sizes {
		size := prepare(teams)
		if got := g.call(t, g.prepare, uint64(teams)); got != int64(size) {
			t.Fatalf("teams=%d: record of %d bytes in Wasm, %d natively", teams, got, size)
		}
		for _, o := range ops {
			want := o.native(10)
			if want <= 0 {
				t.Fatalf("teams=%d %s: native checksum %d", teams, o.name, want)
			}
			if got := o.wasm(g, t, 10); got != want {
				t.Errorf("teams=%d %s: Wasm checksum %d, native %d", teams, o.name, got, want)
			}
		}
	}
}

// BenchmarkDecision runs one decision (decode + Acquire or Release +
// encode; codec: decode + encode only, the baseline; own-pair: an Acquire
// and a Release decision, each decoding the pool's own last write, so its
// ns/op is per pair) inside the Wasm module; ns/op is per decision in Wasm (one call
// into the guest runs all b.N decisions, so the call overhead is spread).
// The same decisions run natively in the same run, outside the timer:
// native-ns/op is that figure and wasm/native the ratio. The two run in
// turns of interleave decisions, so that on a shared machine both see the
// same load (one long run of each put the ratio anywhere from 4 to 36).
// The floor-* cases are not decisions but the plainest loops over the same
// record (bytes summed, uvarints read, a float per team): the ratio Go's
// Wasm gets in wazero when nothing is left to take out.
func BenchmarkDecision(b *testing.B) {
	g := newGuest(b)
	for _, teams := range sizes {
		for _, o := range ops {
			b.Run(fmt.Sprintf("teams=%d/%s", teams, o.name), func(b *testing.B) {
				prepare(teams)
				g.call(b, g.prepare, uint64(teams))
				b.ReportAllocs()
				b.ResetTimer()
				var wasm, native time.Duration
				for done := 0; done < b.N; {
					n := min(interleave, b.N-done)
					done += n
					start := time.Now()
					if o.wasm(g, b, n) < 0 {
						b.Fatal("decision failed in Wasm")
					}
					wasm += time.Since(start)
					b.StopTimer()
					start = time.Now()
					if o.native(n) < 0 {
						b.Fatal("decision failed natively")
					}
					native += time.Since(start)
					b.StartTimer()
				}
				b.StopTimer()
				b.ReportMetric(float64(native.Nanoseconds())/float64(b.N), "native-ns/op")
				b.ReportMetric(float64(wasm)/float64(native), "wasm/native")
			})
		}
	}
}
