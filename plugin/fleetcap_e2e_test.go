//go:build !wasip1

package plugin_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/etcdtest"
	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/tidwall/gjson"
)

// The fleet's capacity: proxies of a cluster that read their engines'
// /metrics (capacity_from) agree on one C and K, and their slices follow
// it (fleetcap.go). Two simulated vLLM servers of one engine each (8
// sequences a core), read by every proxy through an ORIGINAL_DST
// cluster; the pool's configured capacity (4) is only the fallback.

// fleetEngines starts n simulated vLLM servers and returns them with
// their addresses ("127.0.0.1:port").
func fleetEngines(t *testing.T, n int) ([]*vllmsim.Server, []string) {
	t.Helper()
	var srvs []*vllmsim.Server
	var addrs []string
	for range n {
		s := vllmsim.NewServer(vllmsim.TestConfig(), vllmsim.ServerOptions{Model: "m"})
		t.Cleanup(s.Close)
		hs := httptest.NewServer(s)
		t.Cleanup(hs.Close)
		srvs = append(srvs, s)
		addrs = append(addrs, strings.TrimPrefix(hs.URL, "http://"))
	}
	return srvs, addrs
}

// fleetConfig is clusterConfig's pool (a 0.5, b 0.25) with capacity_from
// over the engines at addrs.
func fleetConfig(replica string, addrs []string) string {
	return `{
  "default_max_tokens": 16,
  "tick": "100ms",
  "status_token": "sesame",
  "cluster": {"etcd_cluster": "etcd", "replica": "` + replica + `", "sync_interval": "100ms", "lease_ttl": "2s", "timeout": "100ms"},
  "pools": [{"name": "small", "capacity": 4, "kv_tokens": 1000, "models": ["m"], "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}},
    "capacity_from": {"cluster": "engines", "engines": "learned", "addresses": ["` + strings.Join(addrs, `", "`) + `"],
      "interval": "200ms", "timeout": "100ms", "max_num_seqs": 8}}]
}`
}

// startFleetReplica starts a proxy of the fleet syncing through etcd at
// url.
func startFleetReplica(t *testing.T, url, replica string, addrs []string) *host.Host {
	t.Helper()
	return startFleetProxy(t, url, replica, fleetConfig(replica, addrs))
}

