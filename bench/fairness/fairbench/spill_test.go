package fairbench

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// routeTo is a pass-through gateway that routes every request to one
// pool (Request.Pool), as the plugin's x-fairshare-pool would.
type routeTo struct {
	passThrough
	pool string
}

func (g *routeTo) Arrive(r *Request) {
	r.Pool = g.pool
	g.d.Submit(r, 0)
}

// spillTestScenario: two pools of one replica each, a team in each.
func spillTestScenario(t *testing.T) *Scenario {
	t.Helper()
	s, err := ParseScenario([]byte(`{"name":"sp","seed":3,"duration_s":10,"engine":{"preset":"test","replicas":3},
	 "teams":[{"name":"a","share":0.5},{"name":"b","share":0.5}],
	 "workloads":[{"team":"a","kind":"poisson","rate":5,"prompt":{"dist":"fixed","mean":16},"output":{"dist":"fixed","mean":8},"interactive":1},
	              {"team":"b","kind":"poisson","rate":5,"prompt":{"dist":"fixed","mean":16},"output":{"dist":"fixed","mean":8},"interactive":1}],
	 "spill":{"pools":[{"name":"p","replicas":1,"teams":["a"],"spill_to":["q"]},{"name":"q","replicas":2,"teams":["b"]}],"saturated_at_s":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSpillRunRoutesByPool: in a spill scenario a request runs on the
// replicas of the pool the gateway named (pool p is replica 0, q replicas
// 1 and 2), and without a name on its team's pool's.
func TestSpillRunRoutesByPool(t *testing.T) {
	s := spillTestScenario(t)
	for _, c := range []struct {
		pool string
		want func(team string, replica int) bool
	}{
		{"q", func(_ string, r int) bool { return r == 1 || r == 2 }},
		{"p", func(_ string, r int) bool { return r == 0 }},
		{"", func(team string, r int) bool { return team == "a" && r == 0 || team == "b" && r >= 1 }},
	} {
		gw := &routeTo{passThrough: passThrough{name: "route", policy: EngineFCFS, prio: func(*Request) int { return 0 }}, pool: c.pool}
		var got []*Request
		obs := &recordingGateway{Gateway: gw, seen: &got}
		if _, err := Run(s, obs, RunOptions{Mode: ModeVLLM}); err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatal("no request finished")
		}
		for _, r := range got {
			if !c.want(r.Team, r.Replica) {
				t.Fatalf("pool %q: request of %s ran on replica %d", c.pool, r.Team, r.Replica)
			}
		}
	}
}

// recordingGateway records the finished requests of the gateway it
// wraps.
type recordingGateway struct {
	Gateway
	seen *[]*Request
}

func (g *recordingGateway) Finish(r *Request) {
	*g.seen = append(*g.seen, r)
	g.Gateway.Finish(r)
}

// TestSpillSpecValidated: the spill section's mistakes are errors with
// their paths.
func TestSpillSpecValidated(t *testing.T) {
	_, err := ParseScenario([]byte(`{"name":"sp","seed":3,"duration_s":10,"engine":{"preset":"test","replicas":3},
	 "teams":[{"name":"a","share":0.5},{"name":"b","share":0.5}],
	 "workloads":[{"team":"a","kind":"poisson","rate":5,"prompt":{"dist":"fixed","mean":16},"output":{"dist":"fixed","mean":8}}],
	 "spill":{"pools":[{"name":"p","replicas":1,"teams":["a","x"],"spill_to":["p"]},{"name":"q","replicas":1,"teams":[]}],"saturated_at_s":50,
	   "targets":{"borrowers_over_capacity":{"at_least":0}}}}`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`spill.pools[0].teams[1]: unknown team "x"`, `spill.pools[0].spill_to[0]: must name another pool`,
		`team "b" is in no pool`, `replicas sum to 2, engine.replicas is 3`, `spill.saturated_at_s: must be in (0, duration_s)`,
		`spill.targets.borrowers_over_capacity: must set at_most`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestWindowTTFT: the fallback target's samples are the Within teams'
// interactive requests that arrived in [from, to), sorted, one without a
// first token censored at the run's end; other teams, batch requests and
// arrivals outside the window are left out, and a Within team with none
// has an empty list.
func TestWindowTTFT(t *testing.T) {
	s := time.Second
	reqs := []*Request{
		{Team: "c", Class: Interactive, Arrival: 1 * s, FirstToken: 1*s + 30*time.Millisecond},
		{Team: "c", Class: Interactive, Arrival: 2 * s, FirstToken: 2*s + 10*time.Millisecond},
		{Team: "c", Class: Batch, Arrival: 3 * s, FirstToken: 9 * s},
		{Team: "c", Class: Interactive, Arrival: 4 * s, FirstToken: -1},
		{Team: "c", Class: Interactive, Arrival: 5 * s, FirstToken: 5*s + time.Millisecond}, // at to: out
		{Team: "c", Class: Interactive, Arrival: 0, FirstToken: time.Millisecond},           // before from: out
		{Team: "f", Class: Interactive, Arrival: 2 * s, FirstToken: 3 * s},
	}
	got := windowTTFT(reqs, []string{"c", "d"}, 500*time.Millisecond, 5*s, 20*s)
	want := map[string][]time.Duration{"c": {10 * time.Millisecond, 30 * time.Millisecond, 16 * s}, "d": {}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("windowTTFT = %v, want %v", got, want)
	}
}
