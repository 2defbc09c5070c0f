package fairbench

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestScenarioFilesLoad(t *testing.T) {
	ss, err := LoadScenarios(filepath.Join("..", "..", "..", "testdata", "scenarios"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 13 {
		t.Errorf("LoadScenarios found %d scenarios, want 13", len(ss))
	}
	for _, s := range ss {
		if _, err := EngineConfig(s, EnginePriority, Mode45561); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

func TestParseScenarioErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"unknown field", `{"name":"x","bogus":1}`, "unknown field"},
		{"missing everything", `{}`, "name: must not be empty"},
		{"share out of range", `{"name":"x","duration_s":1,"teams":[{"name":"a","share":1.5}],"workloads":[{"team":"a","kind":"burst","count":1,"prompt":{"mean":1},"output":{"mean":1}}]}`, "teams[0].share: must be in (0, 1], got 1.5"},
		{"shares above 1", `{"name":"x","duration_s":1,"teams":[{"name":"a","share":0.6},{"name":"b","share":0.6}],"workloads":[{"team":"a","kind":"burst","count":1,"prompt":{"mean":1},"output":{"mean":1}}]}`, "shares sum to"},
		{"unknown team", `{"name":"x","duration_s":1,"teams":[{"name":"a","share":1}],"workloads":[{"team":"z","kind":"burst","count":1,"prompt":{"mean":1},"output":{"mean":1}}]}`, `workloads[0].team: unknown team "z"`},
		{"bad kind", `{"name":"x","duration_s":1,"teams":[{"name":"a","share":1}],"workloads":[{"team":"a","kind":"zipf","prompt":{"mean":1},"output":{"mean":1}}]}`, "workloads[0].kind"},
		{"bad dist", `{"name":"x","duration_s":1,"teams":[{"name":"a","share":1}],"workloads":[{"team":"a","kind":"burst","count":1,"prompt":{"dist":"lognormal","mean":10},"output":{"mean":1}}]}`, "workloads[0].prompt: lognormal needs cv > 0"},
		{"warmup past the end", `{"name":"x","duration_s":1,"warmup_s":2,"teams":[{"name":"a","share":1}],"workloads":[{"team":"a","kind":"burst","count":1,"prompt":{"mean":1},"output":{"mean":1}}]}`, "warmup_s"},
	}
	for _, tt := range tests {
		_, err := ParseScenario([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ParseScenario error = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func genScenario() *Scenario {
	return &Scenario{Name: "g", Duration: 1000, Seed: 9, Teams: []TeamSpec{{Name: "a", Share: 1}},
		Workloads: []WorkloadSpec{
			{Team: "a", Kind: KindPoisson, Rate: 5, Interactive: 0.3,
				Prompt: LengthDist{Dist: DistLogNormal, Mean: 500, CV: 0.5, Min: 1},
				Output: LengthDist{Dist: DistExp, Mean: 100, Min: 1}},
			{Team: "a", Kind: KindBurst, Count: 50, Start: 10, Prompt: LengthDist{Mean: 7}, Output: LengthDist{Dist: DistUniform, Min: 3, Max: 5}},
		}}
}

func TestOpenLoopArrivalsDeterministic(t *testing.T) {
	a := OpenLoopArrivals(genScenario(), 9)
	b := OpenLoopArrivals(genScenario(), 9)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("OpenLoopArrivals differs between two calls with the same seed")
	}
	c := OpenLoopArrivals(genScenario(), 10)
	if reflect.DeepEqual(a, c) {
		t.Fatal("OpenLoopArrivals is the same for seeds 9 and 10")
	}
}

func TestOpenLoopArrivalsStatistics(t *testing.T) {
	reqs := OpenLoopArrivals(genScenario(), 9)
	var n, inter, burst int
	var prompt, output float64
	for i, r := range reqs {
		if i > 0 && r.Arrival < reqs[i-1].Arrival {
			t.Fatalf("arrivals out of order at %d", i)
		}
		if r.Stream == 1 {
			burst++
			if r.Arrival != Sec(10) || r.Prompt != 7 || r.Output < 3 || r.Output > 5 {
				t.Errorf("burst request %+v: want arrival 10s, prompt 7, output in [3, 5]", r)
			}
			continue
		}
		n++
		prompt += float64(r.Prompt)
		output += float64(r.Output)
		if r.Class == Interactive {
			inter++
		}
	}
	if burst != 50 {
		t.Errorf("burst requests = %d, want 50", burst)
	}
	// 5000 expected arrivals: a Poisson count is within ±4σ (±283).
	if math.Abs(float64(n)-5000) > 283 {
		t.Errorf("Poisson arrivals = %d, want 5000 ± 283", n)
	}
	if f := float64(inter) / float64(n); math.Abs(f-0.3) > 0.03 {
		t.Errorf("interactive fraction = %.3f, want 0.3 ± 0.03", f)
	}
	if m := prompt / float64(n); math.Abs(m-500)/500 > 0.03 {
		t.Errorf("mean prompt = %.1f, want 500 ± 3%%", m)
	}
	if m := output / float64(n); math.Abs(m-100)/100 > 0.05 {
		t.Errorf("mean output = %.1f, want 100 ± 5%%", m)
	}
}

func TestLengthDistClips(t *testing.T) {
	r := streamRand(1, "clip", 0)
	d := LengthDist{Dist: DistLogNormal, Mean: 100, CV: 3, Min: 20, Max: 150}
	for i := 0; i < 10000; i++ {
		if n := d.Sample(r); n < 20 || n > 150 {
			t.Fatalf("Sample = %d, want within [20, 150]", n)
		}
	}
}

func TestClosedUsersHaveIndependentStreams(t *testing.T) {
	s := &Scenario{Name: "c", Duration: 100, Teams: []TeamSpec{{Name: "a", Share: 1}},
		Workloads: []WorkloadSpec{{Team: "a", Kind: KindClosed, Concurrency: 3, Prompt: LengthDist{Dist: DistExp, Mean: 100}, Output: LengthDist{Mean: 1}}}}
	// User 1's sequence must not depend on how often user 0 drew.
	u1 := closedUsers(s, 5)
	u2 := closedUsers(s, 5)
	for i := 0; i < 10; i++ {
		u1[0].next(0)
	}
	for i := 0; i < 5; i++ {
		a, b := u1[1].next(0), u2[1].next(0)
		if a.Prompt != b.Prompt || a.Class != b.Class {
			t.Fatalf("user 1's request %d differs: %+v vs %+v", i, a, b)
		}
	}
}
