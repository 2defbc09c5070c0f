//go:build !wasip1

package plugin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/etcdtest"
	"github.com/tidwall/gjson"
)

// The cluster scenarios run several proxies (one Host each: its own
// shared data, its own VMs) against a real etcd embedded in the test, on
// the real clock: etcd's leases expire in real time.

// clusterConfig is a pool of 12 with teams a (0.5: 6 reserved) and b
// (0.25: 3), shared through etcd with a sync every 100 ms and a 2 s lease.
func clusterConfig(replica string) string { return clusterConfigTTL(replica, "2s") }

// clusterConfigTTL is clusterConfig with another lease TTL.
func clusterConfigTTL(replica, ttl string) string {
	return `{
  "default_max_tokens": 16,
  "tick": "100ms",
  "status_token": "sesame",
  "cluster": {"etcd_cluster": "etcd", "replica": "` + replica + `", "sync_interval": "100ms", "lease_ttl": "` + ttl + `", "timeout": "100ms"},
  "pools": [{"name": "small", "capacity": 12, "models": ["m"], "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}}}]
}`
}

// startReplica starts a proxy named replica with vms VMs syncing through
// etcd at url.
func startReplica(t *testing.T, url, replica string, vms int) *host.Host {
	t.Helper()
	return startReplicaConfig(t, url, replica, vms, clusterConfig(replica))
}

func startReplicaConfig(t *testing.T, url, replica string, vms int, cfg string) *host.Host {
	t.Helper()
	h, err := compiled(t).Start(context.Background(), host.Options{
		Profile: hostProfile,
		VMs:     vms, PluginName: pluginName, VMID: fmt.Sprintf("%s-%s-%p", t.Name(), replica, t),
		PluginConfig: []byte(cfg), Clusters: map[string]string{"etcd": url},
	})
	if err != nil {
		t.Fatalf("start %s: %v", replica, err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	noHostErrors(t, h)
	return h
}

// eventually polls cond until it holds; after two minutes it fails the
// test with what was last seen (a guard against a hang, not a speed
// requirement).
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
	}
	t.Fatalf("%s: never happened; last seen %s", what, last)
}

// syncs returns every proxy's count of pool reports written to etcd
// (fairshare.cluster_syncs_total).
func syncs(hs []*host.Host) []int64 {
	var n []int64
	for _, h := range hs {
		n = append(n, h.Metrics()["fairshare.cluster_syncs_total"].Value)
	}
	return n
}

// throughSyncs calls check (which fails the test itself) until every
// proxy of hs has written k more pool reports to etcd than when it was
// called: "it stays so" over k syncs of each proxy, however long they
// take, not over a span of the wall clock. The 2 minutes only stop a hung
// test.
func throughSyncs(t testing.TB, hs []*host.Host, k int64, check func()) {
	t.Helper()
	from := syncs(hs)
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) { // a guard against a hang, not a speed check
		check()
		now, done := syncs(hs), true
		for i := range now {
			done = done && now[i] >= from[i]+k
		}
		if done {
			check()
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the proxies wrote %v pool reports, want %d more than %v", now, k, from)
		}
	}
}

// slices returns every proxy's slice of pool small.
func slicesOf(t testing.TB, hs []*host.Host) ([]fairshare.Slice, string) {
	var out []fairshare.Slice
	var b strings.Builder
	for i, h := range hs {
		s, ok := pool(t, h, "small").Slice()
		if !ok {
			fmt.Fprintf(&b, "[%d: not sliced]", i)
		}
		fmt.Fprintf(&b, "[%d: %+v]", i, s)
		out = append(out, s)
	}
	return out, b.String()
}

// whole reports whether the slices add up to the whole pool (12; a 6, b 3).
func whole(ss []fairshare.Slice) bool {
	c, a, b := 0, 0, 0
	for _, s := range ss {
		if len(s.Reserved) != 2 {
			return false
		}
		c, a, b = c+s.Capacity, a+s.Reserved[0], b+s.Reserved[1]
	}
	return c == 12 && a == 6 && b == 3
}

