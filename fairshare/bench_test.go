package fairshare

import (
	"fmt"
	"testing"
	"time"
)

// benchPool returns the record of a pool of n teams and min(n, 16) holders
// (three teams each) whose first team has used up its reservation, and a
// grant of that team.
func benchPool(b testing.TB, n int) ([]byte, Grant) {
	p := bigPool(n, min(n, 16))
	var g Grant
	for range p.teams[0].reserved + 1 {
		g = p.Acquire(at(time.Second), 99, p.teams[0].name, Interactive, 2)
	}
	rec, _ := p.AppendBinary(nil)
	return rec, g
}

var benchSizes = []int{4, 32, 256}

// BenchmarkCodec is the baseline: decode the record into a reused pool and
// encode it into a reused buffer, with no decision.
func BenchmarkCodec(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("teams=%d", n), func(b *testing.B) {
			rec, _ := benchPool(b, n)
			var p Pool
			buf := make([]byte, 0, 2*len(rec))
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				if err := p.UnmarshalBinary(rec); err != nil {
					b.Fatal(err)
				}
				buf, _ = p.AppendBinary(buf[:0])
			}
		})
	}
}

// BenchmarkAcquire: decode + Acquire + encode, one decision as the plugin
// makes it (borrow: a team above its reservation, which ranks the pool;
// within: a team with room).
func BenchmarkAcquire(b *testing.B) {
	for _, n := range benchSizes {
		for _, path := range []string{"borrow", "within"} {
			b.Run(fmt.Sprintf("teams=%d/%s", n, path), func(b *testing.B) {
				rec, _ := benchPool(b, n)
				var p Pool
				buf := make([]byte, 0, 2*len(rec))
				team := fmt.Sprintf("team-%03d", 0)
				if path == "within" {
					team = fmt.Sprintf("team-%03d", n-1)
				}
				now := at(2 * time.Second)
				b.ReportAllocs()
				for b.Loop() {
					if err := p.UnmarshalBinary(rec); err != nil {
						b.Fatal(err)
					}
					g := p.Acquire(now, 99, team, Interactive, 2)
					if g.Borrowing != (path == "borrow") {
						b.Fatalf("Acquire = %+v", g)
					}
					buf, _ = p.AppendBinary(buf[:0])
				}
			})
		}
	}
}

// BenchmarkRelease: decode + Release + encode.
func BenchmarkRelease(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("teams=%d", n), func(b *testing.B) {
			rec, g := benchPool(b, n)
			var p Pool
			buf := make([]byte, 0, 2*len(rec))
			now := at(2 * time.Second)
			b.ReportAllocs()
			for b.Loop() {
				if err := p.UnmarshalBinary(rec); err != nil {
					b.Fatal(err)
				}
				gc := g
				if !p.Release(now, &gc, 3) {
					b.Fatal("Release = false")
				}
				buf, _ = p.AppendBinary(buf[:0])
			}
		})
	}
}
