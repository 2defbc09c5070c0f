package main

import (
	"math/rand/v2"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
)

// The summary's comparison with no plugin: the same demo load on the same
// simulated engine, but as vLLM runs it without the plugin (its default
// --scheduling-policy fcfs, every request at once, no priorities), computed
// in virtual time with vllmsim.Sim before the summary is printed (a few
// milliseconds for the 35-second demo, so make run takes no longer).
// Each team's clients are the demo's (loadGen.client1): the same random
// seeds and draws (start offset, think time, max_tokens), the same prompt
// lengths (the prompt text the demo sends, counted as the simulator's
// chat template does), closed loop: a client sends its next request after
// the previous one ended and its think time passed. What differs from the
// live run is only the gateway: no plugin, no proxy, no HTTP.

// baselineTeam is one team's figures without the plugin.
type baselineTeam struct {
	Done     int
	Tokens   int64
	P50, P99 time.Duration // TTFT: arrival at the engine to the first token
	HasTTFT  bool
}

// fcfsBaseline runs plan's demo load of -duration duration for load (wall
// time; the engine model runs timeScale wall seconds per model second, as
// -time-scale) on engine with the FCFS policy, then lets the requests in
// flight finish within drain, and returns each team's figures (durations
// in wall time). load is duration but when a test's end condition
// (loadEnd) kept the live load going longer; the teams start at their
// StartAt of duration either way, as the live run's.
func fcfsBaseline(plan poolPlan, engine vllmsim.EngineConfig, duration, load, drain time.Duration, timeScale float64) map[string]baselineTeam {
	engine.Policy = vllmsim.FCFS
	sim := vllmsim.NewSim(engine, 1, 1)
	sim.KeepRecords = false
	model := func(wall time.Duration) time.Duration { return time.Duration(float64(wall) / timeScale) }
	wall := func(m time.Duration) time.Duration { return time.Duration(float64(m) * timeScale) }
	stop := vllmsim.SimEpoch.Add(model(load))
	type acc struct {
		done   int
		tokens int64
		ttft   []time.Duration
	}
	accs := map[string]*acc{}
	var id int64
	for ti, t := range plan.teams {
		a := &acc{}
		accs[t.Name] = a
		for w := range t.Workers {
			seed := uint64(ti)*1000 + uint64(w)
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			var send func()
			send = func() {
				pause := time.Duration(rng.ExpFloat64() * float64(t.Think))
				id++
				maxTokens := t.MaxTokens*3/4 + rng.IntN(t.MaxTokens/2+1)
				promptTokens := min((len(prompt(t.Name, t.Prompt, id))+3)/4+3+4, engine.MaxModelLen-1)
				arrived := sim.Now()
				var first time.Time
				sim.Submit(vllmsim.Request{PromptTokens: promptTokens, MaxTokens: maxTokens}, vllmsim.Callbacks{
					OnFirstToken: func(_ int, at time.Time) { first = at },
					OnFinish: func(rec vllmsim.Record) {
						if rec.Finished.After(stop.Add(model(drain))) {
							return // the live run cancels it at the drain's end
						}
						a.done++
						a.tokens += int64(rec.CompletionTokens)
						if !first.IsZero() {
							a.ttft = append(a.ttft, wall(first.Sub(arrived)))
						}
						next := rec.Finished.Add(model(pause))
						if next.Before(stop) {
							sim.At(next, send)
						}
					},
				})
			}
			start := time.Duration(t.StartAt*float64(duration)) + time.Duration(rng.Int64N(int64(200*time.Millisecond)))
			if start < load {
				sim.At(vllmsim.SimEpoch.Add(model(start)), send)
			}
		}
	}
	sim.RunUntil(stop.Add(model(drain)))
	out := map[string]baselineTeam{}
	for name, a := range accs {
		b := baselineTeam{Done: a.done, Tokens: a.tokens}
		if p50, ok := percentile(a.ttft, 50); ok {
			b.P50, b.HasTTFT = p50, true
			b.P99, _ = percentile(a.ttft, 99)
		}
		out[name] = b
	}
	return out
}
