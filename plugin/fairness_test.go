package plugin_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
)

// The statistical properties run on virtual time: the host's VirtualClock
// follows the simulator's clock, each request goes through plugin.wasm on
// a host Stream, and its rewritten priority is submitted to the
// simulator's engine. Nothing depends on the speed of the machine.

// vtConfig: one pool of capacity 20 (the engine's max_num_seqs), three
// teams; decay slow enough not to matter within a run.
var vtConfig = `{
  "tick": "1s",
  "half_life": "100000h",
  "pools": [{"name": "gpu", "capacity": 20, "models": ["` + vllmsim.DefaultModel + `"],
    "teams": {"a": {"share": 0.5}, "b": {"share": 0.3}, "c": {"share": 0.2}}}]
}`

func vtEngine() vllmsim.EngineConfig {
	c := vllmsim.DefaultConfig()
	c.MaxNumSeqs = 20
	c.MaxBatchedTokens = 2048
	c.NumBlocks = 4096
	c.MaxModelLen = 2048
	return c
}

// vtRun couples the host and the simulator.
type vtRun struct {
	t        *testing.T
	h        *host.Host // nil: no plugin, every request at priority 0
	clock    *host.VirtualClock
	sim      *vllmsim.Sim
	next     int               // VM of the next stream
	reported float64           // Σ cost of the usage vLLM reported (prompt + 2 × completion)
	team     map[string]string // request ID -> team
}

func newVTRun(t *testing.T, withPlugin bool, seed uint64) *vtRun {
	r := &vtRun{t: t, sim: vllmsim.NewSim(vtEngine(), 1, seed), team: map[string]string{}}
	if withPlugin {
		r.clock = host.NewVirtualClock(vllmsim.SimEpoch)
		h, err := compiled(t).Start(context.Background(), host.Options{Profile: hostProfile, VMs: 2, PluginName: pluginName,
			VMID: fmt.Sprintf("%s-%p", t.Name(), r), PluginConfig: []byte(vtConfig), Clock: r.clock, Seed: seed})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		noHostErrors(t, h)
		r.h = h
	}
	return r
}

// ticks runs the host's ticks every second of virtual time until end.
func (r *vtRun) ticks(end time.Time) {
	if r.h == nil {
		return
	}
	var tick func()
	tick = func() {
		r.clock.Set(r.sim.Now())
		r.h.RunDue()
		if r.sim.Now().Before(end) {
			r.sim.After(time.Second, tick)
		}
	}
	r.sim.After(time.Second, tick)
}

// send submits one request of team now; done runs when it finished.
func (r *vtRun) send(team string, prompt, maxTokens int, done func(vllmsim.Record)) {
	var prio int64
	var s *host.Stream
	if r.h != nil {
		r.clock.Set(r.sim.Now())
		s = request(r.h, r.next%2, "/v1/completions", [][2]string{{"x-team", team}}, completions(prompt, maxTokens, false, ""))
		r.next++
		prio = int64(priority(r.t, s))
	}
	hd := r.sim.Submit(vllmsim.Request{Priority: prio, PromptTokens: prompt, MaxTokens: maxTokens}, vllmsim.Callbacks{
		OnFinish: func(rec vllmsim.Record) {
			r.reported += float64(rec.PromptTokens + 2*rec.CompletionTokens)
			if s != nil {
				r.clock.Set(r.sim.Now())
				respondJSON(s, rec.PromptTokens, rec.CompletionTokens)
			}
			done(rec)
		}})
	r.team[hd.ID()] = team
}

// flood keeps n requests of team outstanding until end.
func (r *vtRun) flood(team string, n int, end time.Time, done func(vllmsim.Record)) {
	var one func()
	one = func() {
		rng := r.sim.Rand()
		r.send(team, 100+rng.IntN(200), 50+rng.IntN(100), func(rec vllmsim.Record) {
			done(rec)
			if r.sim.Now().Before(end) {
				one()
			}
		})
	}
	for i := 0; i < n; i++ {
		one()
	}
}

// checkAccounting: after the run nothing is in flight and the charged
// usage is the usage vLLM reported.
func (r *vtRun) checkAccounting() {
	r.t.Helper()
	if r.h == nil {
		return
	}
	r.clock.Set(r.sim.Now())
	checkIdle(r.t, r.h, "gpu")
	charged := 0.0
	for _, s := range teamStats(r.t, r.h, "gpu") {
		charged += s.Usage
	}
	if math.Abs(charged-r.reported) > 1e-4*r.reported {
		r.t.Errorf("charged usage %v, reported %v", charged, r.reported)
	}
}

