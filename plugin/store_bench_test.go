package plugin

import (
	"testing"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// BenchmarkAcquireRelease measures one request's two record updates
// (decode, decide, encode, compare-and-swap) natively.
func BenchmarkAcquireRelease(b *testing.B) {
	st := newEnvoyStore()
	rs, r := newVM(st, 1, testCoreConfig(64))
	b.ReportAllocs()
	for b.Loop() {
		var g fairshare.Grant
		if _, err := rs.update(t0, r, func(p *fairshare.Pool) { g = p.Acquire(t0, 1, "a", fairshare.Interactive, 10) }); err != nil {
			b.Fatal(err)
		}
		if _, err := rs.update(t0, r, func(p *fairshare.Pool) { gc := g; p.Release(t0, &gc, 10) }); err != nil {
			b.Fatal(err)
		}
	}
}
