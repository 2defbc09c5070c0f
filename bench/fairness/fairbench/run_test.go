package fairbench

import (
	"slices"
	"strings"
	"testing"
)

func smallScenario() *Scenario {
	d := LengthDist{Dist: DistLogNormal, Mean: 200, CV: 0.5, Min: 8, Max: 800}
	o := LengthDist{Dist: DistLogNormal, Mean: 60, CV: 0.5, Min: 4, Max: 300}
	return &Scenario{Name: "small", Seed: 3, Duration: 20, Warmup: 2, Capacity: 16, HalfLife: 10,
		Engine: EngineSpec{Preset: "demo"},
		Teams:  []TeamSpec{{Name: "a", Share: 0.6}, {Name: "b", Share: 0.4}},
		Workloads: []WorkloadSpec{
			{Team: "a", Kind: KindClosed, Concurrency: 24, Prompt: d, Output: o, Interactive: 0.5},
			{Team: "b", Kind: KindPoisson, Rate: 4, Prompt: d, Output: o, Interactive: 1},
			{Team: "b", Kind: KindBurst, Count: 30, Start: 8, Prompt: d, Output: o},
		}}
}

// capacityCheck wraps a gateway and records the most requests it ever had
// in flight.
type capacityCheck struct {
	Gateway
	d   Dispatcher
	max int
}

func (c *capacityCheck) Start(d Dispatcher, s *Scenario, capacity int) error {
	c.d = d
	return c.Gateway.Start(d, s, capacity)
}

func (c *capacityCheck) Arrive(r *Request) {
	c.Gateway.Arrive(r)
	c.max = max(c.max, c.d.InFlight())
}

