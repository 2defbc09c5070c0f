package plugin

import (
	"bytes"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/tidwall/gjson"
)

// TestAgreeCapacity: the fleet's C and K from the members' readings, the
// rule of fleetcap.go, one case per clause.
func TestAgreeCapacity(t *testing.T) {
	const s = int64(time.Second)
	expire := 6 * time.Second
	e := func(addr string, read, fail int64, cores int) engineObs {
		return engineObs{addr: addr, read: read, fail: fail, cores: cores, seqs: 8, kv: int64(cores) * 1000}
	}
	for _, tc := range []struct {
		name    string
		reports []fleetReport
		c       int
		kv      int64
		n       int
	}{
		{"no reports", nil, 0, 0, 0},
		{"one replica, two engines", []fleetReport{{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1), e("y", 9*s, 0, 2)}}}, 24, 3000, 3},
		{"an engine only one replica read counts at all", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1)}},
			{id: "b", at: 10 * s, engines: []engineObs{e("x", 8*s, 0, 1), e("y", 8*s, 0, 1)}}}, 16, 2000, 2},
		{"the freshest observation wins: a later read of fewer cores", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 7*s, 0, 2)}},
			{id: "b", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1)}}}, 8, 1000, 1},
		{"a later failure at another replica takes the engine out", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 8*s, 0, 1), e("y", 8*s, 0, 1)}},
			{id: "b", at: 10 * s, engines: []engineObs{e("x", 7*s, 9*s, 1)}}}, 8, 1000, 1},
		{"a tie goes to the member whose ID sorts first", []fleetReport{
			{id: "b", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1)}},
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 3)}}}, 24, 3000, 3},
		{"a reading older than expire before the newest report is out", []fleetReport{
			{id: "a", at: 20 * s, engines: []engineObs{e("x", 19*s, 0, 1)}},
			{id: "b", at: 13 * s, engines: []engineObs{e("y", 13*s, 0, 1)}}}, 8, 1000, 1},
		{"an engine whose cores all sleep counts for nothing", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1), e("y", 9*s, 0, 0)}}}, 8, 1000, 1},
		{"nothing fresh", []fleetReport{{id: "a", at: 10 * s, engines: []engineObs{e("x", 0, 9*s, 1)}}}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, kv, n := agreeCapacity(expire, tc.reports)
			if c != tc.c || kv != tc.kv || n != tc.n {
				t.Errorf("agreeCapacity = %d, %d, %d; want %d, %d, %d", c, kv, n, tc.c, tc.kv, tc.n)
			}
			// Every replica computes the same from the same reports,
			// whatever order it read them in.
			rev := slices.Clone(tc.reports)
			slices.Reverse(rev)
			for i := range rev {
				rev[i].engines = slices.Clone(rev[i].engines)
				slices.Reverse(rev[i].engines)
			}
			if c2, kv2, n2 := agreeCapacity(expire, rev); c2 != c || kv2 != kv || n2 != n {
				t.Errorf("reversed reports: agreeCapacity = %d, %d, %d; want %d, %d, %d", c2, kv2, n2, c, kv, n)
			}
		})
	}
}

