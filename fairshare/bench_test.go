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
	for range p.teams[0].res[kindSeq] + 1 {
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

// queuePool returns a full pool of n teams (C = 4n sequences, K = 8000n
// KV tokens, every team at its reservation of 4 sequences and 6,000
// tokens, held by 16 holders), with waiting borrowers of every team
// queued one millisecond apart, each with a token demand and an estimate.
func queuePool(n, waiting int) *Pool {
	cfg := Config{Capacity: 4 * n, KVTokens: int64(8000 * n), HalfLife: time.Hour, EntryPenalty: true,
		HolderTimeout: time.Minute, RequestTimeout: 10 * time.Minute, QueueLimit: 1024, MaxQueueTime: time.Minute}
	for i := range n {
		cfg.Teams = append(cfg.Teams, TeamConfig{Name: fmt.Sprintf("team-%03d", i), Share: 1 / float64(n)})
	}
	p := NewPool("llama-3-8b", cfg, base)
	for i := range n {
		p.Charge(base, cfg.Teams[i].Name, float64(i)*1.7+0.3)
	}
	id := uint64(0)
	for i := range n {
		for j := range 4 {
			id++
			h := uint32((i*4+j)%16)*2654435761 + 12345
			p.Arrive(base, Request{Holder: h, ID: id, Team: cfg.Teams[i].Name, Class: Class(j % 2), Tokens: 1500, Estimate: 1.5})
		}
	}
	for k := range waiting {
		id++
		h := uint32(k%16)*2654435761 + 12345
		r := Request{Holder: h, ID: id, Team: cfg.Teams[k*7%n].Name, Class: Class(k % 2), Tokens: int64(1000 + k), Estimate: 2.5}
		if _, _, out := p.Arrive(at(time.Duration(k)*time.Millisecond), r); out != Queued {
			panic(fmt.Sprintf("queuePool: request %d %v", k, out))
		}
	}
	return p
}

var queueSizes = []int{0, 64, 512}

// acquireBaseline times n decisions decode + Acquire + encode of a
// borrower in rec (nil: the pool of 32 teams of BenchmarkAcquire, the
// request path before flow control), measured in the same run as the
// benchmark that reports its ratio to it.
func acquireBaseline(b *testing.B, rec []byte, n int) time.Duration {
	team := "team-005" // at its reservation in queuePool
	if rec == nil {
		rec, _ = benchPool(b, 32)
		team = "team-000"
	}
	var p Pool
	buf := make([]byte, 0, 2*len(rec))
	now := at(2 * time.Second)
	start := time.Now()
	for range n {
		if err := p.UnmarshalBinary(rec); err != nil {
			b.Fatal(err)
		}
		if g := p.Acquire(now, 99, team, Interactive, 2); !g.Borrowing {
			b.Fatal("the baseline does not borrow")
		}
		buf, _ = p.AppendBinary(buf[:0])
	}
	return time.Since(start)
}

// reportRatio reports the time per op of decode + Acquire + encode and
// the benchmark's ratio to it: x-acquire against the pool of
// BenchmarkAcquire (32 teams, 48 requests in flight, no flow control),
// x-same against the benchmark's own record (its larger size included).
func reportRatio(b *testing.B, rec []byte) {
	n := b.N
	el := b.Elapsed()
	base := acquireBaseline(b, nil, n)
	same := acquireBaseline(b, rec, n)
	b.ReportMetric(float64(base.Nanoseconds())/float64(n), "acquire-ns/op")
	b.ReportMetric(float64(el)/float64(base), "x-acquire")
	b.ReportMetric(float64(el)/float64(same), "x-same")
}

// BenchmarkArrive: decode + Arrive + encode of a borrower arriving at a
// full pool of 32 teams with 0, 64 and 512 requests waiting (it ranks the
// teams, compares itself with the head of the queue and is queued), with
// its ratio to decode + Acquire + encode (x-acquire).
func BenchmarkArrive(b *testing.B) {
	for _, w := range queueSizes {
		b.Run(fmt.Sprintf("teams=32/waiting=%d", w), func(b *testing.B) {
			rec, _ := queuePool(32, w).AppendBinary(nil)
			var p Pool
			buf := make([]byte, 0, 2*len(rec))
			now := at(time.Second)
			r := Request{Holder: 12345, ID: 1 << 40, Team: "team-005", Class: Batch, Tokens: 3000, Estimate: 2}
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				if err := p.UnmarshalBinary(rec); err != nil {
					b.Fatal(err)
				}
				if _, _, out := p.Arrive(now, r); out != Queued {
					b.Fatalf("Arrive = %v", out)
				}
				buf, _ = p.AppendBinary(buf[:0])
			}
			reportRatio(b, rec)
		})
	}
}