// TestWasmClusterSlices: three proxies act as one pool. Idle, they split
// it evenly; when team a's demand is all at one proxy, a's whole
// reservation moves there, a request of a at another proxy still runs
// within share while a is within its reservation across the pool (on
// that proxy's loan), and borrows once a is at its reservation;
// when a proxy dies, its slice returns to the others once its lease
// expires; usage charged at one proxy ranks at the others.
func TestWasmClusterSlices(t *testing.T) {
	url := etcdtest.Started(t).URL()
	hs := []*host.Host{startReplica(t, url, "r0", 2), startReplica(t, url, "r1", 1), startReplica(t, url, "r2", 1)}

	eventually(t, "idle proxies split the pool evenly", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		for _, s := range ss {
			if s.Capacity != 4 {
				return false, seen
			}
		}
		return whole(ss), seen
	})

	// Five requests of a at r0, held open.
	var open []*host.Stream
	for range 5 {
		open = append(open, request(hs[0], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, "")))
	}
	// a's demand (5) at r0, and the rest of its 6 as headroom, to r0
	// too (where the traffic is).
	eventually(t, "a's reservation follows its demand to r0", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		return whole(ss) && ss[0].Reserved[0] == 6 && ss[1].Reserved[0] == 0 && ss[2].Reserved[0] == 0, seen
	})
	// The status of r0 shows its slice and the whole pool.
	q := hs[0].NewStream(0)
	q.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/fairshare/status"}, {"authorization", "Bearer sesame"}}, true)
	if lr := q.LocalReply(); lr == nil || lr.Status != 200 ||
		gjson.GetBytes(lr.Body, "pools.0.pool_capacity").Int() != 12 || gjson.GetBytes(lr.Body, "pools.0.teams.0.reserved").Int() != 6 {
		t.Errorf("status of r0 = %+v, want pool_capacity 12 and a's 6 reserved", lr)
	}
	// r1 holds none of a's reservation, but a has 1 of its 6 left
	// across the pool: r1 lends it to a (fairshare.Loans), and a's
	// request there runs within share.
	eventually(t, "r1 lends a the one left of its reservation", func() (bool, string) {
		l := teamStats(t, hs[1], "small")["a"].Lent
		return l == 1, fmt.Sprintf("a's loan at r1: %d", l)
	})
	s := request(hs[1], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p := priority(t, s); p != 0 {
		t.Errorf("a's sixth request across the pool, at r1 (none of a's slice there): priority %d, want 0 (within share on r1's loan)", p)
	}
	open = append(open, s)
	// a is at its reservation: once every proxy has seen it, none lends,
	// and a's next request borrows wherever it arrives.
	eventually(t, "no proxy lends a at its reservation", func() (bool, string) {
		var ls []int
		for _, h := range hs {
			ls = append(ls, teamStats(t, h, "small")["a"].Lent)
		}
		return slices.Max(ls) == 0, fmt.Sprintf("a's loans: %v", ls)
	})
	s = request(hs[2], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p := priority(t, s); p < fairshare.BorrowBase {
		t.Errorf("a's seventh request across the pool, at r2: priority %d, want borrowing (>= %d)", p, fairshare.BorrowBase)
	}
	open = append(open, s)

	// Usage charged at r0 reaches r1's ranking.
	for _, s := range open {
		respondJSON(s, 100, 50)
	}
	eventually(t, "r0's usage merged at r1", func() (bool, string) {
		u0 := teamStats(t, hs[0], "small")["a"].Usage
		u1 := teamStats(t, hs[1], "small")["a"].Usage
		return u0 > 1000 && math.Abs(u0-u1) < 1e-6*u0, fmt.Sprintf("usage of a: r0 %v, r1 %v", u0, u1)
	})

	// r2 dies: once its lease expires, r0 and r1 hold the whole pool.
	hs[2].Close(context.Background())
	eventually(t, "r2's slice returns", func() (bool, string) {
		ss, seen := slicesOf(t, hs[:2])
		return whole(ss), seen
	})
}

// cutProxy stands between one proxy and etcd: cut, it answers 503 (a
// partition between that proxy and etcd).
type cutProxy struct {
	srv   *httptest.Server
	cut   atomic.Bool
	calls sync.Map // path → *atomic.Int64: the calls that reached etcd
}

// count returns the calls to path that reached etcd.
func (p *cutProxy) count(path string) int64 {
	if v, ok := p.calls.Load(path); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = nil
	p := &cutProxy{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.cut.Load() {
			http.Error(w, "partitioned", http.StatusServiceUnavailable)
			return
		}
		v, _ := p.calls.LoadOrStore(r.URL.Path, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func capacities(ss []fairshare.Slice) (sum int, each []int) {
	for _, s := range ss {
		sum += s.Capacity
		each = append(each, s.Capacity)
	}
	return sum, each
}

// TestWasmClusterPartition: a proxy cut off from etcd keeps its slice
// until its lease would have expired, then shrinks to its safe slice
// (⌊0.5 × 12 / 3⌋ = 2); the two others take the rest; the slices never
// add up to more than 12 + 2 (the stated bound); healed, it rejoins and
// the pool is split evenly again.
func TestWasmClusterPartition(t *testing.T) {
	url := etcdtest.Started(t).URL()
	var cuts []*cutProxy
	var hs []*host.Host
	for i := range 3 {
		c := newCutProxy(t, url)
		cuts = append(cuts, c)
		hs = append(hs, startReplica(t, c.srv.URL, fmt.Sprint("r", i), 1))
	}
	even := func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		_, each := capacities(ss)
		return whole(ss) && each[0] == 4 && each[1] == 4 && each[2] == 4, seen
	}
	eventually(t, "an even split", even)
	bounded := func(ss []fairshare.Slice, seen string) {
		if sum, _ := capacities(ss); sum > 12+2 {
			t.Fatalf("slices add up to %d > 12 + 2 (the bound): %s", sum, seen)
		}
	}
	cuts[2].cut.Store(true)
	eventually(t, "r2 shrinks to its safe slice, r0 and r1 take the rest", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		bounded(ss, seen)
		return ss[2].Capacity == 2 && ss[2].Reserved[0] == 1 && ss[2].Reserved[1] == 0 && whole(ss[:2]), seen
	})
	// A request at r2 is still decided locally, against its safe slice.
	s := request(hs[2], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p := priority(t, s); p != 0 {
		t.Errorf("a's request at the cut-off r2: priority %d, want 0 (its safe slice keeps 1 of a)", p)
	}
	respondJSON(s, 1, 1)
	cuts[2].cut.Store(false)
	eventually(t, "r2 rejoins: an even split again", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		bounded(ss, seen)
		ok, _ := even()
		return ok, seen
	})
}

// TestWasmClusterEtcdRestart: with etcd down, every proxy goes on deciding
// from its local slice (shrunk to its safe slice once its lease would
// have expired); etcd back, the slices reconverge to the whole pool.
func TestWasmClusterEtcdRestart(t *testing.T) {
	etcd := etcdtest.Started(t)
	url := etcd.URL()
	hs := []*host.Host{startReplica(t, url, "r0", 1), startReplica(t, url, "r1", 1)}
	eventually(t, "the pool split between both", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		return whole(ss) && ss[0].Capacity > 0 && ss[1].Capacity > 0, seen
	})
	etcd.Stop()
	eventually(t, "both shrink to their safe slice (3)", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		_, each := capacities(ss)
		return each[0] == 3 && each[1] == 3, seen
	})
	s := request(hs[0], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p := priority(t, s); p != 0 {
		t.Errorf("a's request while etcd is down: priority %d, want 0 (r0's safe slice keeps 1 of a)", p)
	}
	respondJSON(s, 1, 1)
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the slices reconverge", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		return whole(ss), seen
	})
}