// TestFleetReportRoundTrip: the readings a member report carries decode
// as written, peaks included; a report without them (a proxy without
// capacity_from) says so; a report of a replica that does not publish
// peaks reads as engines without one, and one that does reads, for a
// replica that does not know them, as the engines alone.
func TestFleetReportRoundTrip(t *testing.T) {
	r := fleetReport{id: "r1", at: 42, engines: []engineObs{
		{addr: "10.0.0.5:8000", read: 40, fail: 0, cores: 2, seqs: 256, kv: 1 << 20, peak: 1234.5},
		{addr: "local/r1", read: 0, fail: 41, cores: 0, seqs: 8, kv: 0},
	}}
	b := appendFleet([]byte(`{"teams":[]}`), r)
	got, ok := decodeFleet("r1", b)
	if !ok || !reflect.DeepEqual(got, r) {
		t.Errorf("decodeFleet(appendFleet(%+v)) = %+v, %v (%s)", r, got, ok, b)
	}
	// The engines as a replica before peaks wrote and read them.
	noPeaks := slices.Clone(r.engines)
	for i := range noPeaks {
		noPeaks[i].peak = 0
	}
	old := appendFleet([]byte(`{"teams":[]}`), fleetReport{id: "r1", at: 42, engines: noPeaks})
	if bytes.Contains(old, []byte("peaks")) {
		t.Errorf("a report of no peak carries them: %s", old)
	}
	if got, ok := decodeFleet("r1", old); !ok || !reflect.DeepEqual(got.engines, noPeaks) {
		t.Errorf("report without peaks: %+v, want the engines without one", got)
	}
	if e := gjson.GetBytes(b, "engines").Array(); len(e) != 2 || len(e[0].Array()) != 6 {
		t.Errorf("the engines of a report with peaks are not as before: %s", b)
	}
	for _, bad := range []string{`[-1, 5]`, `["x", 5]`, `[1e300]`} {
		rb := []byte(strings.Replace(string(b), `"peaks":[1234.5,0]`, `"peaks":`+bad, 1))
		if got, _ := decodeFleet("r1", rb); len(got.engines) != 2 || got.engines[0].peak != 0 {
			t.Errorf("decodeFleet(%s) = %+v, want the first engine without a peak", rb, got)
		}
	}
	if _, ok := decodeFleet("r1", []byte(`{"teams":[]}`)); ok {
		t.Error("decodeFleet of a report without readings reports some")
	}
	for _, bad := range []string{`{"cap_at":1,"engines":[["x",1,2]]}`, `{"cap_at":1,"engines":[[5,1,2,3,4,5]]}`, `not json`} {
		if got, _ := decodeFleet("r1", []byte(bad)); len(got.engines) != 0 {
			t.Errorf("decodeFleet(%s) = %+v, want no engine", bad, got)
		}
	}
}

// TestOwnReportLocalEngine: a sidecar's one engine is keyed by its
// replica, so the fleet sums the proxies' engines.
func TestOwnReportLocalEngine(t *testing.T) {
	now := time.Unix(100, 0)
	cf := &capacityFrom{expire: 6 * time.Second, maxNumSeqs: 8}
	set := &engineSet{engines: map[string]*engineEntry{localEngine: {read: now.UnixNano() - 1, r: engineReading{cores: 1, kvTokens: 1000}}}}
	a, b := ownReport(now, "a", cf, set), ownReport(now, "b", cf, set)
	if c, kv, n := agreeCapacity(cf.expire, []fleetReport{a, b}); c != 16 || kv != 2000 || n != 2 {
		t.Errorf("two sidecars of one engine each: agreeCapacity = %d, %d, %d; want 16, 2000, 2 (%+v, %+v)", c, kv, n, a, b)
	}
	old := &engineSet{engines: map[string]*engineEntry{"10.0.0.1:80": {read: now.UnixNano() - int64(7*time.Second), r: engineReading{cores: 1}}}}
	if r := ownReport(now, "a", cf, old); len(r.engines) != 0 {
		t.Errorf("an engine last read 7 s ago (expire 6 s) published: %+v", r)
	}
}

// TestEngineSleepState: an engine core asleep (vllm:engine_sleep_state
// awake 0) counts for nothing, read from the simulator's /metrics.
func TestEngineSleepState(t *testing.T) {
	cfg := vllmsim.TestConfig()
	sim := vllmsim.NewSim(cfg, 2, 1)
	kv := int64(cfg.NumBlocks * cfg.BlockSize)
	read := func(replica int) engineReading {
		t.Helper()
		var b bytes.Buffer
		sim.WriteMetrics(&b, "m", replica)
		r, err := parseEngineMetrics(b.Bytes())
		if err != nil {
			t.Fatalf("parseEngineMetrics: %v\n%s", err, b.String())
		}
		return r
	}
	if r := read(0); r.cores != 1 || r.asleep != 0 || r.kvTokens != kv {
		t.Errorf("awake engine: %+v, want 1 core, %d tokens", r, kv)
	}
	for _, level := range []int{1, 2} {
		sim.SetSleepLevel(0, level)
		var b bytes.Buffer
		sim.WriteMetrics(&b, "m", 0)
		if !strings.Contains(b.String(), `sleep_state="awake"} 0.0`) {
			t.Fatalf("level %d: the simulator does not export the sleep:\n%s", level, b.String())
		}
		if r := read(0); r.cores != 0 || r.asleep != 1 || r.kvTokens != 0 {
			t.Errorf("engine asleep at level %d: %+v, want 0 cores, 1 asleep, 0 tokens", level, r)
		}
		if r := read(1); r.cores != 1 {
			t.Errorf("the other engine: %+v, want 1 core", r)
		}
	}
	sim.SetSleepLevel(0, 0)
	if r := read(0); r.cores != 1 || r.asleep != 0 {
		t.Errorf("woken engine: %+v, want 1 core", r)
	}
}

