package vllmsim

import (
	"testing"
	"time"
)

// simulate10k runs 10,000 requests (Poisson arrivals at 30/s, prompts of
// 100–2000 tokens, outputs of 20–400, priorities 0–3) on one default
// engine in virtual time and returns the virtual duration.
func simulate10k(cfg EngineConfig) (time.Duration, Stats) {
	sim := NewSim(cfg, 1, 1)
	rng := sim.Rand()
	n := 0
	var next func()
	next = func() {
		sim.Submit(Request{Priority: int64(rng.IntN(4)), PromptTokens: 100 + rng.IntN(1901),
			MaxTokens: 20 + rng.IntN(381)}, Callbacks{})
		if n++; n < 10000 {
			sim.After(time.Duration(rng.ExpFloat64()*float64(time.Second)/30), next)
		}
	}
	sim.At(SimEpoch, next)
	sim.Run()
	return sim.Now().Sub(SimEpoch), sim.Stats()
}

// BenchmarkSim10k reports the wall time of simulating 10,000 requests, the
// requests simulated per wall second, and virtual seconds per wall second.
func BenchmarkSim10k(b *testing.B) {
	for _, cfg := range []struct {
		name string
		cfg  EngineConfig
	}{{"default", DefaultConfig()}, {"demo-45561", func() EngineConfig {
		c := DemoConfig()
		c.WaitingPreempt = WaitingPreempt45561
		return c
	}()}} {
		b.Run(cfg.name, func(b *testing.B) {
			var virt time.Duration
			var st Stats
			for b.Loop() {
				virt, st = simulate10k(cfg.cfg)
			}
			perOp := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(10000/perOp, "requests/s")
			b.ReportMetric(virt.Seconds()/perOp, "virtual-s/s")
			b.ReportMetric(float64(st.Steps), "steps")
			b.ReportMetric(float64(st.Preemptions), "preemptions")
		})
	}
}