// TestWasmClusterNoLostUsage: three proxies charge usage concurrently
// while they all sync (their transactions conflict); once settled, every
// proxy's record holds the sum of what all of them charged.
func TestWasmClusterNoLostUsage(t *testing.T) {
	url := etcdtest.Started(t).URL()
	hs := []*host.Host{startReplica(t, url, "r0", 2), startReplica(t, url, "r1", 2), startReplica(t, url, "r2", 2)}
	eventually(t, "all registered", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		_, each := capacities(ss)
		return whole(ss) && !slices.Contains(each, 0), seen
	})
	const perVM = 20
	var wg sync.WaitGroup
	for _, h := range hs {
		for vm := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perVM {
					s := request(h, vm, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
					respondJSON(s, 10+i, 5)
				}
			}()
		}
	}
	wg.Wait()
	// Each request costs (10+i) × 1 + 5 × 2.
	want := 0.0
	for i := range perVM {
		want += float64(10+i) + 10
	}
	want *= float64(len(hs) * 2)
	eventually(t, "every proxy ranks on the sum of all charges", func() (bool, string) {
		var seen []float64
		ok := true
		for _, h := range hs {
			u := teamStats(t, h, "small")["a"].Usage
			seen = append(seen, u)
			// The default half-life (168 h) decays a few seconds' usage
			// by less than 1e-4.
			ok = ok && math.Abs(u-want) <= 1e-4*want
		}
		return ok, fmt.Sprintf("usage of a %v, want %v", seen, want)
	})
}