// startFleetProxy starts a proxy of a fleet syncing through etcd at url
// with the plugin configuration config.
func startFleetProxy(t *testing.T, url, replica, config string) *host.Host {
	t.Helper()
	h, err := compiled(t).Start(context.Background(), host.Options{
		Profile: hostProfile, VMs: 1, PluginName: pluginName, VMID: fmt.Sprintf("%s-%s-%p", t.Name(), replica, t),
		PluginConfig: []byte(config), Clusters: map[string]string{"etcd": url},
		OriginalDst: map[string]string{"engines": ""},
	})
	if err != nil {
		t.Fatalf("start %s: %v", replica, err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	noHostErrors(t, h)
	return h
}

// agreedOf is a proxy's capacity_agreed status object.
func agreedOf(t *testing.T, h *host.Host) gjson.Result {
	t.Helper()
	return gjson.Get(statusBody(t, h), "pools.0.capacity_agreed")
}

// followed reports whether every proxy of hs agreed on capacity c and kv
// tokens kv, is not stale, and their slices add up to the pool of that
// size (reservations as the core apportions c: a ⌊c/2⌋, b ⌊c/4⌋).
func followed(t *testing.T, hs []*host.Host, c int, kv int64) (bool, string) {
	var seen strings.Builder
	sum, tok, a, b := 0, int64(0), 0, 0
	ok := true
	for i, h := range hs {
		ag := agreedOf(t, h)
		s, sliced := pool(t, h, "small").Slice()
		fmt.Fprintf(&seen, "[r%d: agreed %s, slice %+v]", i, ag.Raw, s)
		if !sliced || len(s.Reserved) != 2 || ag.Get("capacity").Int() != int64(c) || ag.Get("kv_tokens").Int() != kv || ag.Get("stale").Bool() {
			ok = false
			continue
		}
		sum, tok, a, b = sum+s.Capacity, tok+s.KVTokens, a+s.Reserved[0], b+s.Reserved[1]
	}
	return ok && sum == c && tok == kv && a == c/2 && b == c/4, seen.String()
}

// TestWasmFleetCapacityFollowsEngines: three proxies read two engines and
// agree on C = 16 (their configured capacity is 4); when one engine goes
// to sleep (it still answers /metrics) every proxy's slices follow to the
// same C = 8, a request in flight keeps its standing, and when it wakes
// they follow back.
func TestWasmFleetCapacityFollowsEngines(t *testing.T) {
	url := etcdtest.Started(t).URL()
	srvs, addrs := fleetEngines(t, 2)
	kv := int64(vllmsim.TestConfig().NumBlocks * vllmsim.TestConfig().BlockSize)
	var hs []*host.Host
	for i := range 3 {
		hs = append(hs, startFleetReplica(t, url, fmt.Sprint("r", i), addrs))
	}
	eventually(t, "the fleet agrees on both engines (C 16) and the slices add up to it", func() (bool, string) {
		return followed(t, hs, 16, 2*kv)
	})
	if pc := gjson.Get(statusBody(t, hs[1]), "pools.0.pool_capacity").Int(); pc != 16 {
		t.Errorf("r1's pool_capacity %d, want the agreed 16", pc)
	}
	if m := hs[2].Metrics()["fairshare.pool.small.capacity_agreed"]; m.Value != 16 {
		t.Errorf("r2's capacity_agreed gauge %d, want 16", m.Value)
	}

	// A request of a at r0, within share, held open across the change.
	s := request(hs[0], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p := priority(t, s); p != 0 {
		t.Fatalf("a's first request: priority %d, want 0 (within share)", p)
	}
	srvs[1].SetSleepLevel(0, 1)
	eventually(t, "the engine asleep stops counting at every proxy (C 8)", func() (bool, string) {
		return followed(t, hs, 8, kv)
	})
	if st := teamStats(t, hs[0], "small")["a"]; st.InFlight != 1 || st.Borrowing != 0 {
		t.Errorf("a's request in flight across the change: %+v, want 1 in flight, within share", st)
	}
	respondJSON(s, 10, 5)

	srvs[1].SetSleepLevel(0, 0)
	eventually(t, "the woken engine counts again (C 16)", func() (bool, string) {
		return followed(t, hs, 16, 2*kv)
	})
}

// TestWasmFleetEtcdLost: a proxy cut off from etcd keeps the last agreed
// C (16) and its slice of it, then fairshare.SafeSlice of it (⌊0.5 × 16
// / 3⌋ = 2) once its lease would have expired, while the two others
// follow an engine going to sleep (C 8); it says so in its status, a
// warning and the capacity_stale gauge; healed, it agrees with them.
func TestWasmFleetEtcdLost(t *testing.T) {
	url := etcdtest.Started(t).URL()
	srvs, addrs := fleetEngines(t, 2)
	kv := int64(vllmsim.TestConfig().NumBlocks * vllmsim.TestConfig().BlockSize)
	var cuts []*cutProxy
	var hs []*host.Host
	for i := range 3 {
		c := newCutProxy(t, url)
		cuts = append(cuts, c)
		hs = append(hs, startFleetReplica(t, c.srv.URL, fmt.Sprint("r", i), addrs))
	}
	// Every proxy holds more than its safe slice (2) once the first to
	// register have shrunk to make room for the last: then r2 has a
	// slice to keep, and to shrink from.
	eventually(t, "the fleet agrees on C 16, every proxy holding a part", func() (bool, string) {
		ok, seen := followed(t, hs, 16, 2*kv)
		for _, h := range hs {
			s, _ := pool(t, h, "small").Slice()
			ok = ok && s.Capacity > 2
		}
		return ok, seen
	})

	cuts[2].cut.Store(true)
	srvs[1].SetSleepLevel(0, 2)
	eventually(t, "r0 and r1 follow to C 8; r2 keeps 16, stale, on its safe slice of it", func() (bool, string) {
		ok, seen := followed(t, hs[:2], 8, kv)
		ag := agreedOf(t, hs[2])
		s, _ := pool(t, hs[2], "small").Slice()
		return ok && ag.Get("capacity").Int() == 16 && ag.Get("stale").Bool() && s.Capacity == 2,
			fmt.Sprintf("%s [r2: agreed %s, slice %+v]", seen, ag.Raw, s)
	})
	if m := hs[2].Metrics()["fairshare.pool.small.capacity_stale"]; m.Value != 1 {
		t.Errorf("r2's capacity_stale gauge %d, want 1", m.Value)
	}
	warned := false
	for _, l := range hs[2].Logs() {
		warned = warned || strings.Contains(l.Message, "etcd unreachable: keeping the last agreed fleet capacity 16")
	}
	if !warned {
		t.Error("r2 never logged that it keeps the last agreed capacity")
	}
	// r2 still decides locally, against its safe slice of the last
	// agreed totals: a's request there runs within share (1 of a).
	s := request(hs[2], 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}}, chat("m", 10, ""))
	if p := priority(t, s); p != 0 {
		t.Errorf("a's request at the cut-off r2: priority %d, want 0 (its safe slice keeps 1 of a)", p)
	}
	respondJSON(s, 1, 1)

	cuts[2].cut.Store(false)
	eventually(t, "healed, r2 agrees with the others on C 8", func() (bool, string) { return followed(t, hs, 8, kv) })
	if m := hs[2].Metrics()["fairshare.pool.small.capacity_stale"]; m.Value != 0 {
		t.Errorf("r2's capacity_stale gauge %d after healing, want 0", m.Value)
	}
}

// rateEngine is a vLLM server's /metrics (one engine core, 1,600 KV
// tokens) with requests always waiting and a prompt-token counter that
// advances at rate tokens a second of the time between reads: a
// saturated engine serving rate cost units a second (prompt tokens at
// weight 1), or, down, answering 503.
type rateEngine struct {
	srv    *httptest.Server
	mu     sync.Mutex
	rate   float64
	prompt float64
	last   time.Time
	down   bool
}

func newRateEngine(t *testing.T, rate float64) *rateEngine {
	e := &rateEngine{rate: rate}
	e.srv = metricsServer(t, &e.mu, func(w io.Writer) bool {
		if e.down {
			return false
		}
		now := time.Now()
		if !e.last.IsZero() {
			e.prompt += e.rate * now.Sub(e.last).Seconds()
		}
		e.last = now
		writeTokenMetrics(w, 4, e.prompt, 0, 0)
		return true
	})
	return e
}

func (e *rateEngine) set(rate float64, down bool) {
	e.mu.Lock()
	e.rate, e.down = rate, down
	e.mu.Unlock()
}

// fleetWorkConfig is fleetConfig's pool declaring throughput 1200 (the
// fallback), every token at weight 1, the engines read every second.
func fleetWorkConfig(replica string, addrs []string) string {
	c := strings.Replace(fleetConfig(replica, addrs), `"capacity": 4,`, `"capacity": 4, "throughput": 1200,`, 1)
	c = strings.Replace(c, `"default_max_tokens": 16,`, `"default_max_tokens": 16, "cost": {"prompt_token": 1, "cached_prompt_token": 1, "completion_token": 1},`, 1)
	return strings.Replace(c, `"interval": "200ms"`, `"interval": "1s"`, 1)
}

// workFollowed reports whether every proxy of hs decides against a
// fleet throughput X in [lo, hi] from n engines (its status's
// throughput, throughput_source, capacity_agreed and throughput gauge
// all saying so), the proxies within 1% of each other, their slices
// adding up to the agreed C (8 sequences an engine), and every team's
// slice rates following its sequences of the agreed totals: at every
// proxy at most ⌊W·s/R⌋ with W and R the team's reservations of that
// proxy's X and C, more than 0 where the team holds seats, and summed
// over the proxies at most W of the largest X.
func workFollowed(t *testing.T, hs []*host.Host, c int, n int, lo, hi int64) (bool, string) {
	var seen strings.Builder
	teams := []fairshare.TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}}
	whole := func(x int64) map[string]fairshare.TeamStat {
		out := map[string]fairshare.TeamStat{}
		for _, s := range fairshare.NewPool("agreed", fairshare.Config{Capacity: c, Throughput: x, Teams: teams}, time.Unix(0, 0)).Snapshot(time.Unix(0, 0)) {
			out[s.Team] = s
		}
		return out
	}
	ok := true
	var xs []int64
	sum := map[string]int64{}
	for i, h := range hs {
		st := gjson.Get(statusBody(t, h), "pools.0")
		x := st.Get("throughput").Int()
		xs = append(xs, x)
		s, sliced := pool(t, h, "small").Slice()
		stats := teamStats(t, h, "small")
		fmt.Fprintf(&seen, "[r%d: throughput %d from %s, agreed %s, slice %+v, work a %d b %d]", i, x, st.Get("throughput_source").String(),
			st.Get("capacity_agreed").Raw, s, stats["a"].ReservedWork, stats["b"].ReservedWork)
		if x < lo || x > hi || st.Get("throughput_source").String() != fmt.Sprintf("engines (%d)", n) ||
			st.Get("capacity_agreed.throughput").Int() != x || st.Get("capacity_agreed.throughput_engines").Int() != int64(n) ||
			st.Get("capacity_agreed.capacity").Int() != int64(c) || !sliced || len(s.Reserved) != 2 {
			ok = false
			continue
		}
		if m := h.Metrics()["fairshare.pool.small.throughput"]; m.Value != x {
			fmt.Fprintf(&seen, "(throughput gauge %d)", m.Value)
			ok = false
		}
		w := whole(x)
		for k, team := range []string{"a", "b"} {
			got, seats := stats[team].ReservedWork, int64(s.Reserved[k])
			if max := w[team].ReservedWork * seats / int64(w[team].Reserved); got > max || seats > 0 && got == 0 {
				fmt.Fprintf(&seen, "(r%d %s: %d for %d seats, want (0, %d])", i, team, got, seats, max)
				ok = false
			}
			sum[team] += got
		}
	}
	if !ok {
		return false, seen.String()
	}
	xmin, xmax := slices.Min(xs), slices.Max(xs)
	if xmax-xmin > xmax/100 {
		return false, seen.String()
	}
	w := whole(xmax)
	for _, team := range []string{"a", "b"} {
		if sum[team] > w[team].ReservedWork {
			fmt.Fprintf(&seen, "(%s's rates sum to %d over the proxies, more than its %d)", team, sum[team], w[team].ReservedWork)
			return false, seen.String()
		}
	}
	ss, _ := slicesOf(t, hs)
	total := 0
	for _, s := range ss {
		total += s.Capacity
	}
	return total == c, seen.String()
}