// TestEngineSleepStateDataParallel: one core of two asleep takes out its
// own KV tokens, whatever the order of the series.
func TestEngineSleepStateDataParallel(t *testing.T) {
	for _, order := range []bool{false, true} {
		info := `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="200"} 1.0
`
		sleep := `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0
vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="awake"} 0.0
vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="weights_offloaded"} 1.0
`
		text := info + sleep
		if order {
			text = sleep + info
		}
		r, err := parseEngineMetrics([]byte(text))
		if err != nil || r.cores != 1 || r.asleep != 1 || r.kvTokens != 1600 {
			t.Errorf("sleep series first %v: %+v, %v; want 1 core awake (1600 tokens), 1 asleep", order, r, err)
		}
	}
}

// TestFleetConfig: capacity_from with the cluster block is accepted, and
// an expire that does not cover the poll and sync intervals, set or by
// default, is refused with its path.
func TestFleetConfig(t *testing.T) {
	cfg := func(expire string) string {
		return `{"cluster": {"etcd_cluster": "etcd", "sync_interval": "1s"},
  "pools": [{"name": "p", "capacity": 4, "models": ["m"], "teams": {"a": {"share": 1}},
    "capacity_from": {"cluster": "engines", "engines": "learned", "interval": "500ms", "timeout": "100ms"` + expire + `}}]}`
	}
	c, err := parse([]byte(cfg("")))
	if err != nil {
		t.Fatalf("capacity_from with the cluster block: %v", err)
	}
	if !c.fleetPool(&c.pools[0]) {
		t.Error("fleetPool = false, want true")
	}
	if cc := c.coreConfig(&c.pools[0]); cc.Capacity != fleetCeilingC || cc.KVTokens != 0 {
		t.Errorf("core config capacity %d, kv %d; want the ceiling %d and no KV resource", cc.Capacity, cc.KVTokens, fleetCeilingC)
	}
	for _, bad := range []string{`, "expire": "1s"`, `, "interval": "200ms"`} {
		s := strings.Replace(cfg(bad), `"interval": "500ms", `, "", strings.Count(bad, "interval"))
		_, err = parse([]byte(s))
		want := "pools[0].capacity_from.expire: must be at least interval + cluster.sync_interval"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse(%s) = %v, want %q", s, err, want)
		}
	}
	// A work reservation with them: accepted, the record's X a ceiling
	// as its C is (the fleet agrees on X, fleetcap.go).
	s := strings.Replace(cfg(""), `"capacity": 4,`, `"capacity": 4, "throughput": 5000,`, 1)
	c, err = parse([]byte(s))
	if err != nil {
		t.Fatalf("throughput with capacity_from under the cluster block: %v", err)
	}
	if cc := c.coreConfig(&c.pools[0]); cc.Throughput != fleetCeilingX || cc.Capacity != fleetCeilingC {
		t.Errorf("core config throughput %d, capacity %d; want the ceilings %d, %d", cc.Throughput, cc.Capacity, int64(fleetCeilingX), fleetCeilingC)
	}
	if cc := c.coreConfig(&c.pools[0]); cc.Throughput == 0 {
		t.Error("the work resource is not declared")
	}
}