// BenchmarkClusterRequestPath measures one scheduled request (1 KiB body,
// a JSON response with usage) through the built module on a proxy that
// shares its pool through etcd (the cluster block, syncing every second
// on the real clock against an embedded etcd, its record sliced) and on
// one without the block, interleaved request by request. It reports ns
// per request of each (medians) and their ratio (x-cluster): decisions
// stay local, so the ratio should be 1 up to noise.
func BenchmarkClusterRequestPath(b *testing.B) {
	ctx := context.Background()
	url := etcdtest.Started(b).URL()
	const pools = `"pools": [{"name": "small", "capacity": 12, "models": ["m"], "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}}}]}`
	start := func(id, cfg string) *host.Host {
		h, err := compiled(b).Start(ctx, host.Options{VMs: 1, PluginName: pluginName, VMID: fmt.Sprintf("%s-%s-%p", b.Name(), id, b),
			PluginConfig: []byte(cfg), Clusters: map[string]string{"etcd": url}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close(ctx) })
		return h
	}
	on := start("on", `{"default_max_tokens": 16, "cluster": {"etcd_cluster": "etcd"}, `+pools)
	off := start("off", `{"default_max_tokens": 16, `+pools)
	eventually(b, "the proxy holds the whole pool", func() (bool, string) {
		ss, seen := slicesOf(b, []*host.Host{on})
		return whole(ss), seen
	})
	body := []byte(chatOfSize(1 << 10))
	resp := shortCompletion
	hdrs, rh := chatHeaders(body, resp)
	one := func(h *host.Host) time.Duration {
		t0 := time.Now()
		s := exchange(h, 0, hdrs, body, rh, resp)
		d := time.Since(t0)
		if s.LocalReply() != nil {
			b.Fatalf("local reply %+v", s.LocalReply())
		}
		return d
	}
	var dOn, dOff []time.Duration
	for b.Loop() {
		// Alternate which goes first, so that neither always finds the
		// caches the other left.
		if len(dOn)%2 == 0 {
			dOff = append(dOff, one(off))
			dOn = append(dOn, one(on))
		} else {
			dOn = append(dOn, one(on))
			dOff = append(dOff, one(off))
		}
	}
	// Medians: the machine's other load lands on single requests.
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	mOff, mOn := median(dOff), median(dOn)
	b.ReportMetric(mOff, "ns-off/req")
	b.ReportMetric(mOn, "ns-on/req")
	b.ReportMetric(mOn/mOff, "x-cluster")
}