// TestWasmFleetThroughputFollowsEngines: three proxies of a gateway
// fleet read two saturated engines (4,000 cost units/s each) and agree
// on X from the peaks each measured (about 8,000; the configured 1,200
// is only the fallback); every proxy's slice carries a part of every
// team's rate that follows its sequences of the agreed totals, above 0
// where the team holds seats, the parts adding up to at most the team's
// share of the agreed X. When one engine serves 40,000 a second the
// fleet follows up (about 44,000); when that engine goes down, its peak
// leaves with it (about 4,000, from the other engine alone).
func TestWasmFleetThroughputFollowsEngines(t *testing.T) {
	url := etcdtest.Started(t).URL()
	e0, e1 := newRateEngine(t, 4000), newRateEngine(t, 4000)
	addrs := []string{strings.TrimPrefix(e0.srv.URL, "http://"), strings.TrimPrefix(e1.srv.URL, "http://")}
	var hs []*host.Host
	for i := range 3 {
		r := fmt.Sprint("r", i)
		hs = append(hs, startFleetProxy(t, url, r, fleetWorkConfig(r, addrs)))
	}
	// Timing of the reads against the engines' clock moves a measured
	// rate by a few percent, and a peak keeps the highest: the bands are
	// wide, and no two of them overlap.
	eventually(t, "the fleet agrees on both engines' peaks (X about 8,000) and every slice carries its rates", func() (bool, string) {
		return workFollowed(t, hs, 16, 2, 6000, 12000)
	})
	e0.set(40000, false)
	eventually(t, "the fleet follows an engine serving more (X about 44,000)", func() (bool, string) {
		return workFollowed(t, hs, 16, 2, 36000, 60000)
	})
	e0.set(40000, true)
	eventually(t, "the engine down leaves with its peak (X about 4,000, C 8)", func() (bool, string) {
		return workFollowed(t, hs, 8, 1, 3000, 6000)
	})
}