func TestRunCompletesEveryRequest(t *testing.T) {
	s := smallScenario()
	for _, mode := range Modes {
		for _, ng := range append(Baselines(), NewNativePlugin, NewAblation(AblationNoEntryPenalty),
			NewAblation(AblationNativeFlow), NewAblation(AblationNativeFlowNoKV), NewAblation(AblationNativeFlowNoLend)) {
			gw := &capacityCheck{Gateway: ng()}
			res, err := Run(s, gw, RunOptions{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			name := mode + "/" + gw.Name()
			for _, tr := range res.Teams {
				for k, c := range tr.Class {
					if c.Unfinished != 0 {
						t.Errorf("%s: team %s class %d: %d of %d requests unfinished after the drain", name, tr.Team, k, c.Unfinished, c.Requests)
					}
				}
			}
			if res.Pool.ServiceRate <= 0 || res.Pool.SlotUtil <= 0 || res.Pool.SlotUtil > 1 || res.Pool.KVUtil <= 0 || res.Pool.KVUtil > 1 {
				t.Errorf("%s: service rate %v, slots %v, KV %v: want > 0 and utilisations in (0, 1]", name, res.Pool.ServiceRate, res.Pool.SlotUtil, res.Pool.KVUtil)
			}
			if gw.Name() == "vtc" && gw.max > 16 {
				t.Errorf("%s: %d requests in flight, want at most C = 16 (VTC holds the rest)", name, gw.max)
			}
			// Holding: borrowers go out only below C, within-share
			// requests always (at most the 16 reserved slots).
			if gw.Name() == "plugin-hold" && gw.max > 16+16 {
				t.Errorf("%s: %d requests in flight, want at most C + the reservations (32)", name, gw.max)
			}
			if gw.Name() == "fcfs" && gw.max <= 16 {
				t.Errorf("%s: at most %d in flight: FCFS should pass the flood through", name, gw.max)
			}
		}
	}
}

func TestRunWithReplicaChanges(t *testing.T) {
	s := smallScenario()
	s.Engine.Replicas = 2
	s.Capacity = 32
	s.CapacityChanges = []CapacityChange{{At: 6, Replicas: 1, Capacity: 16}, {At: 12, Replicas: 3, Capacity: 48}}
	res, err := Run(s, NewNativePlugin(), RunOptions{Mode: ModeVLLM})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pool.ServiceRate <= 0 {
		t.Fatalf("service rate %v, want > 0", res.Pool.ServiceRate)
	}
	again, err := Run(s, NewNativePlugin(), RunOptions{Mode: ModeVLLM})
	if err != nil {
		t.Fatal(err)
	}
	if again.Pool != res.Pool {
		t.Errorf("two runs with replica changes differ: %+v vs %+v", res.Pool, again.Pool)
	}
}

// finishLog records the output length of every finished request.
type finishLog struct {
	Gateway
	out []*Request
}

func (f *finishLog) Finish(r *Request) {
	f.out = append(f.out, r)
	f.Gateway.Finish(r)
}

// TestEngineStopsAtRealOutput: requests carry the client's max_tokens, and
// the engine generates the workload's drawn output, not max_tokens, while
// a request that would exceed the model's context asks for what fits.
func TestEngineStopsAtRealOutput(t *testing.T) {
	s := &Scenario{Name: "cap", Seed: 5, Duration: 5, Capacity: 16, Engine: EngineSpec{Preset: "demo"},
		Teams: []TeamSpec{{Name: "a", Share: 1}},
		Workloads: []WorkloadSpec{
			{Team: "a", Kind: KindPoisson, Rate: 4, Prompt: LengthDist{Mean: 100}, Output: LengthDist{Mean: 20}, MaxTokens: 300},
			{Team: "a", Kind: KindBurst, Count: 2, Prompt: LengthDist{Mean: 4000}, Output: LengthDist{Mean: 50}, MaxTokens: 4096},
			{Team: "a", Kind: KindBurst, Count: 2, Prompt: LengthDist{Mean: 100}, Output: LengthDist{Mean: 50}, MaxTokens: 30},
		}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	gw := &finishLog{Gateway: NewFCFS()}
	if _, err := Run(s, gw, RunOptions{Mode: ModeVLLM}); err != nil {
		t.Fatal(err)
	}
	n := map[int]int{}
	for _, r := range gw.out {
		n[r.Stream]++
		want, wantMax := 20, 300
		switch {
		case r.Stream == 1:
			want, wantMax = 50, 4096-4000
		case r.Stream == 2:
			want, wantMax = 30, 30
		}
		if r.Output != want || r.MaxTokens != wantMax {
			t.Errorf("stream %d: output %d tokens with max_tokens %d, want %d with %d", r.Stream, r.Output, r.MaxTokens, want, wantMax)
		}
	}
	if n[0] < 10 || n[1] != 2 || n[2] != 2 {
		t.Errorf("finished per stream %v, want >= 10, 2, 2", n)
	}
}

// TestGatewayReplicasValidation: gateway_replicas names at least two
// proxies, every weight > 0, and a bad one is reported with its path.
func TestGatewayReplicasValidation(t *testing.T) {
	for _, tt := range []struct {
		split []int
		want  string // "" valid
	}{
		{nil, ""},
		{[]int{7, 2, 1}, ""},
		{[]int{3}, "gateway_replicas: must name at least two proxies"},
		{[]int{7, 0, 1}, "gateway_replicas[1]: must be > 0, got 0"},
	} {
		s := &Scenario{Name: "v", Duration: 5, Engine: EngineSpec{Preset: "demo"}, Teams: []TeamSpec{{Name: "a", Share: 1}},
			Workloads:       []WorkloadSpec{{Team: "a", Kind: KindPoisson, Rate: 1, Prompt: LengthDist{Mean: 10}, Output: LengthDist{Mean: 10}}},
			GatewayReplicas: tt.split}
		err := s.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("gateway_replicas %v: Validate() = %v, want nil", tt.split, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("gateway_replicas %v: Validate() = %v, want %q", tt.split, err, tt.want)
		}
	}
}

// TestGatewayFleetsValidation: gateway_fleets needs gateway_replicas and
// numbers in [2, MaxFleet]; FleetSplit is uneven, favouring the first.
func TestGatewayFleetsValidation(t *testing.T) {
	for _, tt := range []struct {
		split, fleets []int
		want          string // "" valid
	}{
		{[]int{7, 2, 1}, []int{10, 50}, ""},
		{nil, []int{10}, "gateway_fleets: needs gateway_replicas"},
		{[]int{7, 2, 1}, []int{1}, "gateway_fleets[0]: must be in [2, 64], got 1"},
		{[]int{7, 2, 1}, []int{10, 65}, "gateway_fleets[1]: must be in [2, 64], got 65"},
	} {
		s := &Scenario{Name: "v", Duration: 5, Engine: EngineSpec{Preset: "demo"}, Teams: []TeamSpec{{Name: "a", Share: 1}},
			Workloads:       []WorkloadSpec{{Team: "a", Kind: KindPoisson, Rate: 1, Prompt: LengthDist{Mean: 10}, Output: LengthDist{Mean: 10}}},
			GatewayReplicas: tt.split, GatewayFleets: tt.fleets}
		err := s.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("gateway_fleets %v: Validate() = %v, want nil", tt.fleets, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("gateway_fleets %v: Validate() = %v, want %q", tt.fleets, err, tt.want)
		}
	}
	if got, want := FleetSplit(10), []int{12, 6, 4, 3, 2, 2, 2, 2, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("FleetSplit(10) = %v, want %v", got, want)
	}
}

// TestMaxInFlight: a run records the most requests in flight at the
// engines, and of them borrowers (none under FCFS, which never borrows).
func TestMaxInFlight(t *testing.T) {
	s := &Scenario{Name: "m", Seed: 3, Duration: 5, Capacity: 4, Engine: EngineSpec{Preset: "demo"}, Teams: []TeamSpec{{Name: "a", Share: 1}},
		Workloads: []WorkloadSpec{{Team: "a", Kind: KindBurst, Count: 6, Prompt: LengthDist{Mean: 100}, Output: LengthDist{Mean: 50}}}}
	res, err := Run(s, NewFCFS(), RunOptions{Mode: ModeVLLM})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pool.MaxInFlight != 6 || res.Pool.MaxBorrowing != 0 {
		t.Errorf("MaxInFlight, MaxBorrowing = %d, %d after a burst of 6 under FCFS, want 6, 0", res.Pool.MaxInFlight, res.Pool.MaxBorrowing)
	}
}