// TestWasmClusterNoCallPerRequest: a proxy's calls to etcd follow its
// syncs, not its requests: at steady state one keepalive, one range and
// one transaction per pool per sync, however many requests it serves.
func TestWasmClusterNoCallPerRequest(t *testing.T) {
	url := etcdtest.Started(t).URL()
	c := newCutProxy(t, url)
	h := startReplica(t, c.srv.URL, "r0", 2)
	eventually(t, "the proxy holds the whole pool", func() (bool, string) {
		ss, seen := slicesOf(t, []*host.Host{h})
		return whole(ss), seen
	})
	snap := func() (ka, rg, tx int64) {
		return c.count("/v3/lease/keepalive"), c.count("/v3/kv/range"), c.count("/v3/kv/txn")
	}
	ka0, rg0, tx0 := snap()
	for i := range 200 {
		s := request(h, i%2, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
		respondJSON(s, 10, 5)
	}
	// Wait for a few more syncs, then compare.
	eventually(t, "five more keepalives", func() (bool, string) {
		ka, _, _ := snap()
		return ka >= ka0+5, fmt.Sprint(ka - ka0)
	})
	ka, rg, tx := snap()
	dk, dr, dt := ka-ka0, rg-rg0, tx-tx0
	// A sync may be under way at either snapshot: one call of slack.
	if dr < dk-1 || dr > dk+1 || dt < dk-1 || dt > dk+1 {
		t.Errorf("over 200 requests: %d keepalives, %d ranges, %d transactions; want one range and one transaction per keepalive", dk, dr, dt)
	}
}

// failoverProxy sends each call to the first etcd member that answers, as
// an Envoy cluster of three endpoints with outlier detection does.
func failoverProxy(t *testing.T, members []string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		for _, m := range members {
			resp, err := http.Post(m+r.URL.Path, "application/json", bytes.NewReader(body))
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			w.Write(b)
			return
		}
		http.Error(w, "no etcd member answers", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestWasmClusterEtcdMemberLoss: three proxies on a 3-member etcd; the
// member that leads stops: no proxy's slice changes, and slices still follow demand
// (the two remaining members keep a quorum).
func TestWasmClusterEtcdMemberLoss(t *testing.T) {
	ms, err := etcdtest.NewCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := etcdtest.StartAll(ms); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, m := range ms {
		t.Cleanup(m.Stop)
		urls = append(urls, m.URL())
	}
	url := failoverProxy(t, urls).URL
	var hs []*host.Host
	for i := range 3 {
		r := fmt.Sprint("r", i)
		// A lease longer than an etcd leader election (about a second).
		hs = append(hs, startReplicaConfig(t, url, r, 1, clusterConfigTTL(r, "5s")))
	}
	even := func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		_, each := capacities(ss)
		return whole(ss) && slices.Equal(each, []int{4, 4, 4}), seen
	}
	eventually(t, "an even split", even)
	// Stop the Raft leader: the others elect a new one.
	leader := slices.IndexFunc(ms, (*etcdtest.Server).IsLeader)
	if leader < 0 {
		t.Fatal("no etcd member is the leader")
	}
	ms[leader].Stop()
	// Through the election and five syncs of every proxy after it.
	throughSyncs(t, hs, 5, func() {
		if ok, seen := even(); !ok {
			t.Fatalf("after an etcd member stopped the slices changed: %s", seen)
		}
	})
	var open []*host.Stream
	for range 5 {
		open = append(open, request(hs[1], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, "")))
	}
	// a's demand (5) at r1, the rest of its 6 as headroom where the
	// traffic is (r1 has all of it).
	eventually(t, "a's reservation follows its demand to r1", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		return whole(ss) && ss[1].Reserved[0] == 6 && ss[0].Reserved[0] == 0, seen
	})
	for _, s := range open {
		respondJSON(s, 1, 1)
	}
}

// TestWasmClusterFlowControlBound: with flow control, three proxies never
// have more than the pool's 12 borrowers in flight between them, while
// each holds 8 requests of team b (24 in all, none finishing): the
// slices split the capacity by demand and every borrower beyond waits at
// its proxy. b (3 reserved) arrives from idle, so every proxy may have
// lent it up to fairshare.MaxLoan within-share requests before its next
// sync: b's within-share requests stay within 3 + 2·3 (the loans'
// bound), and the requests in flight within 12 + those beyond b's
// reservation (lent requests take the room of borrowers at their proxy,
// but a proxy whose slice shrinks keeps them).
func TestWasmClusterFlowControlBound(t *testing.T) {
	url := etcdtest.Started(t).URL()
	var hs []*host.Host
	for i := range 3 {
		r := fmt.Sprint("r", i)
		cfg := strings.Replace(clusterConfig(r), `"tick": "100ms",`, `"tick": "100ms", "max_queue_time": "60s",`, 1)
		hs = append(hs, startReplicaConfig(t, url, r, 1, cfg))
	}
	eventually(t, "all registered", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		_, each := capacities(ss)
		return whole(ss) && !slices.Contains(each, 0), seen
	})
	var open []*host.Stream
	for _, h := range hs {
		for range 8 {
			open = append(open, request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 10, "")))
		}
	}
	const reserved, lent = 3, fairshare.MaxLoan * 3
	check := func() (int, string) {
		n, borrowing := 0, 0
		var seen []string
		for i, h := range hs {
			st := teamStats(t, h, "small")["b"]
			n += st.InFlight
			borrowing += st.Borrowing
			seen = append(seen, fmt.Sprintf("r%d: %d in flight (%d borrowing), %d waiting", i, st.InFlight, st.Borrowing, st.Waiting))
		}
		within := n - borrowing
		switch {
		case borrowing > 12:
			t.Fatalf("%d borrowers in flight across the proxies, more than the pool's 12: %s", borrowing, strings.Join(seen, "; "))
		case within > reserved+lent:
			t.Fatalf("%d of b's requests within share across the proxies, more than its %d reserved + %d lent: %s", within, reserved, lent, strings.Join(seen, "; "))
		case n > 12+max(0, within-reserved):
			t.Fatalf("%d requests in flight across the proxies, more than the pool's 12 + the %d lent beyond b's reservation: %s", n, within-reserved, strings.Join(seen, "; "))
		}
		return n, strings.Join(seen, "; ")
	}
	eventually(t, "the pool's 12 in flight", func() (bool, string) {
		n, seen := check()
		return n >= 12, seen
	})
	throughSyncs(t, hs, 10, func() { check() }) // ten more syncs of each proxy, the bounds checked all along
	for _, s := range open {
		s.Reset()
	}
}