// TestAgreeThroughput: the fleet's X from the peaks the members publish,
// the rule of fleetcap.go, one case per clause; every order of the
// reports gives the same.
func TestAgreeThroughput(t *testing.T) {
	const s = int64(time.Second)
	expire := 6 * time.Second
	e := func(addr string, read, fail int64, cores int, peak float64) engineObs {
		return engineObs{addr: addr, read: read, fail: fail, cores: cores, seqs: 8, kv: 1000, peak: peak}
	}
	// 10 minutes is the peaks' half-life.
	const hl = int64(10 * time.Minute)
	for _, tc := range []struct {
		name    string
		reports []fleetReport
		x       int64
		n       int
	}{
		{"no reports", nil, 0, 0},
		{"no peak yet: the configuration", []fleetReport{{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 0), e("y", 9*s, 0, 1, 0)}}}, 0, 0},
		{"two engines' peaks summed", []fleetReport{{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 1000), e("y", 9*s, 0, 1, 500)}}}, 1500, 2},
		{"one engine measured of two: its peak alone, as on one proxy", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 1000), e("y", 9*s, 0, 1, 0)}}}, 1000, 1},
		{"engines of several replicas summed", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("local/a", 9*s, 0, 1, 1000)}},
			{id: "b", at: 10 * s, engines: []engineObs{e("local/b", 9*s, 0, 1, 2000)}},
			{id: "c", at: 10 * s, engines: []engineObs{e("local/c", 9*s, 0, 1, 0)}}}, 3000, 2},
		{"one engine read by two replicas counts once, at the higher peak", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 1200)}},
			{id: "b", at: 10 * s, engines: []engineObs{e("x", 8*s, 0, 1, 1000)}}}, 1200, 1},
		{"the higher peak counts though another replica read the engine later", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 7*s, 0, 1, 1000)}},
			{id: "b", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 0)}}}, 1000, 1},
		{"a later failure at another replica takes the engine and its peak out", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 8*s, 0, 1, 1000), e("y", 8*s, 0, 1, 700)}},
			{id: "b", at: 10 * s, engines: []engineObs{e("x", 7*s, 9*s, 1, 0)}}}, 700, 1},
		{"an engine whose cores all sleep counts for nothing", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 1000), e("y", 9*s, 0, 0, 900)}}}, 1000, 1},
		{"a reading older than expire before the newest report is out", []fleetReport{
			{id: "a", at: 20 * s, engines: []engineObs{e("x", 19*s, 0, 1, 1000)}},
			{id: "b", at: 13 * s, engines: []engineObs{e("y", 13*s, 0, 1, 900)}}}, 1000, 1},
		{"a peak decays from its report's time to the newest report's", []fleetReport{
			{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 0)}},
			{id: "b", at: 10*s - hl, engines: []engineObs{e("x", 0, 0, 0, 1000)}}}, 500, 1},
		{"only the engines out: nothing", []fleetReport{{id: "a", at: 10 * s, engines: []engineObs{e("x", 0, 9*s, 1, 1000)}}}, 0, 0},
		{"below one cost unit a second: the configuration", []fleetReport{{id: "a", at: 10 * s, engines: []engineObs{e("x", 9*s, 0, 1, 0.4)}}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, n := agreeThroughput(expire, tc.reports)
			if x != tc.x || n != tc.n {
				t.Errorf("agreeThroughput = %d, %d; want %d, %d", x, n, tc.x, tc.n)
			}
			rev := slices.Clone(tc.reports)
			slices.Reverse(rev)
			for i := range rev {
				rev[i].engines = slices.Clone(rev[i].engines)
				slices.Reverse(rev[i].engines)
			}
			if x2, n2 := agreeThroughput(expire, rev); x2 != x || n2 != n {
				t.Errorf("reversed reports: agreeThroughput = %d, %d; want %d, %d", x2, n2, x, n)
			}
		})
	}
}

// TestOwnReportPeaks: a replica publishes every engine's peak decayed to
// the report's time, and the fleet's X from two sidecars is the sum of
// their engines' peaks, as one proxy's X is of its engines'.
func TestOwnReportPeaks(t *testing.T) {
	now := time.Unix(1000, 0)
	cf := &capacityFrom{expire: 6 * time.Second, maxNumSeqs: 8}
	at := now.UnixNano() - int64(throughputHalfLife)
	set := func(peak float64) *engineSet {
		return &engineSet{engines: map[string]*engineEntry{localEngine: {read: now.UnixNano() - 1, r: engineReading{cores: 1}, peak: peak, peakAt: at}}}
	}
	a, b := ownReport(now, "a", cf, set(2000)), ownReport(now, "b", cf, set(600))
	if len(a.engines) != 1 || math.Abs(a.engines[0].peak-1000) > 1e-6 {
		t.Fatalf("published peak %+v, want 2000 decayed over one half-life: 1000", a.engines)
	}
	if x, n := agreeThroughput(cf.expire, []fleetReport{a, b}); x != 1300 || n != 2 {
		t.Errorf("two sidecars: agreeThroughput = %d, %d; want 1300, 2", x, n)
	}
	// One proxy's rule over the same engines gives the same.
	one := &engineSet{engines: map[string]*engineEntry{"x": set(2000).engines[localEngine], "y": set(600).engines[localEngine]}}
	if x, n := throughputSum(now, cf, 5, one); x != 1300 || n != 2 {
		t.Errorf("one proxy: throughputSum = %d, %d; want 1300, 2", x, n)
	}
}
