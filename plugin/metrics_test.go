package plugin

import (
	"encoding/json"
	"math"
	"regexp"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// fakeMetrics records definitions and values like Envoy's stats.
type fakeMetrics struct {
	defs   map[string]uint32
	names  []string
	values []int64
	kinds  []metricKind
}

func (f *fakeMetrics) defineMetric(kind metricKind, name string) (uint32, error) {
	if f.defs == nil {
		f.defs = map[string]uint32{}
	}
	id := uint32(len(f.names))
	f.defs[name] = id
	f.names = append(f.names, name)
	f.values = append(f.values, 0)
	f.kinds = append(f.kinds, kind)
	return id, nil
}

func (f *fakeMetrics) incrementMetric(id uint32, d int64) error { f.values[id] += d; return nil }
func (f *fakeMetrics) recordMetric(id uint32, v int64) error    { f.values[id] = v; return nil }

func (f *fakeMetrics) value(name string) int64 {
	id, ok := f.defs[name]
	if !ok {
		return -1
	}
	return f.values[id]
}

// Envoy's tag extraction regexes for the names (the stats_tags of
// envoy.yaml), applied in order, each removing its match.
var statsTags = []struct{ tag, re string }{
	{"pool", `^(?:wasmcustom\.)?fairshare\.(pool\.([^.]+)\.)`},
	{"team", `^(?:wasmcustom\.)?fairshare\.(team\.([^.]+)\.)`},
	{"class", `^(?:wasmcustom\.)?fairshare\.(class\.([^.]+)\.)`},
	{"standing", `^(?:wasmcustom\.)?fairshare\.(standing\.([^.]+)\.)`},
}

// extract applies the tag regexes as Envoy does: the first capture group
// is removed from the name, the second is the tag value.
func extract(name string) (string, map[string]string) {
	tags := map[string]string{}
	for _, st := range statsTags {
		re := regexp.MustCompile(st.re)
		m := re.FindStringSubmatchIndex(name)
		if m == nil {
			continue
		}
		tags[st.tag] = name[m[4]:m[5]]
		name = name[:m[2]] + name[m[3]:]
	}
	return name, tags
}

func TestMetricNamesSplitIntoTags(t *testing.T) {
	tests := []struct {
		name     string
		wantBase string
		wantTags map[string]string
	}{
		{string(appendRequestMetric(nil, "llama-8b", "search", fairshare.Batch, true)), "fairshare.requests_total",
			map[string]string{"pool": "llama-8b", "team": "search", "class": "batch", "standing": "borrowing"}},
		{string(appendRequestMetric(nil, "p", fairshare.UnknownTeam, fairshare.Interactive, false)), "fairshare.requests_total",
			map[string]string{"pool": "p", "team": "_unknown", "class": "interactive", "standing": "within"}},
		{string(appendTeamMetric(nil, "p", "chat", mUsage)), "fairshare.usage", map[string]string{"pool": "p", "team": "chat"}},
		{string(appendPoolMetric(nil, "p", mCASRetries)), "fairshare.cas_retries_total", map[string]string{"pool": "p"}},
		{string(appendPluginMetric(nil, mUnscheduled)), "fairshare.unscheduled_total", map[string]string{}},
		{"wasmcustom." + string(appendTeamMetric(nil, "p", "chat", mRank)), "wasmcustom.fairshare.rank", map[string]string{"pool": "p", "team": "chat"}},
	}
	for _, tt := range tests {
		base, tags := extract(tt.name)
		if base != tt.wantBase {
			t.Errorf("extract(%s) base = %s, want %s", tt.name, base, tt.wantBase)
		}
		if len(tags) != len(tt.wantTags) {
			t.Errorf("extract(%s) tags = %v, want %v", tt.name, tags, tt.wantTags)
		}
		for k, v := range tt.wantTags {
			if tags[k] != v {
				t.Errorf("extract(%s) tag %s = %q, want %q", tt.name, k, tags[k], v)
			}
		}
	}
}

func TestMetricsDefinedOnce(t *testing.T) {
	for _, tt := range []struct {
		name string
		slot *teamSlot
	}{
		{"no slot", nil},
		{"the team's slot", &teamSlot{name: "a"}},
		{"another team's slot", &teamSlot{name: "b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeMetrics{}
			m := newMetrics(f)
			g := fairshare.Grant{Team: "a", Class: fairshare.Interactive, Borrowing: true}
			for i := 0; i < 3; i++ {
				m.request("p", &g, tt.slot)
			}
			within := fairshare.Grant{Team: "a", Class: fairshare.Batch}
			m.request("p", &within, tt.slot)
			m.poolCounter("p", mCASRetries, 0) // zero deltas are not sent
			if len(f.names) != 3 {
				t.Errorf("defined %v, want 3 metrics", f.names)
			}
			if v := f.value("fairshare.pool.p.team.a.class.interactive.standing.borrowing.requests_total"); v != 3 {
				t.Errorf("requests_total = %d, want 3", v)
			}
			if v := f.value("fairshare.pool.p.team.a.class.batch.standing.within.requests_total"); v != 1 {
				t.Errorf("batch within requests_total = %d, want 1", v)
			}
			if v := f.value("fairshare.pool.p.team.a.borrowed_total"); v != 3 {
				t.Errorf("borrowed_total = %d, want 3", v)
			}
			allocs := testing.AllocsPerRun(100, func() { m.request("p", &g, tt.slot) })
			if allocs != 0 {
				t.Errorf("counting a defined metric allocates %v times", allocs)
			}
		})
	}
}

func TestGauges(t *testing.T) {
	f := &fakeMetrics{}
	m := newMetrics(f)
	m.gauges("p", 8, 0, []fairshare.TeamStat{
		{Team: "a", InFlight: 3, Borrowing: 1, Reserved: 2, Usage: 1.2345, Rank: 1, LevelFairshare: math.Inf(1), Phantoms: 1},
		{Team: fairshare.UnknownTeam, InFlight: 1, Borrowing: 1},
		{Team: "b", Usage: 1e-9, LevelFairshare: 3e8},
		{Team: "c", Usage: 5, LevelFairshare: 0.4},
		{Team: "d", LevelFairshare: math.NaN()},
	})
	for name, want := range map[string]int64{
		"fairshare.pool.p.team.a.in_flight":        3,
		"fairshare.pool.p.team.a.borrowing":        1,
		"fairshare.pool.p.team.a.reserved":         2,
		"fairshare.pool.p.team.a.usage":            1235,
		"fairshare.pool.p.team.a.rank":             1,
		"fairshare.pool.p.team.a.level_fairshare":  1e9, // +Inf (no usage) reads the cap, 1e6
		"fairshare.pool.p.team.b.level_fairshare":  1e9, // capped
		"fairshare.pool.p.team.c.level_fairshare":  400,
		"fairshare.pool.p.team.d.level_fairshare":  0,
		"fairshare.pool.p.team.a.phantoms":         1,
		"fairshare.pool.p.team._unknown.in_flight": 1,
		"fairshare.pool.p.in_flight":               5,
		"fairshare.pool.p.capacity":                8,
	} {
		if got := f.value(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	for i, k := range f.kinds {
		if k != gaugeKind {
			t.Errorf("%s defined as %d, want gauge", f.names[i], k)
		}
	}
}

func TestAPIErrorBody(t *testing.T) {
	for _, e := range []apiError{errNoTeam, errTooLarge, errNotObject, errUnavailable, badClassError("x-request-class", `"quoted"`), unknownTeamError("x-team", "t", "p")} {
		var v struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    int     `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(e.body(), &v); err != nil {
			t.Fatalf("%s: %v", e.body(), err)
		}
		if v.Error.Message != e.message || v.Error.Type != e.typ || v.Error.Code != e.status || (e.param == "") != (v.Error.Param == nil) {
			t.Errorf("body %s does not carry %+v", e.body(), e)
		}
	}
}

func TestStatusJSON(t *testing.T) {
	now := t0.Add(90 * time.Second)
	b := appendStatus(nil, now, 0xabc, []poolStatus{
		{name: "p", capacity: 4, models: []string{"m", "*"}, inFlight: 2, teams: []fairshare.TeamStat{
			{Team: "a", Share: 0.5, Weight: 2, Reserved: 2, InFlight: 2, Borrowing: 1, Usage: 12.5, LevelFairshare: math.Inf(1), Rank: 0, LastUpdate: t0},
			{Team: fairshare.UnknownTeam, LevelFairshare: math.NaN()},
		}},
		{name: "q", capacity: 1, models: []string{"n"}, err: `get "x": failed`},
	})
	var v struct {
		Time   time.Time `json:"time"`
		Holder string    `json:"holder"`
		Pools  []struct {
			Name     string   `json:"name"`
			Capacity int      `json:"capacity"`
			Models   []string `json:"models"`
			InFlight int      `json:"in_flight"`
			Error    string   `json:"error"`
			Teams    []struct {
				Team           string     `json:"team"`
				Share          float64    `json:"share"`
				Weight         float64    `json:"weight"`
				Reserved       int        `json:"reserved"`
				InFlight       int        `json:"in_flight"`
				Borrowing      int        `json:"borrowing"`
				Usage          float64    `json:"usage"`
				LevelFairshare *float64   `json:"level_fairshare"`
				LastUpdate     *time.Time `json:"last_update"`
			} `json:"teams"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("status %s: %v", b, err)
	}
	if !v.Time.Equal(now) || v.Holder != "abc" || len(v.Pools) != 2 || v.Pools[1].Error == "" {
		t.Fatalf("status = %s", b)
	}
	a := v.Pools[0].Teams[0]
	if a.Team != "a" || a.Share != 0.5 || a.Weight != 2 || a.InFlight != 2 || a.Usage != 12.5 || a.LevelFairshare != nil || a.LastUpdate == nil || !a.LastUpdate.Equal(t0) {
		t.Errorf("team a = %+v", a)
	}
	if u := v.Pools[0].Teams[1]; u.Team != "_unknown" || u.LastUpdate != nil {
		t.Errorf("unknown team = %+v", u)
	}
}