// TestWasmClusterUsageSurvivesRestart: usage charged on two proxies
// survives a restart of both (new processes, empty shared data, the same
// replica names): the new proxies restore it from etcd, each its own
// contribution and the other's.
func TestWasmClusterUsageSurvivesRestart(t *testing.T) {
	url := etcdtest.Started(t).URL()
	usageOf := func(hs []*host.Host) ([]float64, string) {
		var us []float64
		for _, h := range hs {
			us = append(us, teamStats(t, h, "small")["a"].Usage)
		}
		return us, fmt.Sprint(us)
	}
	hs := []*host.Host{startReplica(t, url, "r0", 1), startReplica(t, url, "r1", 1)}
	eventually(t, "both registered", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		return whole(ss) && ss[0].Capacity > 0 && ss[1].Capacity > 0, seen
	})
	for i, h := range hs {
		for range 3 * (i + 1) {
			respondJSON(request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, "")), 100, 50)
		}
	}
	const want = 9 * 200.0 // 9 requests of 100 + 2 × 50
	merged := func(hs []*host.Host) func() (bool, string) {
		return func() (bool, string) {
			us, seen := usageOf(hs)
			for _, u := range us {
				if math.Abs(u-want) > 1e-4*want {
					return false, seen
				}
			}
			return true, seen
		}
	}
	eventually(t, "usage merged on both", merged(hs))
	for _, h := range hs {
		h.Close(context.Background())
	}
	// New processes: new VM ids (empty shared data), the same names.
	restarted := []*host.Host{startReplicaConfig(t, url, "r0", 1, clusterConfig("r0")), startReplicaConfig(t, url, "r1", 1, clusterConfig("r1"))}
	eventually(t, "usage restored on both", merged(restarted))
	// And it stays (a restored contribution is published again, not lost)
	// through a few more syncs of each proxy.
	throughSyncs(t, restarted, 5, func() {
		if ok, seen := merged(restarted)(); !ok {
			t.Fatalf("usage after a few more syncs = %s, want %v on both", seen, want)
		}
	})
}

// BenchmarkClusterFollowDemand measures how long slices take to follow a
// demand shift: three proxies syncing every 100 ms against an embedded
// etcd; each iteration opens 5 requests of team a at one proxy (in turn)
// and times until that proxy holds a's whole reservation, then ends them.
// It reports the time per shift and its ratio to the sync interval
// (x-sync): the rule needs one sync of the proxy that shrinks and one of
// the proxy that grows.
func BenchmarkClusterFollowDemand(b *testing.B) {
	url := etcdtest.Started(b).URL()
	var hs []*host.Host
	for i := range 3 {
		r := fmt.Sprint("r", i)
		h, err := compiled(b).Start(context.Background(), host.Options{VMs: 1, PluginName: pluginName,
			VMID: fmt.Sprintf("%s-%s-%p", b.Name(), r, b), PluginConfig: []byte(clusterConfig(r)), Clusters: map[string]string{"etcd": url}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close(context.Background()) })
		hs = append(hs, h)
	}
	eventually(b, "an even split", func() (bool, string) {
		ss, seen := slicesOf(b, hs)
		_, each := capacities(ss)
		return whole(ss) && slices.Equal(each, []int{4, 4, 4}), seen
	})
	var total time.Duration
	n := 0
	for b.Loop() {
		k := n % 3
		var open []*host.Stream
		t0 := time.Now()
		for range 5 {
			open = append(open, request(hs[k], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, "")))
		}
		for {
			s, ok := pool(b, hs[k], "small").Slice()
			if ok && len(s.Reserved) > 0 && s.Reserved[0] >= 5 {
				break
			}
			if time.Since(t0) > time.Minute {
				b.Fatalf("r%d's slice never followed its demand: %+v", k, s)
			}
			time.Sleep(time.Millisecond)
		}
		total += time.Since(t0)
		for _, s := range open {
			respondJSON(s, 1, 1)
		}
		n++
	}
	per := total / time.Duration(n)
	b.ReportMetric(float64(per.Milliseconds()), "ms/shift")
	b.ReportMetric(float64(per)/float64(100*time.Millisecond), "x-sync")
}

