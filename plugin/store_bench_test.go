package plugin

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkUserRecord is BenchmarkAcquireRelease with the user level, on
// four goroutines (VMs) sharing one record: every decision names one of N
// distinct users in turn (max_users 256, the default), the clock moving
// 1 ms per decision (so that users go idle and are replaced as in a live
// pool, user_active 30 s), against the same decisions without users
// (users=off). It reports the record's size after the run (record-bytes)
// and the CAS retries per decision (retries/decision: per record update,
// a decision and a release each).
func BenchmarkUserRecord(b *testing.B) {
	for _, n := range []int{0, 10, 1000, 10000} {
		name := "users=off"
		if n > 0 {
			name = "users=" + strconv.Itoa(n)
		}
		b.Run(name, func(b *testing.B) {
			cfg := testCoreConfig(64)
			cfg.Users = n > 0
			st := newEnvoyStore()
			const vms = 4
			var next, retries atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for v := range vms {
				wg.Add(1)
				go func(v int) {
					defer wg.Done()
					rs, r := newVM(st, uint32(v+1), cfg)
					rs.retries = 1 << 20
					for k := next.Add(1); k <= int64(b.N); k = next.Add(1) {
						now := t0.Add(time.Duration(k) * time.Millisecond)
						team, user := []string{"a", "b"}[k%2], ""
						if n > 0 {
							user = "user-" + strconv.FormatInt(k%int64(n), 10)
						}
						var g fairshare.Grant
						x, err := rs.update(now, r, func(p *fairshare.Pool) {
							g = p.AcquireUser(now, rs.holder, team, user, fairshare.Interactive, 10)
						})
						if err != nil {
							b.Error(err)
							return
						}
						y, err := rs.update(now, r, func(p *fairshare.Pool) { gc := g; p.Release(now, &gc, 10) })
						if err != nil {
							b.Error(err)
							return
						}
						retries.Add(int64(x + y))
					}
				}(v)
			}
			wg.Wait()
			b.StopTimer()
			v, _, _ := st.GetSharedData(recordKey("test", "p"))
			b.ReportMetric(float64(len(v)), "record-bytes")
			b.ReportMetric(float64(retries.Load())/float64(2*b.N), "retries/decision")
		})
	}
}
