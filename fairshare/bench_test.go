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
// encode it into a reused buffer, with no decision. Two records (the same
// pool one second apart) alternate, so that every decode is a full one:
// the pool never reads back the record it has just written.
func BenchmarkCodec(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("teams=%d", n), func(b *testing.B) {
			rec, _ := benchPool(b, n)
			var q Pool
			if err := q.UnmarshalBinary(rec); err != nil {
				b.Fatal(err)
			}
			q.Heartbeat(at(3*time.Second), 99)
			recs := [2][]byte{rec, nil}
			recs[1], _ = q.AppendBinary(nil)
			var p Pool
			buf := make([]byte, 0, 2*len(rec))
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			i := 0
			for b.Loop() {
				if err := p.UnmarshalBinary(recs[i&1]); err != nil {
					b.Fatal(err)
				}
				buf, _ = p.AppendBinary(buf[:0])
				i++
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

// BenchmarkCopy is the machine baseline for the ratios: copy the record
// bytes into a reused buffer (what a decision costs at the very least).
func BenchmarkCopy(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("teams=%d", n), func(b *testing.B) {
			rec, _ := benchPool(b, n)
			buf := make([]byte, 0, 2*len(rec))
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				buf = append(buf[:0], rec...)
			}
		})
	}
}

// BenchmarkOwnRecord: the steady state of one VM that finds its own last
// write in the shared data (no other VM wrote in between): decode +
// Acquire + encode, then decode + Release + encode of the same request.
// One op is those two decisions.
func BenchmarkOwnRecord(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("teams=%d", n), func(b *testing.B) {
			rec, _ := benchPool(b, n)
			var p Pool
			buf := make([]byte, 0, 2*len(rec))
			buf = append(buf, rec...)
			team := fmt.Sprintf("team-%03d", 0)
			now := at(2 * time.Second)
			b.ReportAllocs()
			for b.Loop() {
				if err := p.UnmarshalBinary(buf); err != nil {
					b.Fatal(err)
				}
				g := p.Acquire(now, 99, team, Interactive, 2)
				buf, _ = p.AppendBinary(buf[:0])
				if err := p.UnmarshalBinary(buf); err != nil {
					b.Fatal(err)
				}
				if !p.Release(now, &g, 3) {
					b.Fatal("Release = false")
				}
				buf, _ = p.AppendBinary(buf[:0])
			}
		})
	}
}