// etcdKeys returns the keys under prefix in the etcd at url.
func etcdKeys(t *testing.T, url, prefix string) []string {
	t.Helper()
	end := []byte(prefix)
	end[len(end)-1]++
	body := fmt.Sprintf(`{"key":%q,"range_end":%q,"keys_only":true}`,
		base64.StdEncoding.EncodeToString([]byte(prefix)), base64.StdEncoding.EncodeToString(end))
	resp, err := http.Post(url+"/v3/kv/range", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("range %s: %v", prefix, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var keys []string
	for _, k := range gjson.GetBytes(b, "kvs.#.key").Array() {
		d, _ := base64.StdEncoding.DecodeString(k.String())
		keys = append(keys, string(d))
	}
	return keys
}

// TestWasmClusterDepartedUsage: the usage key of a replica gone from
// etcd is folded into the pool's departed key and deleted, without
// losing or doubling any usage. r2 charges, then is cut off past its
// lease: a survivor folds its key; r2 charges more while cut off and
// comes back: every proxy ranks on the sum of all charges, counted once.
// Then r2 dies for good: its key is folded again and the two survivors
// still rank on the sum.
func TestWasmClusterDepartedUsage(t *testing.T) {
	url := etcdtest.Started(t).URL()
	cut := newCutProxy(t, url)
	hs := []*host.Host{startReplica(t, url, "r0", 1), startReplica(t, url, "r1", 1), startReplica(t, cut.srv.URL, "r2", 1)}
	eventually(t, "all registered", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		_, each := capacities(ss)
		return whole(ss) && !slices.Contains(each, 0), seen
	})
	charge := func(h *host.Host, n int) {
		for range n {
			respondJSON(request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, "")), 100, 50)
		}
	}
	// Each request costs 100 + 2 × 50.
	charge(hs[0], 1)
	charge(hs[1], 2)
	charge(hs[2], 3)
	want := 6 * 200.0
	ranks := func(hs []*host.Host) func() (bool, string) {
		return func() (bool, string) {
			var us []float64
			ok := true
			for _, h := range hs {
				u := teamStats(t, h, "small")["a"].Usage
				us = append(us, u)
				ok = ok && math.Abs(u-want) <= 1e-4*want
			}
			return ok, fmt.Sprintf("usage of a %v, want %v", us, want)
		}
	}
	eventually(t, "every proxy ranks on the sum", ranks(hs))
	const pre = "/fairshare/small/"
	keys := func() string { return strings.Join(etcdKeys(t, url, pre), " ") }
	folded := func() (bool, string) {
		k := keys()
		return strings.Contains(k, pre+"departed") && !strings.Contains(k, pre+"u/r2"), k
	}

	cut.cut.Store(true)
	eventually(t, "r2's usage key folded into departed", folded)
	charge(hs[2], 2)
	want += 2 * 200
	cut.cut.Store(false)
	eventually(t, "r2 back: every proxy ranks on the sum, r2's key written anew", func() (bool, string) {
		ok, seen := ranks(hs)()
		return ok && strings.Contains(keys(), pre+"u/r2"), seen + "; keys " + keys()
	})
	// And it stays (nothing counted twice at later syncs) through a few
	// more syncs of each proxy.
	throughSyncs(t, hs, 5, func() {
		if ok, seen := ranks(hs)(); !ok {
			t.Fatalf("after a few more syncs: %s", seen)
		}
	})

	hs[2].Close(context.Background())
	eventually(t, "dead r2's key folded", folded)
	charge(hs[0], 1)
	want += 200
	eventually(t, "the survivors rank on the sum", ranks(hs[:2]))
}