// BenchmarkDispatch: decode + Dispatch + encode when one request has
// finished in a full pool of 32 teams with 0, 64 and 512 requests waiting:
// the head (found by ranking the teams and scanning the queue) is the
// caller's and is granted; with none waiting, Dispatch finds the queue
// empty. With its ratio to decode + Acquire + encode (x-acquire).
func BenchmarkDispatch(b *testing.B) {
	for _, w := range queueSizes {
		b.Run(fmt.Sprintf("teams=32/waiting=%d", w), func(b *testing.B) {
			p0 := queuePool(32, w)
			// Free one sequence and its tokens: a within-share request of
			// the last team finishes.
			if len(p0.holders) > 0 {
				c := p0.holders[0].counts[0]
				g := Grant{Team: p0.teams[c.team].name, Holder: p0.holders[0].id, Tokens: 1500, At: base.UnixNano(), epoch: p0.teams[c.team].epoch}
				if !p0.Release(at(time.Second), &g, 1) {
					b.Fatal("release")
				}
			}
			holder := uint32(0)
			want := Empty
			if w > 0 {
				head, st := p0.Next(at(time.Second))
				if st != Elsewhere {
					b.Fatalf("Next = %v", st)
				}
				holder, want = head.Holder, Dispatched
			}
			rec, _ := p0.AppendBinary(nil)
			var p Pool
			buf := make([]byte, 0, 2*len(rec))
			now := at(time.Second)
			b.ReportAllocs()
			b.SetBytes(int64(len(rec)))
			for b.Loop() {
				if err := p.UnmarshalBinary(rec); err != nil {
					b.Fatal(err)
				}
				if _, _, st := p.Dispatch(now, holder); st != want {
					b.Fatalf("Dispatch = %v, want %v", st, want)
				}
				buf, _ = p.AppendBinary(buf[:0])
			}
			reportRatio(b, rec)
		})
	}
}

// BenchmarkArriveWork: BenchmarkArrive's borrower (64 waiting) on the same
// pool without a work resource (work=off) and with one declared, every
// team in debt and every waiting request carrying a work demand
// (work=on, workPools): the ratio of the two is what the debts cost
// (their pay-down at every operation, 8 bytes a team in the record).
func BenchmarkArriveWork(b *testing.B) {
	q := queuePool(32, 64)
	q.Reconfigure(at(time.Second), q.config()) // the stamp of workPools'
	plain, _ := q.AppendBinary(nil)
	work, _ := workPools()[0].AppendBinary(nil)
	for _, c := range []struct {
		name string
		rec  []byte
	}{{"work=off", plain}, {"work=on", work}} {
		b.Run(c.name, func(b *testing.B) {
			r := Request{Holder: 12345, ID: 1 << 40, Team: "team-005", Class: Batch, Tokens: 3000, Estimate: 2}
			now := at(2 * time.Second)
			var p Pool
			buf := make([]byte, 0, 2*len(c.rec))
			b.ReportAllocs()
			b.SetBytes(int64(len(c.rec)))
			for b.Loop() {
				if err := p.UnmarshalBinary(c.rec); err != nil {
					b.Fatal(err)
				}
				if _, _, out := p.Arrive(now, r); out != Queued {
					b.Fatalf("Arrive = %v", out)
				}
				buf, _ = p.AppendBinary(buf[:0])
			}
		})
	}
}