// TestFairnessAllTeamsFlooding: when every team floods the pool, each
// gets its share of the throughput (tokens processed), within ±0.05.
func TestFairnessAllTeamsFlooding(t *testing.T) {
	r := newVTRun(t, true, 1)
	warm, end := vllmsim.SimEpoch.Add(60*time.Second), vllmsim.SimEpoch.Add(300*time.Second)
	tokens := map[string]float64{}
	count := func(rec vllmsim.Record) {
		if rec.Finished.After(warm) && !rec.Finished.After(end) {
			tokens[r.team[rec.ID]] += float64(rec.PromptTokens + rec.CompletionTokens)
		}
	}
	r.ticks(end)
	r.sim.At(vllmsim.SimEpoch, func() {
		for _, team := range []string{"a", "b", "c"} {
			r.flood(team, 40, end, count)
		}
	})
	r.sim.Run()
	total := tokens["a"] + tokens["b"] + tokens["c"]
	if total == 0 {
		t.Fatal("no throughput")
	}
	for team, share := range map[string]float64{"a": 0.5, "b": 0.3, "c": 0.2} {
		got := tokens[team] / total
		t.Logf("team %s: throughput share %.3f (configured %.2f)", team, got, share)
		if math.Abs(got-share) > 0.05 {
			t.Errorf("team %s throughput share %.3f, want %.2f ± 0.05", team, got, share)
		}
	}
	r.checkAccounting()
}

// queueTimes runs team a flooding and team b sending interactive requests
// (Poisson, 1/s, well within its share) and returns b's queue times and
// how far each exceeded what vLLM's scheduler implies: admission at the
// first step after a running request finishes (vLLM never preempts a
// running request for a waiting one).
func queueTimes(t *testing.T, withPlugin bool) (queue []time.Duration, excess time.Duration) {
	r := newVTRun(t, withPlugin, 2)
	end := vllmsim.SimEpoch.Add(180 * time.Second)
	r.ticks(end)
	var brecs []vllmsim.Record
	r.sim.At(vllmsim.SimEpoch, func() { r.flood("a", 60, end, func(vllmsim.Record) {}) })
	var arrive func()
	arrive = func() {
		if !r.sim.Now().Before(end) {
			return
		}
		if r.sim.Now().After(vllmsim.SimEpoch.Add(20 * time.Second)) {
			rng := r.sim.Rand()
			r.send("b", 100+rng.IntN(200), 20+rng.IntN(40), func(rec vllmsim.Record) { brecs = append(brecs, rec) })
		}
		r.sim.After(time.Duration(r.sim.Rand().ExpFloat64()*float64(time.Second)), arrive)
	}
	r.sim.At(vllmsim.SimEpoch, arrive)
	r.sim.Run()
	all := r.sim.Records()
	finishes := make([]time.Time, 0, len(all))
	for _, rec := range all {
		finishes = append(finishes, rec.Finished)
	}
	sort.Slice(finishes, func(i, j int) bool { return finishes[i].Before(finishes[j]) })
	// What vLLM's scheduler implies: a waiting request is admitted at the
	// first schedule() after a slot frees, once the requests ahead of it in
	// the heap (lower priority, or equal and earlier) are admitted; a
	// step takes at most this long here (2048 prefill tokens and 20
	// decodes at 2k context).
	step := vtEngine().Step.Duration(2048, 20, 20*2048)
	for _, rec := range brecs {
		q := rec.QueueTime()
		queue = append(queue, q)
		ahead := 0
		for _, o := range all {
			if (o.Priority < rec.Priority || o.Priority == rec.Priority && o.Arrival.Before(rec.Arrival)) &&
				o.Arrival.Before(rec.Arrival) && o.Admitted.After(rec.Arrival) {
				ahead++
			}
		}
		i := sort.Search(len(finishes), func(i int) bool { return !finishes[i].Before(rec.Arrival) })
		bound := step
		if i+ahead < len(finishes) {
			bound += finishes[i+ahead].Sub(rec.Arrival)
		}
		if q > bound && q-bound > excess {
			excess = q - bound
		}
	}
	r.checkAccounting()
	return queue, excess
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

// TestFairnessFloodDoesNotDelayWithinShare: a team flooding the pool does
// not delay another team's within-share interactive requests beyond what
// vLLM's own scheduler implies; without the plugin (every request at
// priority 0) they queue behind the flood.
func TestFairnessFloodDoesNotDelayWithinShare(t *testing.T) {
	with, excess := queueTimes(t, true)
	without, _ := queueTimes(t, false)
	if len(with) < 100 {
		t.Fatalf("only %d requests of team b", len(with))
	}
	t.Logf("team b queue time with the plugin: p50 %v p99 %v max %v; without: p50 %v p99 %v",
		percentile(with, 0.5), percentile(with, 0.99), percentile(with, 1), percentile(without, 0.5), percentile(without, 0.99))
	if excess > 0 {
		t.Errorf("a within-share request waited %v longer than vLLM's scheduler implies", excess)
	}
	if percentile(without, 0.5) < 5*percentile(with, 0.5)+time.Millisecond {
		t.Errorf("the scenario does not discriminate: without the plugin p50 %v, with %v", percentile(without, 0.5), percentile(with, 0.5))
	}
}