// TestWasmClusterThroughputSlices: with a work reservation, each proxy's
// slice carries its part of every team's rate, following the team's
// reserved sequences there (⌊W·s/R⌋), so the parts never add up to more
// than the team's share of the throughput: idle, a's 600 units/s are
// split as its 6 sequences are; with a's demand all at r0, r0 holds all of
// it and the others none.
func TestWasmClusterThroughputSlices(t *testing.T) {
	url := etcdtest.Started(t).URL()
	var hs []*host.Host
	for i, r := range []string{"r0", "r1", "r2"} {
		cfg := strings.Replace(clusterConfig(r), `"capacity": 12,`, `"capacity": 12, "throughput": 1200,`, 1)
		hs = append(hs, startReplicaConfig(t, url, r, 1+boolInt(i == 0), cfg))
	}
	want := map[string]struct{ w, r int64 }{"a": {600, 6}, "b": {300, 3}}
	carried := func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		if !whole(ss) {
			return false, seen
		}
		for k, team := range []string{"a", "b"} {
			var sum int64
			for i, h := range hs {
				got := teamStats(t, h, "small")[team].ReservedWork
				if w := want[team].w * int64(ss[i].Reserved[k]) / want[team].r; got != w {
					return false, fmt.Sprintf("%s at r%d: reserved work %d, want %d for %d of its %d sequences; %s", team, i, got, w, ss[i].Reserved[k], want[team].r, seen)
				}
				sum += got
			}
			if sum > want[team].w {
				return false, fmt.Sprintf("%s's reserved work sums to %d over the proxies, more than its %d", team, sum, want[team].w)
			}
		}
		return true, seen
	}
	eventually(t, "idle proxies carry every team's work as its sequences", carried)
	var open []*host.Stream
	for range 5 {
		open = append(open, request(hs[0], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, "")))
	}
	eventually(t, "a's work follows its sequences to r0", func() (bool, string) {
		ok, seen := carried()
		return ok && teamStats(t, hs[0], "small")["a"].ReservedWork == 600, seen
	})
	for _, s := range open {
		respondJSON(s, 10, 10)
	}
}

// boolInt is 1 for true, 0 for false.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestWasmClusterUsers: with user_header, every proxy ranks a team's
// users on their usage across the pool: ann's requests at r0 and bob's
// at r1 and r2 are summed into every proxy's record, a proxy that never
// saw a user included, so that every proxy ranks bob (less used) before
// ann; the team's usage is its users' sum.
func TestWasmClusterUsers(t *testing.T) {
	url := etcdtest.Started(t).URL()
	var hs []*host.Host
	for _, r := range []string{"r0", "r1", "r2"} {
		cfg := strings.Replace(clusterConfig(r), `"tick": "100ms",`, `"tick": "100ms", "user_header": "x-user",`, 1)
		hs = append(hs, startReplicaConfig(t, url, r, 1, cfg))
	}
	eventually(t, "all registered", func() (bool, string) {
		ss, seen := slicesOf(t, hs)
		return whole(ss), seen
	})
	charge := func(h *host.Host, user string, n int) {
		for range n {
			respondJSON(request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}, {"x-user", user}}, chat("m", 10, "")), 100, 50)
		}
	}
	// Each request costs 100 + 2 × 50: ann 3 × 200 at r0, bob 1 × 200 at
	// r1 and 1 × 200 at r2. Usage decays (half-life 1h): the users'
	// fractions of the team's are compared, 0.6 and 0.4.
	charge(hs[0], "ann", 3)
	charge(hs[1], "bob", 1)
	charge(hs[2], "bob", 1)
	want := map[string]float64{"ann": 0.6, "bob": 0.4}
	eventually(t, "every proxy knows ann's and bob's usage in the pool", func() (bool, string) {
		ok := true
		var seen []string
		for i, h := range hs {
			s := teamStats(t, h, "small")["a"]
			us := map[string]float64{}
			rank := map[string]int{}
			for _, u := range s.Users {
				us[u.User] = u.Usage / s.Usage
				rank[u.User] = u.Rank
			}
			seen = append(seen, fmt.Sprintf("r%d %v (team %v)", i, us, s.Usage))
			for name, w := range want {
				ok = ok && math.Abs(us[name]-w) <= 1e-6
			}
		}
		return ok, strings.Join(seen, "; ")
	})
	// At r1, which never served ann, both become active: bob, who used
	// less, ranks first; so does he at r0, which never served bob.
	for _, h := range hs[:2] {
		var open []*host.Stream
		for _, u := range []string{"ann", "bob"} {
			open = append(open, request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}, {"x-user", u}}, chat("m", 10, "")))
		}
		rank := map[string]int{}
		for _, u := range teamStats(t, h, "small")["a"].Users {
			if !u.Active {
				t.Errorf("%s inactive with a request in flight", u.User)
			}
			rank[u.User] = u.Rank
		}
		if rank["bob"] != 0 || rank["ann"] != 1 {
			t.Errorf("ranks %v, want bob 0, ann 1", rank)
		}
		for _, s := range open {
			respondJSON(s, 1, 0)
		}
	}
}
